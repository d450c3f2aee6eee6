#include "common/spin.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(SpinUntilTest, ReturnsAtOnceWhenDoneAndFalseWithoutALimit) {
  int looks = 0;
  EXPECT_TRUE(SpinUntil(absl::Seconds(60), absl::Seconds(60), [&] { return ++looks > 0; }));
  EXPECT_EQ(looks, 1);
  looks = 0;
  EXPECT_FALSE(SpinUntil(absl::ZeroDuration(), absl::ZeroDuration(), [&] { return ++looks < 0; }));
  EXPECT_EQ(looks, 1);
}

TEST(SpinUntilTest, GivesUpAfterItsLimit) {
  for (const absl::Duration busy : {absl::ZeroDuration(), absl::Microseconds(500)}) {
    const absl::Time start = absl::Now();
    EXPECT_FALSE(SpinUntil(absl::Milliseconds(2), busy, [] { return false; }));
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(2)) << "busy " << busy;
  }
}

// Whether it pauses or yields between looks, a spinner sees a change another thread makes.
TEST(SpinUntilTest, SeesAnotherThreadsChangeWhileBusyOrYielding) {
  for (const absl::Duration busy : {absl::ZeroDuration(), absl::Seconds(60)}) {
    std::atomic<bool> flag{false};
    std::thread setter([&flag] {
      absl::SleepFor(absl::Milliseconds(5));
      flag.store(true, std::memory_order_release);
    });
    const absl::Time start = absl::Now();
    EXPECT_TRUE(SpinUntil(absl::Seconds(60), busy,
                          [&flag] { return flag.load(std::memory_order_acquire); }));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "busy " << busy;
    setter.join();
  }
}

TEST(AdaptiveSpinTest, SpinsOnlyWhileTheLastWaitEndedWithinTheLimit) {
  AdaptiveSpin spin(absl::Microseconds(200));
  EXPECT_EQ(spin.next(), absl::Microseconds(200));
  spin.Record(absl::Microseconds(201));
  EXPECT_EQ(spin.next(), absl::ZeroDuration());
  spin.Record(absl::Milliseconds(50));
  EXPECT_EQ(spin.next(), absl::ZeroDuration());
  spin.Record(absl::Microseconds(200));
  EXPECT_EQ(spin.next(), absl::Microseconds(200));
  spin.RecordOutlasted();
  EXPECT_EQ(spin.next(), absl::ZeroDuration());
  spin.Record(absl::Microseconds(3));
  EXPECT_EQ(spin.next(), absl::Microseconds(200));
}

// Spinning off, a wait blocks and its length includes the wake-up, so only a wait that spins can
// show that answers are quick again: every probe_every-th wait spins, less often after each
// probe that fails, and one that succeeds turns spinning back on.
TEST(AdaptiveSpinTest, ProbesWhileOffAndBacksOffAfterFailedProbes) {
  const absl::Duration limit = absl::Microseconds(20);
  const absl::Duration slow = absl::Microseconds(90);  // e.g. an answer in 5 us plus a wake-up
  AdaptiveSpin spin(limit);
  // Waits that block, counting the one that turned spinning off, until the next probe.
  auto waits_until_probe = [&] {
    int waits = 0;
    while (spin.next() == absl::ZeroDuration()) {
      spin.Record(slow);
      ++waits;
      if (waits > 10 * AdaptiveSpin::kMaxProbeEvery) break;
    }
    return waits + 1;
  };
  spin.Record(slow);
  EXPECT_EQ(waits_until_probe(), AdaptiveSpin::kFirstProbeEvery);
  // Failed probes: the interval doubles up to its maximum.
  int expected = AdaptiveSpin::kFirstProbeEvery;
  for (int probe = 0; probe < 8; ++probe) {
    spin.Record(slow);
    expected = std::min(2 * expected, AdaptiveSpin::kMaxProbeEvery);
    EXPECT_EQ(waits_until_probe() - 1, expected - 1) << "after failed probe " << probe;
  }
  // A timeout during a probe counts as a failed one.
  spin.RecordOutlasted();
  EXPECT_EQ(spin.next(), absl::ZeroDuration());
  EXPECT_EQ(waits_until_probe(), AdaptiveSpin::kMaxProbeEvery);
  // A probe answered within the limit: spinning is on again, and the interval starts over.
  spin.Record(absl::Microseconds(4));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(spin.next(), limit);
    spin.Record(absl::Microseconds(4));
  }
  spin.Record(slow);
  EXPECT_EQ(waits_until_probe(), AdaptiveSpin::kFirstProbeEvery);
}

}  // namespace
}  // namespace baton
