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
//
// A wait that does not spin blocks, and its length then includes the wake-up, which on a virtual
// machine whose idle CPUs halt costs tens of microseconds
// (docs/bench/2026-11-per-operation-cost.md): longer than the limit even where the other side
// answered within it. So while spinning is off, every `probe_every`-th wait spins anyway to find
// out; a probe that fails doubles the interval (up to kMaxProbeEvery waits, so that failed probes
// cost at most limit / kMaxProbeEvery per wait), and one that succeeds turns spinning back on.
class AdaptiveSpin {
 public:
  static constexpr int kFirstProbeEvery = 8;
  static constexpr int kMaxProbeEvery = 256;

  explicit AdaptiveSpin(absl::Duration limit) : limit_(limit) {}
  absl::Duration next() const { return on_ || probing() ? limit_ : absl::ZeroDuration(); }
  void Record(absl::Duration waited) {
    if (waited <= limit_) {
      on_ = true;
      probe_every_ = kFirstProbeEvery;
    } else {
      Outlasted();
    }
  }
  // A wait that gave up before its answer came (a timeout): as one longer than the spin.
  void RecordOutlasted() { Outlasted(); }

 private:
  bool probing() const { return !on_ && waits_off_ >= probe_every_; }
  void Outlasted() {
    const bool probed = probing();
    if (probed) probe_every_ = std::min(2 * probe_every_, kMaxProbeEvery);
    if (on_ || probed) {
      on_ = false;
      waits_off_ = 0;
    }
    ++waits_off_;
  }

  absl::Duration limit_;
  bool on_ = true;
  int waits_off_ = 0;  // waits recorded since spinning turned off (or since the last probe)
  int probe_every_ = kFirstProbeEvery;
};

}  // namespace baton
