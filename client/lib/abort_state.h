#pragma once

// Whether one rank's side of a communicator was aborted, and why, and what lets the operation in
// flight stop early when it is: the flag the submission channel's wait reads, and the gRPC call
// to cancel. Internal to libbaton. Thread-safe.

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {

class AbortState {
 public:
  // Records `reason` (the first one stays) and cancels the gRPC call being watched.
  void Abort(const absl::Status& reason);
  bool aborted() const { return aborted_.load(); }
  // OK until aborted, then the first reason.
  absl::Status status() const;
  // What ChannelClient::Run looks at while it waits.
  const std::atomic<bool>& flag() const { return aborted_; }

  // Runs the gRPC call `rpc` on `context`, which Abort cancels meanwhile; the abort's reason
  // without running it once aborted.
  template <typename Rpc>
  absl::Status Cancellable(grpc::ClientContext& context, Rpc rpc) {
    {
      absl::MutexLock lock(&mu_);
      if (!reason_.ok()) return reason_;
      running_ = &context;
    }
    absl::Status status = rpc();
    absl::MutexLock lock(&mu_);
    running_ = nullptr;
    return status;
  }

  // The error of an operation that failed with `failure`: the abort's reason when it was cut
  // short by the abort (Cancelled or Aborted after it), else `failure`.
  absl::Status Explain(absl::Status failure) const;

 private:
  mutable absl::Mutex mu_;
  absl::Status reason_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
  grpc::ClientContext* running_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace baton::core
