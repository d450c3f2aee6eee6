#pragma once

// Notices when this daemon itself did not run: a thread that wakes every `tick` and records each
// wake-up that came much later than asked (the process was stopped with SIGSTOP, its VM paused,
// or it was starved of CPU). A failure that such a stall caused is this daemon's to own: its
// peers timed out waiting for it, and on resuming its own waits expire at once, naming healthy
// peers unless it knows better.

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace baton::daemon {

class StallWatch {
 public:
  // A wake-up later than `tick` + `threshold` counts as a stall; the last kKept are kept.
  static constexpr size_t kKept = 16;
  explicit StallWatch(absl::Duration tick = absl::Milliseconds(100),
                      absl::Duration threshold = absl::Milliseconds(900));
  ~StallWatch();  // stops the thread
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // The longest stall that overlaps [since, now], if any: how long this daemon did not run.
  // One that has just ended counts even if the watching thread has not woken up to record it
  // yet (after SIGCONT every thread wakes at once, and the caller may be first).
  std::optional<absl::Duration> LongestSince(absl::Time since) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Stall {
    absl::Time start;
    absl::Time end;
  };
  void Run();

  const absl::Duration tick_;
  const absl::Duration threshold_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::deque<Stall> stalls_ ABSL_GUARDED_BY(mu_);
  // When the thread last woke, in nanoseconds of the monotonic clock.
  std::atomic<int64_t> last_wake_ns_;
  std::thread thread_;
};

}  // namespace baton::daemon
