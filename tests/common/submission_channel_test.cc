#include "common/submission_channel.h"

#include <cstring>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::channel {
namespace {

// Two threads play client and daemon over one page, as two processes would over shared memory.
void PingPong(absl::Duration spin, int rounds) {
  Layout page;
  std::thread daemon([&] {
    uint32_t seen = 0;
    for (int i = 0; i < rounds; ++i) {
      ASSERT_TRUE(WaitForChange(page.submitted, seen, page.daemon_sleeping, spin,
                                absl::Now() + absl::Seconds(30), nullptr)
                      .ok());
      seen = page.submitted.load();
      // The descriptor was written before the bump: its count must be this round's.
      WriteResult(page.result, absl::OkStatus(), std::to_string(page.op.count * 2));
      Publish(page.completed, seen, page.client_sleeping);
    }
  });
  for (int i = 0; i < rounds; ++i) {
    page.op.count = static_cast<uint64_t>(i);
    Publish(page.submitted, static_cast<uint32_t>(i + 1), page.daemon_sleeping);
    ASSERT_TRUE(WaitForChange(page.completed, static_cast<uint32_t>(i), page.client_sleeping, spin,
                              absl::Now() + absl::Seconds(30), nullptr)
                    .ok());
    ASSERT_EQ(page.completed.load(), static_cast<uint32_t>(i + 1));
    std::string algorithm;
    ASSERT_TRUE(ReadResult(page.result, &algorithm).ok());
    ASSERT_EQ(algorithm, std::to_string(2 * i));
  }
  daemon.join();
}

TEST(SubmissionChannelTest, EveryRoundTripArrivesInOrderWhenSpinning) {
  PingPong(absl::Milliseconds(1), 20000);
}

TEST(SubmissionChannelTest, EveryRoundTripArrivesInOrderWhenBothSidesSleepOnTheFutex) {
  // No spin at all: every wait announces itself and blocks on the futex. A lost wake-up is
  // recovered only when the waiter's 50 ms slice ends, so losing them routinely would make
  // 2000 rounds take up to 100 s.
  const absl::Time start = absl::Now();
  PingPong(absl::ZeroDuration(), 2000);
  EXPECT_LT(absl::Now() - start, absl::Seconds(50));
}

TEST(SubmissionChannelTest, AWaitEndsAtItsDeadline) {
  Layout page;
  const absl::Time start = absl::Now();
  absl::Status status =
      WaitForChange(page.completed, 0, page.client_sleeping, absl::Microseconds(10),
                    start + absl::Milliseconds(120), nullptr);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(120));
  EXPECT_EQ(page.client_sleeping.load(), 0u);
}

TEST(SubmissionChannelTest, KeepWaitingEndsAWaitWithItsStatus) {
  Layout page;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    stop.store(true);
    Wake(page.completed);
  });
  absl::Status status = WaitForChange(
      page.completed, 0, page.client_sleeping, absl::ZeroDuration(), absl::InfiniteFuture(),
      [&] { return stop.load() ? absl::UnavailableError("closed") : absl::OkStatus(); });
  stopper.join();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_EQ(status.message(), "closed");
}

TEST(SubmissionChannelTest, ResultsRoundTripAndGarbageIsBounded) {
  OpResult result;
  WriteResult(result, absl::FailedPreconditionError("ranks disagree"), "");
  std::string algorithm;
  absl::Status status = ReadResult(result, &algorithm);
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_EQ(status.message(), "ranks disagree");

  WriteResult(result, absl::InternalError(std::string(5000, 'x')), "");
  EXPECT_EQ(ReadResult(result, &algorithm).message().size(), sizeof(result.message));

  // What a confused or hostile peer could leave in the page.
  result.code = 12345;
  result.message_length = UINT32_MAX;
  status = ReadResult(result, &algorithm);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(status.message().size(), sizeof(result.message));
  result.code = 0;
  result.algorithm_length = UINT32_MAX;
  std::memset(result.algorithm, 'r', sizeof(result.algorithm));
  ASSERT_TRUE(ReadResult(result, &algorithm).ok());
  EXPECT_EQ(algorithm.size(), sizeof(result.algorithm));
}

}  // namespace
}  // namespace baton::channel
