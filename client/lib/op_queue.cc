#include "client/lib/op_queue.h"

#include <utility>

namespace baton::core {

absl::Status OpQueue::RunHoldingTurn(Call& call, const CallOptions& options) {
  running_ = true;
  mu_.Unlock();
  absl::Status status = run_(call, options);
  mu_.Lock();
  running_ = false;
  return status;
}

absl::Status OpQueue::RunInTurn(Call call, const CallOptions& options) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (queue_.empty() && !running_) return RunHoldingTurn(call, options);
  }
  auto request = std::make_shared<PendingRequest>();
  Enqueue(std::move(call), options, request);
  return request->Wait(absl::InfiniteDuration());
}

void OpQueue::Enqueue(Call call, const CallOptions& options,
                      std::shared_ptr<PendingRequest> request, bool now_when_idle) {
  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) {
    request->Complete(failed_);
    return;
  }
  if (closing_) {
    request->Complete(absl::FailedPreconditionError("communicator was destroyed"));
    return;
  }
  if (now_when_idle && queue_.empty() && !running_) {
    request->Complete(RunHoldingTurn(call, options));
    return;
  }
  queue_.push_back(Queued{std::move(call), options, std::move(request)});
  if (!worker_.joinable()) worker_ = std::thread([this] { Work(); });
}

void OpQueue::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return (!queue_.empty() && !running_) || (closing_ && queue_.empty());
    };
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // closing
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    next.request->Complete(RunHoldingTurn(next.call, next.options));
  }
}

void OpQueue::Fail(const absl::Status& status) {
  std::deque<Queued> dropped;
  absl::Status first;
  {
    absl::MutexLock lock(&mu_);
    if (failed_.ok()) failed_ = status;
    first = failed_;
    dropped.swap(queue_);
  }
  for (Queued& q : dropped) q.request->Complete(first);
}

void OpQueue::Close() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (worker_.joinable()) worker_.join();
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !running_; };
  mu_.Await(absl::Condition(&idle));
}

}  // namespace baton::core
