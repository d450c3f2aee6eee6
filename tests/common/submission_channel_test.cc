#include "common/submission_channel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::channel {
namespace {

// A wait blocked on the futex that a Publish does not wake ends only when its 50 ms slice runs
// out (WaitForChange): a wait this long was most likely a lost wake-up. A woken waiter runs
// within microseconds, or a few milliseconds on a loaded machine.
constexpr absl::Duration kLostWakeUp = absl::Milliseconds(40);

// How many waits of PingPong may last kLostWakeUp all the same: 5% of them, for the scheduler
// stalls of a starved machine (a ThreadSanitizer run beside other tests on 2 cores). A wake-up
// lost routinely exceeds it within seconds: losing every other one makes half the waits slow.
int LostWakeUpBudget(int rounds) { return std::max(10, 2 * rounds * 5 / 100); }

// Two threads play client and daemon over one page, as two processes would over shared memory,
// for `rounds` round trips; counts the waits (both sides') that lasted kLostWakeUp or more, and
// stops as soon as there are more than LostWakeUpBudget. Returns that count.
int PingPong(absl::Duration spin, int rounds) {
  Layout page;
  std::atomic<int> slow_waits{0};
  std::atomic<bool> stop{false};
  const int budget = LostWakeUpBudget(rounds);
  auto wait = [&](const std::atomic<uint32_t>& word, uint32_t seen,
                  std::atomic<uint32_t>& sleeping) {
    const absl::Time start = absl::Now();
    absl::Status status = WaitForChange(word, seen, sleeping, spin, start + absl::Seconds(30), [&] {
      return stop.load() ? absl::CancelledError("the other side stopped") : absl::OkStatus();
    });
    if (absl::Now() - start >= kLostWakeUp) slow_waits.fetch_add(1);
    return status;
  };
  std::thread daemon([&] {
    uint32_t seen = 0;
    // Leaving early (too many slow waits, or a failure) stops the client's wait too.
    absl::Cleanup stop_client = [&] {
      if (!stop.exchange(true)) Wake(page.completed);
    };
    for (int i = 0; i < rounds && slow_waits.load() <= budget; ++i) {
      const absl::Status status = wait(page.submitted, seen, page.daemon_sleeping);
      if (absl::IsCancelled(status)) return;
      ASSERT_TRUE(status.ok()) << status;
      seen = page.submitted.load();
      // The descriptor was written before the bump: its count must be this round's.
      WriteResult(page.result, absl::OkStatus(), std::to_string(page.op.count * 2));
      Publish(page.completed, seen, page.client_sleeping);
      if (i + 1 == rounds) std::move(stop_client).Cancel();
    }
  });
  for (int i = 0; i < rounds && slow_waits.load() <= budget; ++i) {
    page.op.count = static_cast<uint64_t>(i);
    Publish(page.submitted, static_cast<uint32_t>(i + 1), page.daemon_sleeping);
    const absl::Status status =
        wait(page.completed, static_cast<uint32_t>(i), page.client_sleeping);
    if (absl::IsCancelled(status)) break;  // the daemon side stopped early and says why
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) break;
    EXPECT_EQ(page.completed.load(), static_cast<uint32_t>(i + 1));
    std::string algorithm;
    EXPECT_TRUE(ReadResult(page.result, &algorithm).ok());
    EXPECT_EQ(algorithm, std::to_string(2 * i));
    if (::testing::Test::HasFailure()) break;
  }
  stop.store(true);
  Wake(page.submitted);
  daemon.join();
  return slow_waits.load();
}

TEST(SubmissionChannelTest, EveryRoundTripArrivesInOrderWhenSpinning) {
  constexpr int kRounds = 20000;
  EXPECT_LE(PingPong(absl::Milliseconds(1), kRounds), LostWakeUpBudget(kRounds));
}

TEST(SubmissionChannelTest, EveryRoundTripArrivesInOrderWhenBothSidesSleepOnTheFutex) {
  // No spin at all: every wait announces itself and blocks on the futex, so every round trip
  // needs two wake-ups; lost ones show as waits that ran out their slice.
  constexpr int kRounds = 2000;
  EXPECT_LE(PingPong(absl::ZeroDuration(), kRounds), LostWakeUpBudget(kRounds))
      << "waits of " << kLostWakeUp << " or more: wake-ups lost";
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
