// collective/device_staging.h on host memory standing in for device memory: the device's copies
// are counted memcpys and its kernels the host kernels, so what is staged (and how much crosses
// "PCIe") is visible. `run` stands for the schedule across daemons: it adds what the other
// daemons would (a constant per element) in place.

#include "collective/device_staging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <vector>

#include "device/kernels.h"
#include "device/operation_device.h"

namespace baton::collective {
namespace {

// The host kernels as a device's: they never fail.
class HostAsDeviceKernels final : public device::DeviceKernels {
 public:
  device::MemoryKind memory() const override { return device::MemoryKind::kDevice; }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    device::HostKernels().ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    device::HostKernels().ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    device::HostKernels().Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    device::HostKernels().Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override { device::HostKernels().Zero(dst, bytes); }
  absl::Status last_error() const override { return absl::OkStatus(); }
};

class CountingDevice final : public device::OperationDevice {
 public:
  mutable std::atomic<size_t> copied_bytes{0};
  mutable std::atomic<int> copies{0};
  bool fail_copies = false;

  const device::DeviceKernels& kernels() const override { return kernels_; }
  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    if (fail_copies) return absl::UnavailableError("the copy engine is gone");
    std::memcpy(dst, src, bytes);
    copied_bytes += bytes;
    ++copies;
    return absl::OkStatus();
  }
  absl::StatusOr<device::PinnedBuffer> StagingMemory(size_t bytes) const override {
    return device::PinnedBuffer(new std::byte[bytes], [](std::byte* data) { delete[] data; });
  }

 private:
  HostAsDeviceKernels kernels_;
};

Layout TwoDaemons(int local_ranks) {
  Layout layout;
  layout.world_size = 2 * local_ranks;
  layout.self = 0;
  for (int d = 0; d < 2; ++d) {
    LayoutDaemon daemon;
    daemon.address = "daemon" + std::to_string(d);
    daemon.name = daemon.address;
    for (int r = 0; r < local_ranks; ++r) daemon.ranks.push_back(d * local_ranks + r);
    layout.daemons.push_back(daemon);
  }
  return layout;
}

constexpr float kOthers = 1000;  // what the other daemon adds to every element

// The schedule across daemons on the staged parts: adds kOthers to the first part's output,
// reading and writing it through `kernels` (the input may still be arriving).
absl::Status AddOthers(std::span<const LocalPart> staged, const device::Kernels& kernels,
                       int& parts_seen) {
  parts_seen = static_cast<int>(staged.size());
  const LocalPart& first = staged.front();
  const size_t count = first.spec->count;
  std::vector<float> values(count);
  kernels.Copy(values.data(), first.send, count * sizeof(float));
  for (float& v : values) v += kOthers;
  kernels.Copy(first.recv, values.data(), count * sizeof(float));
  return absl::OkStatus();
}

TEST(DeviceStagingTest, AllReduceStagesOneBufferAfterReducingOnTheDevice) {
  constexpr int kLocal = 4;
  constexpr size_t kCount = 1001;
  OpSpec spec;
  spec.count = kCount;
  std::vector<std::vector<float>> send(kLocal, std::vector<float>(kCount));
  std::vector<std::vector<float>> recv(kLocal, std::vector<float>(kCount, -1));
  std::vector<LocalPart> parts;
  for (int r = 0; r < kLocal; ++r) {
    for (size_t i = 0; i < kCount; ++i) send[r][i] = static_cast<float>(r * 10 + i % 7);
    parts.push_back(LocalPart{&spec, reinterpret_cast<const std::byte*>(send[r].data()),
                              reinterpret_cast<std::byte*>(recv[r].data())});
  }
  // Rank 2 in place.
  parts[2].send = parts[2].recv;
  recv[2] = send[2];
  CountingDevice gpu;
  int parts_seen = 0;
  const Layout layout = TwoDaemons(kLocal);
  ASSERT_TRUE(RunStaged(parts, layout, gpu, nullptr, 256, absl::InfiniteFuture(),
                        [&](std::span<const LocalPart> staged, transport::Endpoint*,
                            const device::Kernels* kernels) {
                          return AddOthers(staged, *kernels, parts_seen);
                        })
                  .ok());
  EXPECT_EQ(parts_seen, 1) << "one buffer crosses daemons, not one per local rank";
  EXPECT_EQ(gpu.copied_bytes, 2 * kCount * sizeof(float)) << "one copy each way";
  for (int r = 0; r < kLocal; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      float sum = kOthers;
      for (int s = 0; s < kLocal; ++s) sum += static_cast<float>(s * 10 + i % 7);
      ASSERT_EQ(recv[r][i], sum) << "rank " << r << " element " << i;
    }
  }
}

TEST(DeviceStagingTest, AnInputOverlappingTheFirstOutputIsStagedPerRank) {
  constexpr size_t kCount = 64;
  OpSpec spec;
  spec.count = kCount;
  std::vector<float> first(2 * kCount, 1);
  std::vector<float> other_recv(kCount, -1);
  std::vector<LocalPart> parts = {
      {&spec, reinterpret_cast<const std::byte*>(first.data()),
       reinterpret_cast<std::byte*>(first.data())},
      // Rank 1's input is the second half of rank 0's buffer, overlapping its output's tail.
      {&spec, reinterpret_cast<const std::byte*>(first.data() + kCount / 2),
       reinterpret_cast<std::byte*>(other_recv.data())},
  };
  CountingDevice gpu;
  int parts_seen = 0;
  ASSERT_TRUE(
      RunStaged(parts, TwoDaemons(2), gpu, nullptr, 256, absl::InfiniteFuture(),
                [&](std::span<const LocalPart> s, transport::Endpoint*, const device::Kernels*) {
                  parts_seen = static_cast<int>(s.size());
                  return absl::OkStatus();
                })
          .ok());
  EXPECT_EQ(parts_seen, 2) << "the general staging, every rank's buffers";
}

TEST(DeviceStagingTest, AFailedCopyFailsTheOperation) {
  OpSpec spec;
  spec.count = 16;
  std::vector<float> a(16, 1), b(16, 2), seen(16, 0);
  std::vector<LocalPart> parts = {
      {&spec, reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<std::byte*>(a.data())},
      {&spec, reinterpret_cast<const std::byte*>(b.data()), reinterpret_cast<std::byte*>(b.data())},
  };
  CountingDevice gpu;
  gpu.fail_copies = true;
  // all_reduce: the schedule starts at once; what it reads of the input never arrives.
  const absl::Status status = RunStaged(
      parts, TwoDaemons(2), gpu, nullptr, 256, absl::InfiniteFuture(),
      [&](std::span<const LocalPart> s, transport::Endpoint*, const device::Kernels* kernels) {
        kernels->Copy(seen.data(), s.front().send, 16 * sizeof(float));
        return absl::OkStatus();
      });
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_NE(status.message().find("staging"), std::string::npos) << status;
  EXPECT_EQ(seen, std::vector<float>(16, 0)) << "the copy was skipped";
  // Per-rank staging (all_gather): the copy fails before the schedule runs.
  spec.collective = Collective::kAllGather;
  spec.count = 8;
  bool ran = false;
  const absl::Status gathered =
      RunStaged(parts, TwoDaemons(2), gpu, nullptr, 256, absl::InfiniteFuture(),
                [&](std::span<const LocalPart>, transport::Endpoint*, const device::Kernels*) {
                  ran = true;
                  return absl::OkStatus();
                });
  EXPECT_TRUE(absl::IsUnavailable(gathered)) << gathered;
  EXPECT_FALSE(ran);
}

TEST(DeviceStagingTest, AllToAllVKeepsTheBytesBetweenItsReceiveBlocks) {
  // One local rank of two: it receives 2 elements at offset 0 from rank 0 and 2 at offset 4
  // from rank 1; elements 2, 3 and 6, 7 of its buffer are not the operation's.
  OpSpec spec;
  spec.collective = Collective::kAllToAllV;
  spec.send_counts = {2, 2};
  spec.send_displs = {0, 2};
  spec.recv_counts = {2, 2};
  spec.recv_displs = {0, 4};
  std::vector<float> send = {1, 2, 3, 4};
  std::vector<float> recv = {-1, -1, 7, 7, -1, -1, 7, 7};
  std::vector<LocalPart> parts = {{&spec, reinterpret_cast<const std::byte*>(send.data()),
                                   reinterpret_cast<std::byte*>(recv.data())}};
  Layout layout = TwoDaemons(1);
  CountingDevice gpu;
  ASSERT_TRUE(
      RunStaged(parts, layout, gpu, nullptr, 256, absl::InfiniteFuture(),
                [&](std::span<const LocalPart> s, transport::Endpoint*, const device::Kernels*) {
                  auto* out = reinterpret_cast<float*>(s.front().recv);
                  out[0] = 10;
                  out[1] = 11;
                  out[4] = 12;
                  out[5] = 13;
                  return absl::OkStatus();
                })
          .ok());
  EXPECT_EQ(recv, (std::vector<float>{10, 11, 7, 7, 12, 13, 7, 7}));
}

}  // namespace
}  // namespace baton::collective
