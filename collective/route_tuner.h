#pragma once

// Where a call that can run either in the node arena or through the daemon runs, from what such
// calls took: an all_reduce within one node too large for one of the arena's slots runs either as
// the ranks reducing their slices in parallel in the arena, a slot at a time, or as one daemon
// thread reducing everything; which is faster depends on the cores, the memory and how many
// ranks share them, so it is measured rather than modelled. Local rank 0 keeps one and its
// choice is everyone's (NodeArena::AgreeOnRoute), so the other ranks' tuners are never asked.
//
// Per size class (SizeClass, collective/tuner.h) and route, the median of the last kWindow times
// measured: a call that a descheduled rank made slow, or the first of a size (new staging memory,
// first touches), does not swing it, and old times drop out. Until both routes have kMinSamples
// samples in a class, calls alternate between them; then the faster runs, and every
// kRecheckEvery-th call of the class runs the other, so that a change in load is noticed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "collective/tuner.h"

namespace baton::collective {

class RouteTuner {
 public:
  enum class Route { kArena = 0, kDaemon = 1 };
  static constexpr int kClasses = kSizeClasses;
  static constexpr int64_t kMinSamples = 8;
  static constexpr int64_t kRecheckEvery = 64;
  static constexpr int kWindow = 16;

  // The route for the next call of `bytes`.
  Route Choose(size_t bytes);
  // A call of `bytes` on `route` took `took`.
  void Add(size_t bytes, Route route, absl::Duration took);
  // The median of the window for `bytes` on `route`, once it has a sample.
  std::optional<absl::Duration> Median(size_t bytes, Route route) const;
  int64_t Samples(size_t bytes, Route route) const;

 private:
  struct Cell {
    std::array<int64_t, kWindow> ns{};  // the last kWindow samples, oldest overwritten first
    int64_t samples = 0;                // ever added
    int64_t Median() const;
  };
  std::array<std::array<Cell, 2>, kClasses> cells_{};
  std::array<int64_t, kClasses> calls_{};
};

const char* RouteName(RouteTuner::Route route);

}  // namespace baton::collective
