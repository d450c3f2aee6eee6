#include "python/src/c10d_work.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace baton::torch_backend {
namespace {

c10::intrusive_ptr<c10::ivalue::Future> MakeFuture(const std::optional<StreamOrder>& order) {
  // A CPU work's future has no devices. A CUDA work's has its device, so that torch records an
  // event on the current stream when it completes (Settle makes that the work's stream) and
  // consumers (fut.wait(), then() callbacks) order their streams after it.
  std::vector<c10::Device> devices;
  if (order) devices.push_back(order->stream.device());
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                  std::move(devices));
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

c10::Stream CurrentStream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

BatonWork::BatonWork(int rank, c10d::OpType type, std::string what,
                     std::vector<std::shared_ptr<baton::Request>> requests,
                     std::vector<at::Tensor> outputs, std::function<void()> finish,
                     std::vector<at::Tensor> keep, std::shared_ptr<CompletionWatcher> watcher,
                     std::optional<StreamOrder> order)
    : c10d::Work(rank, type),
      rank_(rank),
      what_(std::move(what)),
      requests_(std::move(requests)),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      keep_(std::move(keep)),
      watcher_(std::move(watcher)),
      order_(std::move(order)),
      future_(MakeFuture(order_)) {
  if (order_) end_.emplace(order_->stream.device_type());
}

std::optional<baton::Status> BatonWork::WaitRequests(Clock::time_point deadline) {
  baton::Status first_error;
  for (const auto& request : requests_) {
    baton::Status status;
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      status = request->Wait(std::max(left, std::chrono::milliseconds(0)));
      if (StillRunning(*request, status)) return std::nullopt;
    } else {
      status = request->Wait();
    }
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

void BatonWork::RunHostPart(const baton::Status& requests) {
  std::lock_guard<std::mutex> lock(settle_mu_);
  if (host_done_.load(std::memory_order_relaxed)) return;
  if (!requests.ok()) {
    host_error_ = ToException(rank_, what_, requests);
  } else {
    try {
      // A CUDA work's copies and its end event go on its stream, whichever thread runs this.
      c10::OptionalStreamGuard on_stream;
      if (order_) on_stream.reset_stream(order_->stream);
      if (finish_) finish_();
      if (order_) end_->record(order_->stream);
    } catch (...) {
      host_error_ = std::current_exception();  // a failed copy, or a CUDA error
    }
  }
  finish_ = nullptr;
  host_done_.store(true, std::memory_order_release);
}

void BatonWork::WaitHost() {
  if (!order_) {
    Poll(std::nullopt);
    return;
  }
  if (host_done_.load(std::memory_order_acquire)) return;
  RunHostPart(*WaitRequests(Clock::time_point::max()));
}

bool BatonWork::ReachedEnd(Clock::time_point deadline) const {
  // c10's device-generic API has no host callback for an event, so the host polls it, backing
  // off from 20 us to 1 ms: a short collective is noticed quickly, a long one costs little CPU.
  auto pause = std::chrono::microseconds(20);
  while (!end_->query()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, std::chrono::ceil<Clock::duration>(deadline - now)));
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  return true;
}

std::exception_ptr BatonWork::AsyncError() const {
  if (!order_) return nullptr;
  const std::shared_ptr<baton::Communicator> comm = order_->comm.lock();
  if (comm == nullptr) return nullptr;
  // The error is the communicator's first failure, not necessarily this call's: a communicator
  // with one is unusable (later stream-ordered calls fail at once), so every work that has not
  // completed successfully before it is seen reports it, as ProcessGroupNCCL's works do.
  const baton::Status status = baton::Status::FromC(baton_comm_get_async_error(comm->handle()));
  return status.ok() ? nullptr : ToException(rank_, what_, status);
}

bool BatonWork::Poll(std::optional<std::chrono::milliseconds> limit) {
  if (settled_.load(std::memory_order_acquire)) return true;
  const auto deadline = limit ? Clock::now() + *limit : Clock::time_point::max();
  if (!host_done_.load(std::memory_order_acquire)) {
    const std::optional<baton::Status> requests = WaitRequests(deadline);
    if (!requests) return false;
    RunHostPart(*requests);
  }
  std::exception_ptr error = host_error_;
  if (!error && order_) {
    try {
      if (!ReachedEnd(deadline)) return false;
    } catch (...) {
      error = std::current_exception();  // the event could not be queried: a CUDA error
    }
    if (!error) error = AsyncError();
  }
  Settle(error);
  return true;
}

void BatonWork::Settle(const std::exception_ptr& error) {
  std::lock_guard<std::mutex> lock(settle_mu_);
  if (settled_.load(std::memory_order_relaxed)) return;
  keep_.clear();
  finish(error);  // Work's completed_/exception_, and wakes Work::wait callers
  settled_.store(true, std::memory_order_release);
  if (error) {
    future_->setError(error);
    return;
  }
  // A CUDA future records its completion event on the current stream: make it the work's.
  c10::OptionalStreamGuard on_stream;
  if (order_) on_stream.reset_stream(order_->stream);
  try {
    future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {
    // torch refuses outputs off the future's devices before completing it, so it can still fail.
    future_->setError(std::current_exception());
  }
}

bool BatonWork::isCompleted() { return Poll(std::chrono::milliseconds(0)); }

bool BatonWork::isSuccess() const {
  return settled_.load(std::memory_order_acquire) && !c10d::Work::exception();
}

std::exception_ptr BatonWork::exception() const { return c10d::Work::exception(); }

std::vector<at::Tensor> BatonWork::result() { return outputs_; }

bool BatonWork::wait(std::chrono::milliseconds timeout) {
  if (order_ && timeout == ::kNoTimeout) {
    WaitHost();  // a stream-ordered call's was done when it was enqueued
    if (!settled_.load(std::memory_order_acquire)) {
      std::exception_ptr error = host_error_;
      if (!error) error = AsyncError();
      if (error) Settle(error);
    }
    if (std::exception_ptr error = exception()) std::rethrow_exception(error);
    synchronize();
    return true;
  }
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

void BatonWork::synchronize() {
  if (!order_ || !host_done_.load(std::memory_order_acquire) || !end_->was_marked_for_recording()) {
    return;
  }
  end_->block(CurrentStream(order_->stream.device()));
}

void BatonWork::blockCurrentStream() {
  if (order_) {
    synchronize();
  } else {
    c10d::Work::blockCurrentStream();
  }
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
