#include "client/lib/group.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace baton::core {
namespace {

struct Deferred {
  GroupMember* member = nullptr;
  Call call;
  CallOptions options;
  std::shared_ptr<PendingRequest> request;
};

struct GroupState {
  int depth = 0;
  std::vector<Deferred> calls;
  absl::Status first_error;
};

GroupState& ThisThreadsGroup() {
  thread_local GroupState group;
  return group;
}

}  // namespace

absl::Status PendingRequest::Wait(absl::Duration timeout) {
  if (deferred_.load() && !done_.HasBeenNotified()) {
    return absl::FailedPreconditionError(
        "the operation is queued in a group that has not ended (baton_group_end submits it)");
  }
  if (!done_.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError("the operation is still running");
  }
  return status_;
}

std::optional<absl::Status> PendingRequest::Test() {
  if (!done_.HasBeenNotified()) return std::nullopt;
  return status_;
}

void PendingRequest::Complete(absl::Status status) {
  if (completing_.exchange(true)) return;
  if (on_complete_) on_complete_(status);
  status_ = std::move(status);
  done_.Notify();
}

void PendingRequest::SetDeferred(bool deferred) { deferred_.store(deferred); }

bool InGroup() { return ThisThreadsGroup().depth > 0; }

std::shared_ptr<PendingRequest> Defer(GroupMember* member, Call call, const CallOptions& options) {
  auto request = std::make_shared<PendingRequest>();
  request->SetDeferred(true);
  ThisThreadsGroup().calls.push_back(Deferred{member, std::move(call), options, request});
  return request;
}

void NoteGroupError(const absl::Status& status) {
  GroupState& group = ThisThreadsGroup();
  if (group.first_error.ok()) group.first_error = status;
}

void DropDeferred(const GroupMember* member, const absl::Status& status) {
  GroupState& group = ThisThreadsGroup();
  auto dropped = std::stable_partition(group.calls.begin(), group.calls.end(),
                                       [member](const Deferred& d) { return d.member != member; });
  if (dropped == group.calls.end()) return;
  for (auto it = dropped; it != group.calls.end(); ++it) it->request->Complete(status);
  group.calls.erase(dropped, group.calls.end());
  NoteGroupError(status);
}

absl::Status GroupStart() {
  ++ThisThreadsGroup().depth;
  return absl::OkStatus();
}

absl::Status GroupEnd() {
  GroupState& group = ThisThreadsGroup();
  if (group.depth == 0) {
    return absl::FailedPreconditionError("baton_group_end without a matching baton_group_start");
  }
  if (--group.depth > 0) return absl::OkStatus();
  std::vector<Deferred> calls = std::move(group.calls);
  group.calls.clear();
  absl::Status first = std::exchange(group.first_error, absl::OkStatus());
  // Results are reported in the order the user made the calls; submission puts Sends first.
  std::vector<std::shared_ptr<PendingRequest>> requests;
  requests.reserve(calls.size());
  for (const Deferred& d : calls) requests.push_back(d.request);
  std::stable_partition(calls.begin(), calls.end(), [](const Deferred& d) {
    return d.call.spec.collective == collective::Collective::kSend;
  });
  for (Deferred& d : calls) {
    d.request->SetDeferred(false);
    d.member->SubmitDeferred(std::move(d.call), d.options, d.request);
  }
  // Every operation has its deadline (the daemon's, and the client's guard behind it), so this
  // wait ends.
  for (const std::shared_ptr<PendingRequest>& request : requests) {
    absl::Status status = request->Wait(absl::InfiniteDuration());
    if (first.ok() && !status.ok()) first = status;
  }
  return first;
}

}  // namespace baton::core
