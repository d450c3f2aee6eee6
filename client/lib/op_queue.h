#pragma once

// The order of one rank's operations on one communicator: each runs after every operation
// submitted before it, blocking or not, one at a time. A blocking call runs on its caller's
// thread when nothing is queued or running; the others run on a worker thread that the first
// queued call starts. Internal to libbaton. Thread-safe.

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/call.h"
#include "client/lib/client_core.h"
#include "client/lib/group.h"

namespace baton::core {

class OpQueue {
 public:
  // Runs one call (on the caller's or the worker's thread, one at a time).
  using Runner = std::function<absl::Status(Call& call, const CallOptions& options)>;

  explicit OpQueue(Runner run) : run_(std::move(run)) {}
  ~OpQueue() { Close(); }
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Runs `call` in its turn and returns its status; the failure's status once Fail was called.
  absl::Status RunInTurn(Call call, const CallOptions& options);
  // Queues `call`; `request` completes with its status (with the failure's status once Fail was
  // called, FailedPrecondition once closed). With `now_when_idle`, a call that nothing is ahead
  // of runs on this thread before this returns.
  void Enqueue(Call call, const CallOptions& options, std::shared_ptr<PendingRequest> request,
               bool now_when_idle = false);
  // Fails the queued calls and every later one with `status` (the first one stays); the call
  // running goes on.
  void Fail(const absl::Status& status);
  // Stops taking calls and waits until the queued ones and the one running have finished.
  void Close();

 private:
  struct Queued {
    Call call;
    CallOptions options;
    std::shared_ptr<PendingRequest> request;
  };
  // Runs `call` on this thread while holding the turn.
  absl::Status RunHoldingTurn(Call& call, const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work();

  const Runner run_;
  absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // a call holds the turn (inline or queued)
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;  // started by the first queued call
};

}  // namespace baton::core
