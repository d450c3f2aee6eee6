#include "common/lock_checks.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

#include "absl/synchronization/mutex.h"

namespace baton {

void ConfigureLockChecks() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("BATON_DEBUG_LOCKS");
    const std::string_view mode = env == nullptr ? "" : env;
    absl::SetMutexDeadlockDetectionMode(mode == "1"        ? absl::OnDeadlockCycle::kAbort
                                        : mode == "report" ? absl::OnDeadlockCycle::kReport
                                                           : absl::OnDeadlockCycle::kIgnore);
  });
}

}  // namespace baton
