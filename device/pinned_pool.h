#pragma once

// Host memory for staging device memory, registered with the device (pinned: Device::RegisterHost,
// cudaHostRegister for CUDA) so that copies to and from it run at the bus's speed, and kept for
// reuse: registering costs about as much as copying the bytes once, so a buffer is registered
// when it is first made and then serves many operations. Released buffers are kept while the
// pool holds at most `keep_bytes` of them; larger releases are freed.
//
// Thread-safe. Buffers may outlive the pool (they are then freed when released).

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace baton::device {

// Host memory whose deleter returns it to its pool.
using PinnedBuffer = std::unique_ptr<std::byte[], std::function<void(std::byte*)>>;

class PinnedPool {
 public:
  // Sizes are rounded up to this (so that buffers fit many requests).
  static constexpr size_t kGranularity = size_t{2} << 20;

  // What else each buffer is registered with when it is made (batond: its data plane, so that a
  // transport moves staged bytes without registering them per operation): the handle returned
  // is released before the buffer's memory is freed. An error leaves the buffer usable (logged
  // once); an empty hook registers nothing.
  using AlsoRegister =
      std::function<absl::StatusOr<std::shared_ptr<void>>(std::byte* data, size_t bytes)>;

  // `device` must outlive the pool and every buffer; so must what `also_register` uses.
  PinnedPool(Device* device, size_t keep_bytes, AlsoRegister also_register = {});
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();

  // At least `bytes` (> 0) of page-aligned host memory, pinned where the device allows (where it
  // does not, the memory is still returned, unpinned, and counted). ResourceExhausted when the
  // host has no memory.
  absl::StatusOr<PinnedBuffer> Take(size_t bytes);

  struct Stats {
    size_t kept_bytes = 0;   // released buffers held for reuse
    size_t outstanding = 0;  // buffers taken and not yet released
    size_t made = 0;         // buffers ever made (each registered once)
    size_t reused = 0;       // Takes served by a kept buffer
    size_t unpinned = 0;     // buffers the device would not register
  };
  Stats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace baton::device
