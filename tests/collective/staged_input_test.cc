// collective/staged_input.h: the chunk copier (chunks waited for go first, errors and deadlines
// reach every waiter), and the endpoint and kernels that wait for the chunks they touch.

#include "collective/staged_input.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace baton::collective {
namespace {

constexpr size_t kChunk = 64;
constexpr size_t kChunks = 8;
constexpr size_t kBytes = kChunk * kChunks;

// A copy function that records the order of the chunks it copies and can hold the first one
// back until released, or fail at one offset.
struct Copier {
  absl::Mutex mu;
  std::vector<size_t> order;
  absl::Notification first_started;
  absl::Notification release_first;
  bool hold_first = false;
  size_t fail_at = SIZE_MAX;
  bool fail_all = false;

  StagedInput::CopyFn Fn(const std::byte* base) {
    return [this, base](void* dst, const void* src, size_t bytes) {
      const size_t offset = static_cast<const std::byte*>(src) - base;
      bool first = false;
      {
        absl::MutexLock lock(&mu);
        first = order.empty();
        order.push_back(offset / kChunk);
      }
      if (first) first_started.Notify();
      if (first && hold_first) release_first.WaitForNotification();
      if (fail_all || offset == fail_at) return absl::DataLossError("the device fell off the bus");
      std::memcpy(dst, src, bytes);
      return absl::OkStatus();
    };
  }
};

std::vector<std::byte> Pattern() {
  std::vector<std::byte> bytes(kBytes);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<std::byte>(i * 7 + 3);
  return bytes;
}

TEST(StagedInputTest, ChunksWaitedForAreCopiedFirst) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes);
  Copier copier;
  copier.hold_first = true;
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Seconds(30));
  // While chunk 0 is held, someone waits for chunk 5.
  copier.first_started.WaitForNotification();
  absl::Notification waited;
  std::thread waiter([&] {
    EXPECT_TRUE(input.Await(host.data() + 5 * kChunk + 1, 10).ok());
    EXPECT_EQ(std::memcmp(host.data() + 5 * kChunk, device.data() + 5 * kChunk, kChunk), 0);
    waited.Notify();
  });
  while (input.waiting() == 0) absl::SleepFor(absl::Milliseconds(1));
  copier.release_first.Notify();
  waiter.join();
  ASSERT_TRUE(input.AwaitAll().ok());
  EXPECT_EQ(host, device);
  absl::MutexLock lock(&copier.mu);
  ASSERT_EQ(copier.order.size(), kChunks);
  EXPECT_EQ(copier.order[0], 0u);
  EXPECT_EQ(copier.order[1], 5u) << "the chunk waited for comes next";
  EXPECT_EQ(input.chunks_on_demand(), 1u);
}

TEST(StagedInputTest, MemoryOutsideTheCopyNeedsNoWait) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes);
  Copier copier;
  copier.hold_first = true;
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Seconds(30));
  std::byte elsewhere[16];
  EXPECT_TRUE(input.Await(elsewhere, sizeof elsewhere).ok());
  EXPECT_TRUE(input.Await(host.data() + kBytes, 16).ok()) << "just past the end";
  EXPECT_TRUE(input.Await(host.data(), 0).ok());
  copier.release_first.Notify();
}

TEST(StagedInputTest, AFailedCopyFailsEveryWaitAfterIt) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes);
  Copier copier;
  copier.fail_at = 2 * kChunk;
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Seconds(30));
  const absl::Status all = input.AwaitAll();
  EXPECT_TRUE(absl::IsDataLoss(all)) << all;
  EXPECT_NE(all.message().find("offset 128"), std::string::npos) << all;
  // Once a copy failed, every wait fails, even for a chunk copied before.
  EXPECT_TRUE(absl::IsDataLoss(input.Await(host.data(), 1)));
}

TEST(StagedInputTest, AWaitEndsAtTheDeadline) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes);
  Copier copier;
  copier.hold_first = true;  // never released before the deadline
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Milliseconds(100));
  const absl::Status status = input.Await(host.data(), kBytes);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  copier.release_first.Notify();
}

// ---- StagedOutput ----------------------------------------------------------------------------

// A copy function for the way back: counts copies per chunk, can hold the first one back.
struct BackCopier {
  absl::Mutex mu;
  std::vector<int> copies = std::vector<int>(kChunks, 0);
  absl::Notification first_started;
  absl::Notification release_first;
  bool hold_first = false;
  bool fail = false;

  StagedOutput::CopyFn Fn(const std::byte* device) {
    return [this, device](void* dst, const void* src, size_t bytes) {
      const size_t chunk = (static_cast<const std::byte*>(dst) - device) / kChunk;
      bool first = false;
      {
        absl::MutexLock lock(&mu);
        first = std::accumulate(copies.begin(), copies.end(), 0) == 0;
        ++copies[chunk];
      }
      if (first) first_started.Notify();
      if (first && hold_first) release_first.WaitForNotification();
      if (fail) return absl::InternalError("copy engine error");
      std::memcpy(dst, src, bytes);
      return absl::OkStatus();
    };
  }
  int Copies(size_t chunk) {
    absl::MutexLock lock(&mu);
    return copies[chunk];
  }
};

TEST(StagedOutputTest, ReceivedChunksGoBackAtOnceTheRestAtFinish) {
  std::vector<std::byte> host = Pattern();
  std::vector<std::byte> device(kBytes, std::byte{0});
  BackCopier copier;
  StagedOutput output(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()));
  output.Written(host.data() + 2 * kChunk, kChunk, /*now=*/true);  // a receive completed it
  output.Written(host.data() + 4 * kChunk, 10, /*now=*/false);     // a kernel wrote part of it
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (copier.Copies(2) == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(copier.Copies(2), 1) << "copied before Finish";
  EXPECT_EQ(copier.Copies(4), 0) << "a kernel's write waits for Finish";
  ASSERT_TRUE(output.Finish().ok());
  EXPECT_EQ(device, host) << "Finish copies the rest, written or not";
  EXPECT_EQ(copier.Copies(2), 1) << "not copied twice";
  EXPECT_EQ(output.chunks_early(), 1u);
  EXPECT_EQ(output.chunks_at_finish(), kChunks - 1);
}

TEST(StagedOutputTest, AChunkWrittenAfterItsCopyIsCopiedAgain) {
  std::vector<std::byte> host = Pattern();
  std::vector<std::byte> device(kBytes, std::byte{0});
  BackCopier copier;
  StagedOutput output(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()));
  output.Written(host.data(), kChunk, /*now=*/true);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (output.chunks_early() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  output.BeforeWrite(host.data(), 4);  // the copy is done: returns at once
  host[0] = std::byte{0x77};
  output.Written(host.data(), 4, /*now=*/false);
  ASSERT_TRUE(output.Finish().ok());
  EXPECT_EQ(copier.Copies(0), 2);
  EXPECT_EQ(device[0], std::byte{0x77});
  EXPECT_EQ(device, host);
}

TEST(StagedOutputTest, AWriteWaitsForTheCopyReadingItsChunk) {
  std::vector<std::byte> host = Pattern();
  std::vector<std::byte> device(kBytes, std::byte{0});
  BackCopier copier;
  copier.hold_first = true;
  StagedOutput output(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()));
  output.Written(host.data() + kChunk, kChunk, /*now=*/true);
  copier.first_started.WaitForNotification();            // chunk 1 is being copied, held
  output.BeforeWrite(host.data() + 3 * kChunk, kChunk);  // another chunk: no wait
  std::atomic<bool> returned{false};
  std::thread writer([&] {
    output.BeforeWrite(host.data() + kChunk + 8, 8);
    returned = true;
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (output.writers_waiting() == 0 && !returned.load() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(returned.load()) << "the chunk is still being read";
  EXPECT_EQ(output.writers_waiting(), 1);
  copier.release_first.Notify();
  writer.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(output.writers_waiting(), 0);
  ASSERT_TRUE(output.Finish().ok());
}

// A receive posted into a chunk that is queued to go back (an earlier receive completed it) keeps
// it from being copied until the receive arrived: the copy would read bytes being written.
TEST(StagedOutputTest, AChunkBeingWrittenIsNotCopiedUntilTheWriteEnds) {
  std::vector<std::byte> host = Pattern();
  std::vector<std::byte> device(kBytes, std::byte{0});
  BackCopier copier;
  copier.hold_first = true;
  StagedOutput output(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()));
  output.Written(host.data(), kChunk, /*now=*/true);
  copier.first_started.WaitForNotification();                  // chunk 0 is being copied, held
  output.Written(host.data() + kChunk, kChunk, /*now=*/true);  // queued behind it
  output.BeforeWrite(host.data() + kChunk, kChunk);            // a receive into it is posted
  output.Written(host.data() + 2 * kChunk, kChunk, /*now=*/true);
  copier.release_first.Notify();
  // The queue is in order: once chunk 2 went back, the thread has passed chunk 1.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (copier.Copies(2) == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(copier.Copies(2), 1);
  EXPECT_EQ(copier.Copies(1), 0) << "copied while a receive was writing it";
  host[kChunk] = std::byte{0x55};
  output.Written(host.data() + kChunk, kChunk, /*now=*/true);  // the receive arrived
  while (copier.Copies(1) == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(copier.Copies(1), 1) << "copied back once the write ended";
  ASSERT_TRUE(output.Finish().ok());
  EXPECT_EQ(device, host);
}

TEST(StagedOutputTest, ACopyErrorIsFinishsError) {
  std::vector<std::byte> host = Pattern();
  std::vector<std::byte> device(kBytes, std::byte{0});
  BackCopier copier;
  copier.fail = true;
  StagedOutput output(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()));
  output.Written(host.data(), kBytes, /*now=*/true);
  const absl::Status status = output.Finish();
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  EXPECT_NE(status.message().find("back to device memory"), std::string::npos) << status;
}

// An endpoint that records what each Send carried when it was called.
class RecordingEndpoint final : public transport::Endpoint {
 public:
  std::string address() const override { return "recorder"; }
  absl::Status Send(const std::string&, const transport::Tag&, transport::ConstByteSpan data,
                    absl::Time) override {
    sent.emplace_back(data.begin(), data.end());
    return absl::OkStatus();
  }
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string&, const transport::Tag&,
                                                  transport::ByteSpan data, absl::Time,
                                                  ArrivalCallback) override {
    std::fill(data.begin(), data.end(), std::byte{0x5a});  // "arrives" at once
    return transport::FailedRecv(absl::CancelledError("recorded"));
  }
  void Abort(uint64_t, const absl::Status&) override {}
  void Forget(uint64_t) override {}
  void Restrict(uint64_t, std::span<const std::string>) override {}
  std::vector<transport::LinkStats> Stats() const override { return {}; }

  std::vector<std::vector<std::byte>> sent;
};

TEST(StagingEndpointTest, SendsAndReceivesWaitForTheirChunks) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes, std::byte{0});
  Copier copier;
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Seconds(30));
  RecordingEndpoint inner;
  StagingEndpoint endpoint(&inner, &input);
  // From the last chunk back to the first: each send carries the device's bytes.
  for (size_t chunk = kChunks; chunk-- > 0;) {
    ASSERT_TRUE(endpoint
                    .Send("peer", transport::Tag{1, 1, 0, 0},
                          transport::ConstByteSpan(host.data() + chunk * kChunk, kChunk),
                          absl::InfiniteFuture())
                    .ok());
    EXPECT_EQ(std::memcmp(inner.sent.back().data(), device.data() + chunk * kChunk, kChunk), 0)
        << "chunk " << chunk;
  }
  // A receive into the copy is posted only after its chunk arrived (else the copy would
  // overwrite what it received).
  endpoint
      .PostRecv("peer", transport::Tag{1, 1, 1, 0}, transport::ByteSpan(host.data(), kChunk),
                absl::InfiniteFuture(), nullptr)
      ->Wait()
      .IgnoreError();
  ASSERT_TRUE(input.AwaitAll().ok());
  EXPECT_EQ(host[0], std::byte{0x5a}) << "what was received stays";
}

TEST(StagingKernelsTest, KernelsWaitAndKeepTheFirstError) {
  const std::vector<std::byte> device = Pattern();
  std::vector<std::byte> host(kBytes);
  Copier copier;
  copier.fail_all = true;
  StagedInput input(host.data(), device.data(), kBytes, kChunk, copier.Fn(device.data()),
                    absl::Now() + absl::Seconds(30));
  StagingKernels kernels(&device::HostKernels(), &input);
  std::vector<std::byte> out(kChunk, std::byte{1});
  kernels.Copy(out.data(), host.data() + 3 * kChunk, kChunk);  // waits, sees the failure: skipped
  EXPECT_EQ(out, std::vector<std::byte>(kChunk, std::byte{1}));
  EXPECT_TRUE(absl::IsDataLoss(kernels.error())) << kernels.error();
  std::vector<std::byte> apart(kChunk, std::byte{1});
  kernels.Zero(apart.data(), kChunk);  // memory outside the copy, but after an error nothing runs
  EXPECT_EQ(apart, std::vector<std::byte>(kChunk, std::byte{1}));
  EXPECT_TRUE(absl::IsDataLoss(kernels.error()));
}

}  // namespace
}  // namespace baton::collective
