#include "daemon/stall_watch.h"

#include <chrono>

#include "common/thread_name.h"

namespace baton::daemon {
namespace {

// Measured on the monotonic clock, so that a step of the wall clock is not taken for a stall.
int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StallWatch::StallWatch(absl::Duration tick, absl::Duration threshold)
    : tick_(tick), threshold_(threshold), last_wake_ns_(MonotonicNanos()), thread_([this] {
        SetThreadName("baton-stall");
        Run();
      }) {}

StallWatch::~StallWatch() {
  stop_.Notify();
  thread_.join();
}

void StallWatch::Run() {
  while (!stop_.WaitForNotificationWithTimeout(tick_)) {
    const int64_t now = MonotonicNanos();
    const absl::Duration late =
        absl::Nanoseconds(now - last_wake_ns_.load(std::memory_order_relaxed)) - tick_;
    absl::MutexLock lock(&mu_);
    if (late > threshold_) {
      const absl::Time end = absl::Now();
      stalls_.push_back(Stall{end - late, end});
      if (stalls_.size() > kKept) stalls_.pop_front();
    }
    last_wake_ns_.store(now, std::memory_order_relaxed);
  }
}

std::optional<absl::Duration> StallWatch::LongestSince(absl::Time since) const {
  absl::MutexLock lock(&mu_);
  std::optional<absl::Duration> longest;
  // Under the lock, so that a stall is seen either here or in stalls_, not twice or never.
  if (const absl::Duration late =
          absl::Nanoseconds(MonotonicNanos() - last_wake_ns_.load(std::memory_order_relaxed)) -
          tick_;
      late > threshold_) {
    longest = late;
  }
  for (const Stall& stall : stalls_) {
    if (stall.end < since) continue;
    const absl::Duration length = stall.end - stall.start;
    if (!longest || length > *longest) longest = length;
  }
  return longest;
}

}  // namespace baton::daemon
