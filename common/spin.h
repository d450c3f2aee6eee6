#pragma once

// Busy-wait helpers for waits that spin briefly before they block.

#include <sched.h>

#include <algorithm>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace baton {

// Tells the CPU that this is a spin loop (saves power, yields to a sibling hyperthread).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Looks at `done()` until it returns true (then returns true) or `limit` has passed (false). For
// the first `busy` it only pauses between looks, which answers within a microsecond but keeps the
// core; after that it yields the core between looks, so that where busy threads outnumber cores
// (ranks and daemons on a small machine) a spinner hands its core to whoever it waits for instead
// of keeping it from them. A look that makes a system call should not spin busy.
template <typename Done>
bool SpinUntil(absl::Duration limit, absl::Duration busy, Done&& done) {
  if (done()) return true;
  if (limit <= absl::ZeroDuration()) return false;
  const absl::Time start = absl::Now();
  if (busy > absl::ZeroDuration()) {
    const absl::Time busy_until = start + std::min(limit, busy);
    // Reading the clock costs tens of nanoseconds, so look at it every 64 turns.
    for (uint32_t turn = 1;; ++turn) {
      if (done()) return true;
      CpuRelax();
      if (turn % 64 == 0 && absl::Now() >= busy_until) break;
    }
  }
  const absl::Time until = start + limit;
  while (absl::Now() < until) {
    sched_yield();
    if (done()) return true;
  }
  return false;
}

// How long the next wait spins: up to `limit` while the awaited side has been answering within
// it, not at all once it has not. Where the answer takes longer than the spin, spinning would
// only take a core from whoever must answer, which matters where ranks and daemons share a few
// cores. A wait that turns out short again turns spinning back on.
class AdaptiveSpin {
 public:
  explicit AdaptiveSpin(absl::Duration limit) : limit_(limit) {}
  absl::Duration next() const { return last_ <= limit_ ? limit_ : absl::ZeroDuration(); }
  void Record(absl::Duration waited) { last_ = waited; }
  // A wait that gave up before its answer came (a timeout): as one longer than the spin.
  void RecordOutlasted() { last_ = absl::InfiniteDuration(); }

 private:
  absl::Duration limit_;
  absl::Duration last_ = absl::ZeroDuration();
};

}  // namespace baton
