#pragma once

// The c10d::Work of the `baton` torch.distributed backend: one torch call's Baton operations
// (one request, or several for a coalesced call), their outputs, and the copies from staging
// buffers into the caller's tensors that run once they succeed.
//
// A call on CPU tensors completes on the host: when its requests have completed and the copies
// have run. A call on CUDA tensors completes in stream order (docs/pytorch.md, "CUDA tensors"):
// its device work (the Baton operation and the copies into the caller's tensors) is enqueued on
// the call's stream, an event is recorded on that stream after it, and the work is complete when
// the stream has reached the event. wait() then orders the caller's current stream after the
// event without blocking the host on the GPU, as ProcessGroupNCCL's works do.
//
// This is the edge where Baton meets PyTorch, whose backend API reports failures by throwing
// c10 exceptions (torch.distributed.DistBackendError in Python): Baton's Status values are
// turned into those exceptions here and in c10d_backend.cc, and nowhere else.

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "baton/baton.hpp"

namespace baton::torch_backend {

class CompletionWatcher;

// Where a call on CUDA tensors runs: the stream its device work is enqueued on (the current
// stream of its tensors' device when it was called) and, for a stream-ordered Baton call
// (baton_call_options_t.on_stream), the communicator whose asynchronous error is its outcome.
// Without `comm` the call's operations completed on the host (a coalesced block).
struct StreamOrder {
  c10::Stream stream;
  std::weak_ptr<baton::Communicator> comm;
};

class BatonWork final : public c10d::Work {
 public:
  // `requests` are the submitted operations (possibly already failed; a stream-ordered call's
  // request says whether it was enqueued); `outputs` what result() and the future hold; `finish`
  // runs once, after every request succeeded, in whichever thread sees that first (it copies
  // staged results into the caller's tensors; for a CUDA call it enqueues those copies on the
  // call's stream); `keep` holds tensors the operations read or write until the work completes.
  // `what` names the call in errors ("all_reduce of 1024 Float"). Futures complete through
  // `watcher`. `order` is set for a call on CUDA tensors, which completes in stream order.
  BatonWork(int rank, c10d::OpType type, std::string what,
            std::vector<std::shared_ptr<baton::Request>> requests, std::vector<at::Tensor> outputs,
            std::function<void()> finish, std::vector<at::Tensor> keep,
            std::shared_ptr<CompletionWatcher> watcher,
            std::optional<StreamOrder> order = std::nullopt);

  // CUDA: whether the stream has reached the work's end (cudaEventQuery), without waiting.
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  // CPU, or CUDA with a `timeout`: waits on the host for the operations (no limit for
  // kNoTimeout; their own deadline still applies) and, for CUDA, for the stream to reach the
  // work's end, then throws their error, if any; throws DistBackendError if `timeout` passes
  // first (the operations go on, and a later wait may still succeed).
  // CUDA without a timeout: never waits for the GPU. It throws what is known to have failed
  // (the host part, or the communicator's asynchronous error), then makes the caller's current
  // stream wait for the work's end, like synchronize().
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  // CUDA: the caller's current stream on the work's device waits for the work's end (Work's
  // contract); nothing for CPU works.
  void synchronize() override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Waits for the requests and runs the host part of the work: `finish`, then, for a CUDA work,
  // the event recorded on its stream. A CPU work is then complete; a CUDA work completes when its
  // stream reaches the event (Poll). Thread-safe.
  void WaitHost();
  // Waits up to `limit` (nullopt: until done) and settles the work once it has completed;
  // returns whether it has. Thread-safe.
  bool Poll(std::optional<std::chrono::milliseconds> limit);

 private:
  using Clock = std::chrono::steady_clock;

  // The requests' first error once every one has completed, or nullopt if one is still running
  // at `deadline`.
  std::optional<baton::Status> WaitRequests(Clock::time_point deadline);
  void RunHostPart(const baton::Status& requests);
  // Whether the stream has reached end_ by `deadline` (CUDA works whose host part succeeded).
  bool ReachedEnd(Clock::time_point deadline) const;
  // A stream-ordered call's outcome as far as it is known: the communicator's asynchronous error.
  std::exception_ptr AsyncError() const;
  void Settle(const std::exception_ptr& error);

  const int rank_;
  const std::string what_;
  const std::vector<std::shared_ptr<baton::Request>> requests_;
  const std::vector<at::Tensor> outputs_;
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_;
  const std::shared_ptr<CompletionWatcher> watcher_;
  const std::optional<StreamOrder> order_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  // CUDA works: recorded on order_->stream by the host part (not at all if that failed).
  std::optional<c10::Event> end_;

  std::mutex settle_mu_;  // one host part and one Settle; guards keep_, finish_, end_'s record
  std::exception_ptr host_error_;  // written once, before host_done_ is set
  std::atomic<bool> host_done_{false};
  std::atomic<bool> settled_{false};
  std::atomic<bool> watched_{false};
};

// Completes the futures of works nobody waits for (DDP's comm hooks chain on get_future()): a
// thread that polls the works handed to it, in order (a communicator completes its operations
// in submission order). Started on first use; the destructor lets the works it holds finish
// (each has a deadline, and a CUDA work's stream is released however its operation ends) and
// joins.
class CompletionWatcher {
 public:
  CompletionWatcher() = default;
  ~CompletionWatcher();
  CompletionWatcher(const CompletionWatcher&) = delete;
  CompletionWatcher& operator=(const CompletionWatcher&) = delete;

  void Watch(c10::intrusive_ptr<BatonWork> work);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<BatonWork>> works_;  // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  std::thread thread_;                               // started under mu_
};

// The exception a failed Baton operation becomes: DistBackendError "baton <what> failed on rank
// <rank>: <CODE>: <message naming the peer>".
std::exception_ptr ToException(int rank, const std::string& what, const baton::Status& status);

// The current stream of `device` in the calling thread (torch.cuda.current_stream for CUDA).
c10::Stream CurrentStream(c10::Device device);

}  // namespace baton::torch_backend
