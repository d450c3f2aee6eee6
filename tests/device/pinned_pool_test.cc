// device/pinned_pool.h on the host fake: buffers are registered with the device (a stream may
// wait on a word in them, which it may only in registered memory), reused by size, kept up to the
// pool's limit, and safe to release after the pool is gone.

#include "device/pinned_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "device/host_fake.h"

namespace baton::device {
namespace {

// Whether the fake accepts a stream wait on the first word of `data`: it does only in memory
// registered with RegisterHost.
bool Registered(HostFakeDevice& device, std::byte* data) {
  auto* word = reinterpret_cast<std::atomic<uint32_t>*>(data);
  word->store(1);
  std::unique_ptr<FakeStream> stream = device.NewStream();
  const bool accepted = device.WaitValue(stream->handle(), word, 1).ok();
  if (accepted) {
    EXPECT_TRUE(device.Synchronize(stream->handle()).ok());
  }
  return accepted;
}

TEST(PinnedPoolTest, BuffersArePinnedAndReusedBySize) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  PinnedPool pool(device.get(), size_t{64} << 20);
  std::byte* first = nullptr;
  {
    absl::StatusOr<PinnedBuffer> buffer = pool.Take(3 << 20);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    first = buffer->get();
    EXPECT_TRUE(Registered(*device, first));
    (*buffer)[(3 << 20) - 1] = std::byte{1};  // the whole size is usable
    EXPECT_EQ(pool.stats().outstanding, 1u);
  }
  EXPECT_EQ(pool.stats().outstanding, 0u);
  EXPECT_EQ(pool.stats().kept_bytes, 4u << 20) << "rounded up to the granularity";
  {
    absl::StatusOr<PinnedBuffer> smaller = pool.Take(1 << 20);
    ASSERT_TRUE(smaller.ok());
    EXPECT_EQ(smaller->get(), first) << "a kept buffer that fits is reused";
    absl::StatusOr<PinnedBuffer> another = pool.Take(1 << 20);  // the kept one is taken
    ASSERT_TRUE(another.ok());
    EXPECT_NE(another->get(), first);
    EXPECT_TRUE(Registered(*device, another->get()));
  }
  const PinnedPool::Stats stats = pool.stats();
  EXPECT_EQ(stats.made, 2u);
  EXPECT_EQ(stats.reused, 1u);
  EXPECT_EQ(stats.unpinned, 0u);
  EXPECT_EQ(stats.kept_bytes, 6u << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(pool.Take(0).status()));
}

TEST(PinnedPoolTest, ReleasesBeyondTheLimitAreFreed) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  PinnedPool pool(device.get(), PinnedPool::kGranularity);
  {
    absl::StatusOr<PinnedBuffer> a = pool.Take(1);
    absl::StatusOr<PinnedBuffer> b = pool.Take(1);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(pool.stats().kept_bytes, PinnedPool::kGranularity) << "one kept, one freed";
  absl::StatusOr<PinnedBuffer> big = pool.Take(PinnedPool::kGranularity + 1);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(pool.stats().made, 3u) << "the kept buffer is too small";
}

TEST(PinnedPoolTest, ABufferMayOutliveItsPool) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  PinnedBuffer survivor;
  {
    PinnedPool pool(device.get(), size_t{64} << 20);
    absl::StatusOr<PinnedBuffer> buffer = pool.Take(4096);
    ASSERT_TRUE(buffer.ok());
    survivor = *std::move(buffer);
  }
  survivor[0] = std::byte{7};
  survivor.reset();  // freed, not kept: the pool is gone
}

}  // namespace
}  // namespace baton::device
