#pragma once

// The host fake's stream engine (device/host_fake.h): a stream is a thread that runs closures in
// the order enqueued, and stream work waits on 32-bit words shared between processes with the
// comparison of cuStreamWaitValue32 and a (process-shared) futex. Internal to the host fake
// (target baton_device): host_fake.cc, fake_memory.cc and fake_event.cc use it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device/device.h"
#include "device/host_fake.h"

namespace baton::device::fake {

// The stream-memory-operation condition: the count may wrap (cuStreamWaitValue32 GEQ).
inline bool Reached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}

// Words are shared between processes: the futex operations are the non-private ones.
// Sleeps while `*word` is `expected`, at most `timeout`; returns early on a wake or a signal.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);
// Wakes every waiter on `word`, in any process.
void FutexWake(std::atomic<uint32_t>* word);

// Told once a closure has run, or was dropped without running.
class Completion {
 public:
  void Finish(bool ran) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    ran_ = ran;
  }
  // Blocks until Finish; returns whether the closure ran.
  bool Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&finished_));
    return ran_;
  }

 private:
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ran_ ABSL_GUARDED_BY(mu_) = false;
};

// Kept by a closure: finishes its Completion when the closure is destroyed, run or dropped.
class CompletionGuard {
 public:
  explicit CompletionGuard(std::shared_ptr<Completion> completion)
      : completion_(std::move(completion)) {}
  ~CompletionGuard() { completion_->Finish(ran_); }
  CompletionGuard(const CompletionGuard&) = delete;
  CompletionGuard& operator=(const CompletionGuard&) = delete;
  void MarkRan() { ran_ = true; }

 private:
  std::shared_ptr<Completion> completion_;
  bool ran_ = false;
};

// A stream: one thread that runs the enqueued closures one at a time. Destroying it stops the
// thread after the closure now running and drops the rest, each dropped closure counted in
// HostFakeDroppedOperations() and destroyed unrun (so a CompletionGuard in it reports "not run").
//
// Threads: Enqueue, pending, stopping and AbandonWait may be called from any thread.
class StreamImpl final : public FakeStream {
 public:
  // A listed stream is known to the registry while it lives (NewStream); the default stream is
  // not listed: the registry finds it by nullptr.
  explicit StreamImpl(bool listed);
  ~StreamImpl() override;

  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;

  StreamHandle handle() const override { return const_cast<StreamImpl*>(this); }

  void Enqueue(std::function<void()> work) override {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
  }

  size_t pending() const override {
    absl::MutexLock lock(&mu_);
    return queue_.size() + (running_ ? 1 : 0);
  }

  // True once destruction began: waits give up (AbandonWait) instead of blocking it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  // Counts the running wait that gave up as a dropped operation.
  void AbandonWait() { abandoned_.fetch_add(1, std::memory_order_relaxed); }

 private:
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  void Run();

  const bool listed_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> abandoned_{0};
  std::thread thread_;
};

}  // namespace baton::device::fake
