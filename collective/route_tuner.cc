#include "collective/route_tuner.h"

#include <algorithm>
#include <bit>

namespace baton::collective {

int RouteTuner::Class(size_t bytes) {
  const int bit = bytes == 0 ? 0 : static_cast<int>(std::bit_width(bytes)) - 1;
  return std::min(bit, kClasses - 1);
}

RouteTuner::Route RouteTuner::Choose(size_t bytes) {
  const int c = Class(bytes);
  const int64_t call = calls_[c]++;
  const Cell& arena = cells_[c][static_cast<int>(Route::kArena)];
  const Cell& daemon = cells_[c][static_cast<int>(Route::kDaemon)];
  if (arena.samples < kMinSamples || daemon.samples < kMinSamples) {
    return arena.samples <= daemon.samples ? Route::kArena : Route::kDaemon;
  }
  const Route faster = arena.mean_ns <= daemon.mean_ns ? Route::kArena : Route::kDaemon;
  if (call % kRecheckEvery == kRecheckEvery - 1) {
    return faster == Route::kArena ? Route::kDaemon : Route::kArena;
  }
  return faster;
}

void RouteTuner::Add(size_t bytes, Route route, absl::Duration took) {
  Cell& cell = cells_[Class(bytes)][static_cast<int>(route)];
  double ns = std::max(0.0, absl::ToDoubleNanoseconds(took));
  if (cell.samples > 0) ns = std::min(ns, kOutlierFactor * cell.mean_ns);
  ++cell.samples;
  const double weight = 1.0 / static_cast<double>(std::min(cell.samples, kWindow));
  cell.mean_ns += (ns - cell.mean_ns) * weight;
}

std::optional<absl::Duration> RouteTuner::Mean(size_t bytes, Route route) const {
  const Cell& cell = cells_[Class(bytes)][static_cast<int>(route)];
  if (cell.samples == 0) return std::nullopt;
  return absl::Nanoseconds(cell.mean_ns);
}

int64_t RouteTuner::Samples(size_t bytes, Route route) const {
  return cells_[Class(bytes)][static_cast<int>(route)].samples;
}

const char* RouteName(RouteTuner::Route route) {
  return route == RouteTuner::Route::kArena ? "arena" : "daemon";
}

}  // namespace baton::collective
