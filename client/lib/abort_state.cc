#include "client/lib/abort_state.h"

namespace baton::core {

void AbortState::Abort(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (reason_.ok()) reason_ = reason;
    if (running_ != nullptr) running_->TryCancel();
  }
  aborted_.store(true);
}

absl::Status AbortState::status() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

absl::Status AbortState::Explain(absl::Status failure) const {
  if (aborted() && (absl::IsCancelled(failure) || absl::IsAborted(failure))) return status();
  return failure;
}

}  // namespace baton::core
