// The collectives' registered memory (collective/registered_memory.h): finding the registration
// a span lies in, scratch registered once and reused, and the operation's endpoint naming
// registrations for every byte that has one.

#include "collective/registered_memory.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/registered_only_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

namespace baton::collective {
namespace {

absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

TEST(RegionTableTest, FindsTheRegionThatHoldsAWholeSpan) {
  std::vector<std::byte> a(100), b(50);
  const std::unique_ptr<transport::MemoryRegion> ra = transport::HostMemoryRegion(a);
  const std::unique_ptr<transport::MemoryRegion> rb = transport::HostMemoryRegion(b);
  RegionTable table;
  table.Add(rb.get());
  table.Add(nullptr);
  table.Add(ra.get());

  std::optional<transport::RegionSlice> found = table.Find(a.data() + 10, 90);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->region, ra.get());
  EXPECT_EQ(found->offset, 10u);
  EXPECT_EQ(found->length, 90u);
  found = table.Find(b.data(), 50);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->region, rb.get());
  EXPECT_FALSE(table.Find(a.data() + 10, 91).has_value());  // runs past the end
  std::vector<std::byte> elsewhere(8);
  EXPECT_FALSE(table.Find(elsewhere.data(), 8).has_value());

  // Overlapping registrations (two ranks' views of one buffer): one that holds it all is found.
  const std::unique_ptr<transport::MemoryRegion> head =
      transport::HostMemoryRegion(transport::ByteSpan(a.data(), 20));
  table.Add(head.get());
  found = table.Find(a.data() + 15, 30);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->region, ra.get());
  found = table.Find(a.data() + 15, 5);
  ASSERT_TRUE(found.has_value());
}

TEST(ScratchPoolTest, RegistersABufferOnceAndReusesIt) {
  auto fabric = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> inner = *fabric->CreateEndpoint("a");
  test::RegisteredOnlyEndpoint endpoint(inner.get());
  ScratchPool pool(&endpoint, size_t{1} << 20);
  const std::byte* first = nullptr;
  for (int op = 0; op < 10; ++op) {
    ScratchPool::Buffer buffer = pool.Take(10000);
    ASSERT_GE(buffer.size(), 10000u);
    if (first == nullptr) first = buffer.data();
    EXPECT_EQ(buffer.data(), first);  // the same memory every time
    std::optional<transport::RegionSlice> slice = pool.Find(buffer.data() + 100, 500);
    ASSERT_TRUE(slice.has_value());
    EXPECT_EQ(slice->offset, 100u);
  }
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(endpoint.registrations(), 1u);
  // A returned buffer is no longer found (its memory is not the caller's any more).
  EXPECT_FALSE(pool.Find(first, 1).has_value());

  // Two at once are two buffers; a much smaller request does not take a big idle one.
  {
    ScratchPool::Buffer one = pool.Take(10000);
    ScratchPool::Buffer two = pool.Take(10000);
    EXPECT_NE(one.data(), two.data());
  }
  EXPECT_EQ(pool.allocations(), 2u);
  ScratchPool::Buffer small = pool.Take(16);
  EXPECT_LT(small.size(), 10000u);
  EXPECT_EQ(pool.allocations(), 3u);
}

TEST(ScratchPoolTest, KeepsNoMoreIdleMemoryThanItsBound) {
  auto fabric = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> inner = *fabric->CreateEndpoint("a");
  test::RegisteredOnlyEndpoint endpoint(inner.get());
  constexpr size_t kKeep = 64 << 10;
  ScratchPool pool(&endpoint, kKeep);
  {
    std::vector<ScratchPool::Buffer> buffers;
    for (int i = 0; i < 8; ++i) buffers.push_back(pool.Take(32 << 10));
    EXPECT_EQ(endpoint.live_regions(), 8u);
  }
  EXPECT_LE(pool.idle_bytes(), kKeep);
  EXPECT_EQ(endpoint.live_regions(), 2u);  // the rest were deregistered and freed
}

TEST(ScratchPoolTest, AnUnpooledBufferIsPlainMemory) {
  ScratchPool::Buffer buffer = ScratchPool::Unpooled(100);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_GE(buffer.size(), 100u);
  buffer.data()[99] = std::byte{7};
  ScratchPool::Buffer moved = std::move(buffer);
  EXPECT_EQ(moved.data()[99], std::byte{7});
}

// Sends and receives of registered memory go as region calls; the rest are counted.
TEST(RegisteredEndpointTest, NamesTheRegistrationOfEveryByteThatHasOne) {
  auto fabric = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> a_inner = *fabric->CreateEndpoint("a");
  std::unique_ptr<transport::Endpoint> b = *fabric->CreateEndpoint("b");
  test::RegisteredOnlyEndpoint a(a_inner.get());
  std::vector<std::byte> buffer(64, std::byte{1});
  std::unique_ptr<transport::MemoryRegion> region =
      *a.RegisterMemory(buffer, transport::MemoryKind::kHost);
  RegionTable table;
  table.Add(region.get());
  ScratchPool pool(&a, 1 << 20);
  RegisteredEndpoint endpoint(&a, {&table, &pool});

  const transport::Tag tag{.comm = 1, .seq = 1};
  ASSERT_TRUE(
      endpoint.Send("b", tag, transport::ConstByteSpan(buffer).subspan(8, 16), Deadline()).ok());
  ScratchPool::Buffer scratch = pool.Take(32);
  ASSERT_TRUE(endpoint
                  .SendAll("b",
                           std::vector<transport::OutMessage>{
                               {transport::Tag{.comm = 1, .seq = 2}, scratch.span().first(32)},
                               {transport::Tag{.comm = 1, .seq = 3}, buffer}},
                           Deadline())
                  .ok());
  EXPECT_EQ(a.raw_bytes(), 0u);
  EXPECT_EQ(endpoint.unregistered_bytes(), 0u);
  std::vector<std::byte> received(16);
  ASSERT_TRUE(b->Recv("a", tag, received, Deadline()).ok());
  EXPECT_EQ(received, std::vector<std::byte>(16, std::byte{1}));

  // Into registered memory.
  ASSERT_TRUE(b->Send("a", transport::Tag{.comm = 1, .seq = 4}, received, Deadline()).ok());
  ASSERT_TRUE(endpoint
                  .Recv("b", transport::Tag{.comm = 1, .seq = 4},
                        transport::ByteSpan(buffer).subspan(32, 16), Deadline())
                  .ok());
  EXPECT_EQ(a.raw_bytes(), 0u);

  // Memory no one registered is moved, and counted.
  std::vector<std::byte> plain(10);
  ASSERT_TRUE(endpoint.Send("b", transport::Tag{.comm = 1, .seq = 5}, plain, Deadline()).ok());
  EXPECT_EQ(endpoint.unregistered_bytes(), 10u);
  EXPECT_EQ(a.raw_bytes(), 10u);
}

}  // namespace
}  // namespace baton::collective
