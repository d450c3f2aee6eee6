#pragma once

// CUDA virtual memory management (cuMemCreate, cuMemMap, ...) as the CUDA device
// (device/cuda_device.h) uses it: physical memory handles and reserved address ranges, each
// released by its destructor. Internal to target baton_device_cuda. VMM calls need no current
// context; the driver must have been loaded (driver_api.h).

#include <cuda.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::device::cuda {

// The properties Baton's allocations have on device `ordinal`: pinned device memory, exportable
// as POSIX file descriptors, GPUDirect RDMA capable iff `rdma`.
CUmemAllocationProp AllocationProperties(int ordinal, bool rdma);

// A physical memory handle (cuMemCreate, cuMemRetainAllocationHandle, cuMemImport...), released
// by the destructor. Memory lives while a handle or a mapping refers to it. Movable.
class MemHandle {
 public:
  MemHandle() = default;
  explicit MemHandle(CUmemGenericAllocationHandle handle) : handle_(handle), valid_(true) {}
  MemHandle(MemHandle&& other) noexcept
      : handle_(other.handle_), valid_(std::exchange(other.valid_, false)) {}
  MemHandle& operator=(MemHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = other.handle_;
      valid_ = std::exchange(other.valid_, false);
    }
    return *this;
  }
  MemHandle(const MemHandle&) = delete;
  MemHandle& operator=(const MemHandle&) = delete;
  ~MemHandle() { Reset(); }

  CUmemGenericAllocationHandle get() const { return handle_; }

 private:
  void Reset();

  CUmemGenericAllocationHandle handle_ = 0;
  bool valid_ = false;
};

// The handle of the VMM segment whose base is `address` (cuMemRetainAllocationHandle); an error
// for memory that is not VMM memory.
absl::StatusOr<MemHandle> RetainHandle(CUdeviceptr address);

// The properties `handle`'s memory was created with.
absl::StatusOr<CUmemAllocationProp> PropertiesOf(const MemHandle& handle);

// A reserved virtual address range and the physical segments mapped into it, unmapped and freed
// by the destructor.
class VmmRange {
 public:
  VmmRange() = default;
  VmmRange(const VmmRange&) = delete;
  VmmRange& operator=(const VmmRange&) = delete;
  ~VmmRange();

  // Reserves `bytes` (a multiple of the granularity) aligned to `alignment`. Once per range.
  absl::Status Reserve(size_t bytes, size_t alignment);

  // Maps `bytes` of `handle`'s memory at `offset` into the range. The mapping holds its own
  // reference: `handle` may be released afterwards.
  absl::Status Map(size_t offset, size_t bytes, const MemHandle& handle);

  // Read/write access to the whole (mapped) range from each of `ordinals`.
  absl::Status SetAccess(std::span<const int> ordinals) const;

  CUdeviceptr base() const { return base_; }
  size_t size() const { return size_; }

 private:
  CUdeviceptr base_ = 0;
  size_t size_ = 0;                                // reserved bytes; 0 before Reserve
  std::vector<std::pair<size_t, size_t>> mapped_;  // (offset, bytes) of each mapping
};

}  // namespace baton::device::cuda
