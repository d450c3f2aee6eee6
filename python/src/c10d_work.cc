#include "python/src/c10d_work.h"

#include <c10/util/Exception.h>

#include <utility>

namespace baton::torch_backend {
namespace {

c10::intrusive_ptr<c10::ivalue::Future> MakeFuture() {
  // CPU tensors only: a future without devices (no streams to synchronise).
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

// Whether a request that Wait reported as kDeadlineExceeded is still running (rather than
// having failed with that code).
bool StillRunning(baton::Request& request, const baton::Status& waited) {
  return waited.code() == baton::StatusCode::kDeadlineExceeded && !request.Test().has_value();
}

}  // namespace

std::exception_ptr ToException(int rank, const std::string& what, const baton::Status& status) {
  return std::make_exception_ptr(c10::DistBackendError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      c10::str("baton ", what, " failed on rank ", rank, ": ", status.ToString())));
}

BatonWork::BatonWork(int rank, c10d::OpType type, std::string what,
                     std::vector<std::shared_ptr<baton::Request>> requests,
                     std::vector<at::Tensor> outputs, std::function<void()> finish,
                     std::vector<at::Tensor> keep, std::shared_ptr<CompletionWatcher> watcher)
    : c10d::Work(rank, type),
      rank_(rank),
      what_(std::move(what)),
      requests_(std::move(requests)),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      keep_(std::move(keep)),
      watcher_(std::move(watcher)),
      future_(MakeFuture()) {}

c10::intrusive_ptr<BatonWork> BatonWork::Completed(int rank, c10d::OpType type, std::string what,
                                                   const baton::Status& status,
                                                   std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<BatonWork>(
      rank, type, std::move(what), std::vector<std::shared_ptr<baton::Request>>{},
      std::move(outputs), nullptr, std::vector<at::Tensor>{}, nullptr);
  work->Settle(status);
  return work;
}

bool BatonWork::Poll(std::optional<std::chrono::milliseconds> limit) {
  if (settled_.load(std::memory_order_acquire)) return true;
  const auto deadline = limit ? std::chrono::steady_clock::now() + *limit
                              : std::chrono::steady_clock::time_point::max();
  baton::Status first_error;
  for (const auto& request : requests_) {
    baton::Status status;
    if (limit) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      status = request->Wait(std::max(left, std::chrono::milliseconds(0)));
      if (StillRunning(*request, status)) return false;
    } else {
      status = request->Wait();
    }
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  Settle(first_error);
  return true;
}

void BatonWork::Settle(const baton::Status& status) {
  std::lock_guard<std::mutex> lock(settle_mu_);
  if (settled_.load(std::memory_order_relaxed)) return;
  std::exception_ptr error;
  if (!status.ok()) {
    error = ToException(rank_, what_, status);
  } else if (finish_) {
    try {
      finish_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish_ = nullptr;
  keep_.clear();
  finish(error);  // Work's completed_/exception_, and wakes Work::wait callers
  settled_.store(true, std::memory_order_release);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool BatonWork::isCompleted() { return Poll(std::chrono::milliseconds(0)); }

bool BatonWork::isSuccess() const {
  return settled_.load(std::memory_order_acquire) && !c10d::Work::exception();
}

std::exception_ptr BatonWork::exception() const { return c10d::Work::exception(); }

std::vector<at::Tensor> BatonWork::result() { return outputs_; }

bool BatonWork::wait(std::chrono::milliseconds timeout) {
  std::optional<std::chrono::milliseconds> limit;
  if (timeout != ::kNoTimeout) limit = timeout;
  if (!Poll(limit)) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str("baton ", what_, " on rank ", rank_, " did not complete within ", timeout.count(),
                 " ms of Work.wait (it goes on, bounded by the ", "operation's own deadline)"));
  }
  if (std::exception_ptr error = exception()) std::rethrow_exception(error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> BatonWork::getFuture() {
  if (!settled_.load(std::memory_order_acquire) && watcher_ != nullptr &&
      !watched_.exchange(true)) {
    watcher_->Watch(c10::intrusive_ptr<BatonWork>::reclaim_copy(this));
  }
  return future_;
}

CompletionWatcher::~CompletionWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CompletionWatcher::Watch(c10::intrusive_ptr<BatonWork> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    works_.push_back(std::move(work));
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  wake_.notify_one();
}

void CompletionWatcher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !works_.empty(); });
    if (works_.empty()) return;  // stopping, nothing left
    c10::intrusive_ptr<BatonWork> work = std::move(works_.front());
    works_.pop_front();
    lock.unlock();
    work->Poll(std::nullopt);  // bounded: every operation has a deadline
    work.reset();
    lock.lock();
  }
}

}  // namespace baton::torch_backend
