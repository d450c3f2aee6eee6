#pragma once

// The c10d::Work of the `baton` torch.distributed backend: one torch call's Baton operations
// (one request, or several for a coalesced call), their outputs, and the copies from staging
// buffers into the caller's tensors that run once they succeed.
//
// This is the edge where Baton meets PyTorch, whose backend API reports failures by throwing
// c10 exceptions (torch.distributed.DistBackendError in Python): Baton's Status values are
// turned into those exceptions here and in c10d_backend.cc, and nowhere else.

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

class BatonWork final : public c10d::Work {
 public:
  // `requests` are the submitted operations (possibly already failed); `outputs` what result()
  // and the future hold; `finish` runs once, after every request succeeded, in whichever thread
  // sees the completion first (it copies staged results into the caller's tensors); `keep` holds
  // tensors the operations read or write until they complete. `what` names the call in errors
  // ("all_reduce of 1024 float32"). Futures complete through `watcher`.
  BatonWork(int rank, c10d::OpType type, std::string what,
            std::vector<std::shared_ptr<baton::Request>> requests, std::vector<at::Tensor> outputs,
            std::function<void()> finish, std::vector<at::Tensor> keep,
            std::shared_ptr<CompletionWatcher> watcher);

  // A work that has already completed with `status` (a blocking call, or one that failed before
  // anything was submitted). `finish` has already run.
  static c10::intrusive_ptr<BatonWork> Completed(int rank, c10d::OpType type, std::string what,
                                                 const baton::Status& status,
                                                 std::vector<at::Tensor> outputs);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  // Waits for the operations (no limit for kNoTimeout; their own deadline still applies), then
  // throws their error, if any. Throws DistBackendError if `timeout` passes first (the operations
  // go on, and a later wait may still succeed).
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Waits up to `limit` (nullopt: until done) and settles the work once every operation has
  // completed; returns whether it has. Thread-safe.
  bool Poll(std::optional<std::chrono::milliseconds> limit);

 private:
  void Settle(const baton::Status& status);

  const int rank_;
  const std::string what_;
  const std::vector<std::shared_ptr<baton::Request>> requests_;
  const std::vector<at::Tensor> outputs_;
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_;
  const std::shared_ptr<CompletionWatcher> watcher_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;

  std::mutex settle_mu_;  // one Settle; guards keep_ and finish_
  std::atomic<bool> settled_{false};
  std::atomic<bool> watched_{false};
};

// Completes the futures of works nobody waits for (DDP's comm hooks chain on get_future()): a
// thread that polls the works handed to it, in order (a communicator completes its operations
// in submission order). Started on first use; the destructor lets the works it holds finish
// (each has a deadline) and joins.
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

}  // namespace baton::torch_backend
