#pragma once

// Operation requests and groups (like ncclGroupStart/End) for libbaton's core. Internal.
//
// A group is per thread and nests; while one is open, a communicator hands its calls to the
// group (Defer) instead of queueing them. The outermost GroupEnd hands every deferred call back to
// its communicator (GroupMember::SubmitDeferred): the Sends first, in their order, then the other
// calls, in their order, and waits for all. Per (sender, receiver) pair the order of Sends and of
// Recvs is kept, and since a Send completes once the daemon has its data, a ring of Send+Recv pairs
// cannot deadlock however the user queued them.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/lib/call.h"
#include "client/lib/client_core.h"

namespace baton::core {

// A request whose status is set once by whoever runs its operation.
class PendingRequest final : public Request {
 public:
  absl::Status Wait(absl::Duration timeout) override;
  std::optional<absl::Status> Test() override;
  // Sets the status and wakes the waiters; only the first call counts. Calls the OnComplete
  // function first, with the status.
  void Complete(absl::Status status);
  // Called once by Complete (set before the request is submitted).
  void OnComplete(std::function<void(const absl::Status&)> on_complete) {
    on_complete_ = std::move(on_complete);
  }
  // While deferred (queued in a group that has not ended), Wait fails at once with
  // FailedPrecondition rather than waiting for something that cannot start yet.
  void SetDeferred(bool deferred);

 private:
  absl::Notification done_;
  absl::Status status_;  // written once, before done_ is notified
  std::function<void(const absl::Status&)> on_complete_;
  std::atomic<bool> completing_{false};
  std::atomic<bool> deferred_{false};
};

// What a communicator offers the group machinery.
class GroupMember {
 public:
  // Queues a deferred call to run after the communicator's earlier calls; `request` completes
  // with its outcome.
  virtual void SubmitDeferred(Call call, const CallOptions& options,
                              std::shared_ptr<PendingRequest> request) = 0;

 protected:
  ~GroupMember() = default;
};

// Whether this thread has a group open.
bool InGroup();
// Adds a call of `member` to this thread's open group; returns its request (deferred).
std::shared_ptr<PendingRequest> Defer(GroupMember* member, Call call, const CallOptions& options);
// Records an argument error of a call made in this thread's open group (GroupEnd returns it).
void NoteGroupError(const absl::Status& status);
// Fails and drops this thread's deferred calls of `member` (it is being destroyed).
void DropDeferred(const GroupMember* member, const absl::Status& status);

}  // namespace baton::core
