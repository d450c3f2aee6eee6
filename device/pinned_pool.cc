#include "device/pinned_pool.h"

#include <sys/mman.h>

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace baton::device {

// One buffer: anonymous mapped memory and its registration (null when the device refused).
struct PinnedMemory {
  std::byte* data = nullptr;
  size_t size = 0;
  std::unique_ptr<HostRegistration> registration;
  std::shared_ptr<void> also_registered;  // PinnedPool::AlsoRegister's handle

  void Free() {
    also_registered.reset();
    registration.reset();  // unregistered before it is unmapped
    if (data != nullptr) munmap(data, size);
    data = nullptr;
  }
};

struct PinnedPool::State {
  Device* device = nullptr;
  size_t keep_bytes = 0;
  AlsoRegister also_register;
  mutable absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;                       // the pool is gone: releases free
  std::multimap<size_t, PinnedMemory> kept ABSL_GUARDED_BY(mu);  // by size
  std::map<std::byte*, PinnedMemory> out ABSL_GUARDED_BY(mu);    // taken, by address
  Stats stats ABSL_GUARDED_BY(mu);

  // The deleter of a taken buffer.
  static void Release(const std::shared_ptr<State>& state, std::byte* data) {
    PinnedMemory memory;
    {
      absl::MutexLock lock(&state->mu);
      auto it = state->out.find(data);
      if (it == state->out.end()) return;
      memory = std::move(it->second);
      state->out.erase(it);
      --state->stats.outstanding;
      if (!state->closed && state->stats.kept_bytes + memory.size <= state->keep_bytes) {
        state->stats.kept_bytes += memory.size;
        state->kept.emplace(memory.size, std::move(memory));
        return;
      }
    }
    memory.Free();  // not under the lock: unregistering may take a while
  }
};

PinnedPool::PinnedPool(Device* device, size_t keep_bytes, AlsoRegister also_register)
    : state_(std::make_shared<State>()) {
  state_->device = device;
  state_->keep_bytes = keep_bytes;
  state_->also_register = std::move(also_register);
}

PinnedPool::~PinnedPool() {
  std::multimap<size_t, PinnedMemory> kept;
  {
    absl::MutexLock lock(&state_->mu);
    state_->closed = true;
    kept = std::move(state_->kept);
    state_->kept.clear();
    state_->stats.kept_bytes = 0;
  }
  for (auto& [size, memory] : kept) memory.Free();
}

absl::StatusOr<PinnedBuffer> PinnedPool::Take(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a staging buffer of 0 bytes");
  std::shared_ptr<State> state = state_;
  auto handout = [&](PinnedMemory memory) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
    std::byte* data = memory.data;
    state->out.emplace(data, std::move(memory));
    ++state->stats.outstanding;
    return PinnedBuffer(data, [state](std::byte* released) { State::Release(state, released); });
  };
  {
    absl::MutexLock lock(&state->mu);
    auto it = state->kept.lower_bound(bytes);  // the smallest that fits
    if (it != state->kept.end()) {
      PinnedMemory memory = std::move(it->second);
      state->kept.erase(it);
      state->stats.kept_bytes -= memory.size;
      ++state->stats.reused;
      return handout(std::move(memory));
    }
  }
  PinnedMemory memory;
  memory.size = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  void* data =
      mmap(nullptr, memory.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", memory.size, " bytes of host memory for staging"));
  }
  memory.data = static_cast<std::byte*>(data);
  absl::StatusOr<std::unique_ptr<HostRegistration>> registered =
      state->device->RegisterHost(memory.data, memory.size);
  if (state->also_register) {
    absl::StatusOr<std::shared_ptr<void>> also = state->also_register(memory.data, memory.size);
    if (also.ok()) {
      memory.also_registered = *std::move(also);
    } else {
      spdlog::warn("staging memory of {} bytes is not registered: {}", memory.size,
                   also.status().ToString());
    }
  }
  absl::MutexLock lock(&state->mu);
  ++state->stats.made;
  if (registered.ok()) {
    memory.registration = *std::move(registered);
  } else if (state->stats.unpinned++ == 0) {
    spdlog::warn("staging through unpinned host memory (slower copies): {}",
                 registered.status().ToString());
  }
  return handout(std::move(memory));
}

PinnedPool::Stats PinnedPool::stats() const {
  absl::MutexLock lock(&state_->mu);
  return state_->stats;
}

}  // namespace baton::device
