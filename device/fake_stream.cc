#include "device/fake_stream.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/thread_name.h"
#include "device/fake_memory.h"
#include "device/host_fake.h"
#include "spdlog/spdlog.h"

namespace baton::device {
namespace fake {
namespace {

std::atomic<uint64_t> dropped_operations{0};

}  // namespace

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

StreamImpl::StreamImpl(bool listed) : listed_(listed) {
  if (listed_) Registry::Get().AddStream(this);
  thread_ = std::thread([this] { Run(); });
}

StreamImpl::~StreamImpl() {
  if (listed_) Registry::Get().RemoveStream(this);
  stopping_.store(true, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  std::deque<std::function<void()>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queue_);
  }
  const uint64_t dropped = left.size() + abandoned_.load(std::memory_order_relaxed);
  left.clear();  // Synchronize calls waiting on dropped work learn it here
  if (dropped > 0) {
    dropped_operations.fetch_add(dropped, std::memory_order_relaxed);
    spdlog::warn("host fake: a stream was destroyed with {} operation(s) not done; dropped",
                 dropped);
  }
}

void StreamImpl::Run() {
  SetThreadName("fake-stream");
  while (true) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &StreamImpl::HasWorkOrStop));
      if (stop_) return;
      work = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    work();
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
    }
    // `work` is destroyed last: a CompletionGuard in it tells Synchronize that all is done.
  }
}

}  // namespace fake

uint64_t HostFakeDroppedOperations() {
  return fake::dropped_operations.load(std::memory_order_relaxed);
}

}  // namespace baton::device
