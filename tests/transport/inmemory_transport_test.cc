// What only the in-memory transport has: its fabric (addresses, Kill). The Endpoint contract
// itself is tested by transport_conformance_test.

#include "transport/inmemory/inmemory_transport.h"

#include <future>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

TEST(InMemoryTransportTest, AddressesAreUniqueAndReusableAfterDestruction) {
  auto fabric = NewInMemoryFabric();
  auto a = fabric->CreateEndpoint("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->address(), "a");
  EXPECT_EQ(fabric->CreateEndpoint("a").status().code(), absl::StatusCode::kAlreadyExists);
  a->reset();
  EXPECT_TRUE(fabric->CreateEndpoint("a").ok());
}

TEST(InMemoryTransportTest, SendWaitsForThePeerToAppear) {
  auto fabric = NewInMemoryFabric();
  auto a = fabric->CreateEndpoint("a");
  ASSERT_TRUE(a.ok());
  const std::vector<std::byte> sent(5, std::byte{1});
  auto send = std::async(std::launch::async,
                         [&] { return (*a)->Send("late", Tag{.seq = 1}, sent, Deadline()); });
  absl::SleepFor(absl::Milliseconds(20));  // the test is correct whether or not Send waits yet
  auto late = fabric->CreateEndpoint("late");
  ASSERT_TRUE(late.ok());
  std::vector<std::byte> received(5);
  EXPECT_TRUE((*late)->Recv("a", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_TRUE(send.get().ok());
  EXPECT_EQ(received, sent);
}

TEST(InMemoryTransportTest, KillFailsPeersEvenWithoutPriorTrafficAndTheKilledEndpoint) {
  auto fabric = NewInMemoryFabric();
  auto a = fabric->CreateEndpoint("a");
  auto b = fabric->CreateEndpoint("b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto pending = std::async(std::launch::async,
                            [&] { return (*b)->Recv("a", Tag{.seq = 1}, {}, Deadline()); });
  absl::SleepFor(absl::Milliseconds(20));  // correct whether or not the Recv is posted yet
  fabric->Kill("a");
  const absl::Status lost = pending.get();
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.message(), HasSubstr("peer a"));
  // The killed endpoint itself can do nothing any more.
  EXPECT_EQ((*a)->Send("b", Tag{.seq = 2}, {}, Deadline()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*a)->Recv("b", Tag{.seq = 2}, {}, Deadline()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*b)->Send("a", Tag{.seq = 2}, {}, Deadline()).code(), absl::StatusCode::kUnavailable);
}

TEST(InMemoryTransportTest, RestartedPeerIsReachableAgainOnceItSends) {
  auto fabric = NewInMemoryFabric();
  auto a = fabric->CreateEndpoint("a");
  auto b = fabric->CreateEndpoint("b");
  ASSERT_TRUE(a.ok() && b.ok());
  fabric->Kill("a");
  a->reset();
  EXPECT_EQ((*b)->Recv("a", Tag{.seq = 1}, {}, Deadline()).code(), absl::StatusCode::kUnavailable);
  auto restarted = fabric->CreateEndpoint("a");
  ASSERT_TRUE(restarted.ok());
  ASSERT_TRUE((*restarted)->Send("b", Tag{.seq = 1}, {}, Deadline()).ok());
  EXPECT_TRUE((*b)->Recv("a", Tag{.seq = 1}, {}, Deadline()).ok());
  EXPECT_TRUE((*b)->Send("a", Tag{.seq = 2}, {}, Deadline()).ok());
}

// With require_connection_data, a link carries nothing until both endpoints took the other's
// connection data: each side's Connect alone is not enough, and data the peer did not make for
// this endpoint is refused.
TEST(InMemoryTransportTest, LinksCarryNothingUntilConnectionDataIsExchangedBothWays) {
  auto fabric = NewInMemoryFabric({.require_connection_data = true});
  auto a = fabric->CreateEndpoint("a");
  auto b = fabric->CreateEndpoint("b");
  auto c = fabric->CreateEndpoint("c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const absl::Status unlinked = (*a)->Send("b", Tag{.seq = 1}, {}, Deadline());
  EXPECT_EQ(unlinked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unlinked.message(), HasSubstr("peer b"));

  absl::StatusOr<std::string> from_b = (*b)->ConnectionData("a");
  absl::StatusOr<std::string> from_a = (*a)->ConnectionData("b");
  absl::StatusOr<std::string> from_c = (*c)->ConnectionData("a");
  ASSERT_TRUE(from_b.ok() && from_a.ok() && from_c.ok());
  EXPECT_FALSE(from_b->empty());
  EXPECT_NE(*from_b, *from_c);
  // c's data for a is not b's: refused, nothing connected.
  EXPECT_EQ((*a)->Connect("b", *from_c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*a)->Connect("b", "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*a)->Connect("nobody", *from_b).code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*a)->Connect("b", *from_b).ok());
  // One way only: still no link.
  EXPECT_EQ((*a)->Send("b", Tag{.seq = 1}, {}, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->Send("a", Tag{.seq = 1}, {}, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*b)->Connect("a", *from_a).ok());
  ASSERT_TRUE((*b)->Connect("a", *from_a).ok());  // again: nothing changes
  ASSERT_TRUE((*a)->Send("b", Tag{.seq = 1}, {}, Deadline()).ok());
  EXPECT_TRUE((*b)->Recv("a", Tag{.seq = 1}, {}, Deadline()).ok());
  EXPECT_EQ((*a)->Send("c", Tag{.seq = 1}, {}, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
  // A restarted peer makes new data: the old link is gone until it is exchanged again.
  b->reset();
  auto restarted = fabric->CreateEndpoint("b");
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ((*a)->Send("b", Tag{.seq = 2}, {}, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace baton::transport
