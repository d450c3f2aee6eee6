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

}  // namespace
}  // namespace baton
