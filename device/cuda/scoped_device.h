#pragma once

// The calling thread's current CUDA device, set for the length of one call of the CUDA device
// (device/cuda_device.h) or its kernels (kernels.h) and restored afterwards. Internal to target
// baton_device_cuda.

#include <cuda.h>

#include "absl/status/status.h"

namespace baton::device::cuda {

// Makes a device current for the calling thread (its primary context, which the runtime uses)
// and restores the thread's previous device and context on destruction, so that a call does not
// change where the caller's own CUDA calls go. Enter once per object.
//
// Threads: one object belongs to the thread that entered it (current devices are per thread).
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  // Restores the device and context the thread had before Enter, if Enter succeeded; failures
  // are not reported (and leave no "last error").
  ~ScopedDevice();

  // Makes `ordinal` current (loading the driver's entry points, driver_api.h, on first use).
  // After a failure the destructor restores nothing.
  absl::Status Enter(int ordinal);

  // Enters the calling thread's current device: a context for calls that need one, where any
  // device's will do.
  absl::Status EnterCurrent();

 private:
  bool entered_ = false;
  int ordinal_ = 0;
  int previous_device_ = 0;
  CUcontext previous_context_ = nullptr;
};

}  // namespace baton::device::cuda
