#pragma once

// One GPU as an operation on its memory uses it: the element-wise kernels that reach the memory,
// copies between it and host memory, and host memory to stage through. collective/ sees the GPU
// only through this (collective::OperationRunner, collective/device_staging.h says where such an
// operation runs); batond makes one per GPU it serves, from its Device (OperationDevices).
//
// Threads: every call may come from several threads at once (staging copies on threads of
// their own while the operation's thread reduces).

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device/device.h"
#include "device/kernels.h"
#include "device/pinned_pool.h"

namespace baton::device {

class OperationDevice {
 public:
  virtual ~OperationDevice() = default;

  // The element-wise kernels on the GPU's memory; each call returns once its work is done. They
  // return nothing: callers check kernels().last_error() before they trust or publish results.
  virtual const DeviceKernels& kernels() const = 0;

  // Copies `bytes` between host and device memory (either direction; the ranges do not overlap);
  // done when it returns.
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) const = 0;

  // At least `bytes` (> 0) of host memory to stage through, pinned where the device allows it
  // (device/pinned_pool.h).
  virtual absl::StatusOr<PinnedBuffer> StagingMemory(size_t bytes) const = 0;
};

// The OperationDevice of each GPU of one Device: kernels from Device::NewKernels (a stream of
// their own per GPU), copies on the legacy default stream (Device::CopyAsync, then Synchronize),
// staging memory from one PinnedPool that every GPU shares. Thread-safe.
class OperationDevices {
 public:
  // `device` must outlive this object, and this object every OperationDevice it returns and
  // every staging buffer they hand out. Released staging buffers are kept for reuse up to
  // `staging_keep_bytes` (registering memory costs about a copy of it).
  // `also_register`: what each staging buffer is registered with besides the device
  // (PinnedPool::AlsoRegister).
  OperationDevices(Device* device, size_t staging_keep_bytes,
                   PinnedPool::AlsoRegister also_register = {});
  OperationDevices(const OperationDevices&) = delete;
  OperationDevices& operator=(const OperationDevices&) = delete;
  ~OperationDevices();

  // GPU `ordinal`'s, made on first use and kept. The error of Device::NewKernels if it cannot be
  // made (InvalidArgument for an ordinal the device does not have); a later call tries again.
  absl::StatusOr<const OperationDevice*> For(int ordinal);

 private:
  Device* const device_;
  PinnedPool staging_pool_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<OperationDevice>> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::device
