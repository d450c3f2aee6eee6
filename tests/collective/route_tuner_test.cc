// collective/route_tuner.h: alternating until both routes are measured, then the faster with a
// periodic look at the other, medians that outliers do not move, old times dropping out, size
// classes apart.

#include "collective/route_tuner.h"

#include <gtest/gtest.h>

namespace baton::collective {
namespace {

using Route = RouteTuner::Route;

// Runs `calls` calls of `bytes`, each taking what `took` says for its route; returns how many ran
// in the arena.
int RunCalls(RouteTuner& tuner, size_t bytes, int calls, absl::Duration arena,
             absl::Duration daemon) {
  int in_arena = 0;
  for (int i = 0; i < calls; ++i) {
    const Route route = tuner.Choose(bytes);
    in_arena += route == Route::kArena ? 1 : 0;
    tuner.Add(bytes, route, route == Route::kArena ? arena : daemon);
  }
  return in_arena;
}

TEST(RouteTunerTest, AlternatesUntilBothAreMeasured) {
  RouteTuner tuner;
  const size_t bytes = 1 << 20;
  for (int i = 0; i < 2 * RouteTuner::kMinSamples; ++i) {
    const Route route = tuner.Choose(bytes);
    EXPECT_EQ(route, i % 2 == 0 ? Route::kArena : Route::kDaemon) << i;
    tuner.Add(bytes, route, absl::Microseconds(route == Route::kArena ? 900 : 300));
  }
  EXPECT_EQ(tuner.Samples(bytes, Route::kArena), RouteTuner::kMinSamples);
  EXPECT_EQ(tuner.Median(bytes, Route::kDaemon), absl::Microseconds(300));
}

TEST(RouteTunerTest, RunsTheFasterAndLooksAtTheOtherNowAndThen) {
  RouteTuner tuner;
  const size_t bytes = 3 << 20;
  RunCalls(tuner, bytes, 2 * RouteTuner::kMinSamples, absl::Microseconds(200),
           absl::Microseconds(500));
  const int calls = 10 * RouteTuner::kRecheckEvery;
  const int in_arena =
      RunCalls(tuner, bytes, calls, absl::Microseconds(200), absl::Microseconds(500));
  EXPECT_EQ(in_arena, calls - 10) << "all but one call in kRecheckEvery";
  // Another size class is measured on its own.
  EXPECT_EQ(tuner.Samples(bytes * 2, Route::kArena), 0);
  EXPECT_EQ(tuner.Choose(bytes * 2), Route::kArena);
}

TEST(RouteTunerTest, FollowsAChangeInLoad) {
  RouteTuner tuner;
  const size_t bytes = 1 << 19;
  RunCalls(tuner, bytes, 200, absl::Microseconds(200), absl::Microseconds(500));
  EXPECT_EQ(tuner.Choose(bytes), Route::kArena);
  // The arena gets slower than the daemon (ranks now share their cores with something else):
  // the looks at the daemon route find it faster and the mean of the arena fades to the new
  // times, within a few windows.
  RunCalls(tuner, bytes, 20 * RouteTuner::kRecheckEvery, absl::Microseconds(1500),
           absl::Microseconds(500));
  EXPECT_EQ(tuner.Choose(bytes), Route::kDaemon);
}

TEST(RouteTunerTest, SlowCallsDoNotSwingTheChoice) {
  RouteTuner tuner;
  const size_t bytes = 1 << 21;
  // The first call on each route is slow (new staging memory, first touches), the arena's most.
  tuner.Add(bytes, tuner.Choose(bytes), absl::Milliseconds(50));
  tuner.Add(bytes, tuner.Choose(bytes), absl::Milliseconds(2));
  RunCalls(tuner, bytes, 2 * RouteTuner::kMinSamples, absl::Microseconds(200),
           absl::Microseconds(300));
  ASSERT_TRUE(tuner.Median(bytes, Route::kArena).has_value());
  EXPECT_EQ(*tuner.Median(bytes, Route::kArena), absl::Microseconds(200));
  EXPECT_EQ(tuner.Choose(bytes), Route::kArena);
  tuner.Add(bytes, Route::kArena, absl::Milliseconds(50));  // one call descheduled for 50 ms
  EXPECT_EQ(*tuner.Median(bytes, Route::kArena), absl::Microseconds(200));
}

}  // namespace
}  // namespace baton::collective
