#include "common/log_limiter.h"

namespace baton {

bool LogLimiter::Allow(absl::Time now, uint64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  // Fixed windows rather than a sliding one: a flood costs one comparison per event, and the log
  // still gets at most twice `lines_` lines in any span of one interval.
  if (now - window_start_ >= interval_) {
    window_start_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= lines_) {
    ++suppressed_;
    return false;
  }
  ++allowed_in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace baton
