#include "collective/route_tuner.h"

#include <algorithm>

namespace baton::collective {

int64_t RouteTuner::Cell::Median() const {
  const auto n = static_cast<size_t>(std::min<int64_t>(samples, kWindow));
  std::array<int64_t, kWindow> sorted = ns;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
  return sorted[n / 2];
}

RouteTuner::Route RouteTuner::Choose(size_t bytes) {
  const int c = SizeClass(bytes);
  const int64_t call = calls_[c]++;
  const Cell& arena = cells_[c][static_cast<int>(Route::kArena)];
  const Cell& daemon = cells_[c][static_cast<int>(Route::kDaemon)];
  if (arena.samples < kMinSamples || daemon.samples < kMinSamples) {
    return arena.samples <= daemon.samples ? Route::kArena : Route::kDaemon;
  }
  const Route faster = arena.Median() <= daemon.Median() ? Route::kArena : Route::kDaemon;
  if (call % kRecheckEvery == kRecheckEvery - 1) {
    return faster == Route::kArena ? Route::kDaemon : Route::kArena;
  }
  return faster;
}

void RouteTuner::Add(size_t bytes, Route route, absl::Duration took) {
  Cell& cell = cells_[SizeClass(bytes)][static_cast<int>(route)];
  cell.ns[static_cast<size_t>(cell.samples % kWindow)] =
      std::max<int64_t>(0, absl::ToInt64Nanoseconds(took));
  ++cell.samples;
}

std::optional<absl::Duration> RouteTuner::Median(size_t bytes, Route route) const {
  const Cell& cell = cells_[SizeClass(bytes)][static_cast<int>(route)];
  if (cell.samples == 0) return std::nullopt;
  return absl::Nanoseconds(cell.Median());
}

int64_t RouteTuner::Samples(size_t bytes, Route route) const {
  return cells_[SizeClass(bytes)][static_cast<int>(route)].samples;
}

const char* RouteName(RouteTuner::Route route) {
  return route == RouteTuner::Route::kArena ? "arena" : "daemon";
}

}  // namespace baton::collective
