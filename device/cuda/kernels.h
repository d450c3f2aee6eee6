#pragma once

// device::Kernels for CUDA device memory: the same element-wise work as HostKernels()
// (device/reduce.h semantics, bit for bit: integer wrap-around, float16/bfloat16/fp8
// accumulated in float32 and rounded once, min/max propagating NaN, avg as sum then Divide),
// done by CUDA kernels on one device and one stream. What CudaDevice::NewKernels returns
// (device/cuda_device.h); part of target baton_device_cuda, built only when BATON_HAVE_CUDA.
// Nothing here needs a CUDA header.
//
// Pointers are device pointers usable on the device the kernels were made for (cudaMalloc,
// VMM mappings, peers' memory mapped into this process, or mapped host memory); they must be
// aligned for the element type. Host pointers that CUDA cannot reach fault on the device.
//
// Completion: each call enqueues its work on the kernels' stream and synchronises that stream
// before it returns, so callers see the synchronous contract of the host kernels (and also wait
// for whatever else was already queued on that stream). A later version will return before
// completion and order work through the stream instead.
//
// Errors: the Kernels interface returns void, so a failure (a CUDA error, or more sources than
// one pass takes) is logged and kept: last_error() returns the first one, and it stays (a CUDA
// error often leaves the context unusable). Once an error is kept, later calls do nothing.
// Callers that ran work through these kernels check last_error() before they trust or publish
// the results.
//
// Current device: each call makes the kernels' device current for itself and restores the
// calling thread's (ScopedDevice, scoped_device.h).
//
// Thread-safe: calls from several threads are serialised by the stream.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/kernels.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; passed as such, no CUDA header needed

namespace baton::device::cuda {

class CudaKernels : public DeviceKernels {
 public:
  // The most sources one ReduceMany call takes; more is an InvalidArgument error.
  static constexpr int kMaxSources = 128;

  // The CUDA device ordinal the kernels run on.
  virtual int device() const = 0;
  // The stream the kernels enqueue on.
  virtual CUstream_st* stream() const = 0;
};

// Kernels on device `device` with a stream of their own (non-blocking: it does not synchronise
// with the legacy default stream), destroyed with them. FailedPrecondition when there is no
// CUDA driver or device (or the driver is older than the CUDA runtime Baton was built with),
// naming the CUDA error (probe.h CountGpus); InvalidArgument when `device` is not one of the
// node's devices.
absl::StatusOr<std::unique_ptr<CudaKernels>> NewCudaKernels(int device);

// The same on the caller's `stream`, which must belong to `device` and outlive the kernels.
absl::StatusOr<std::unique_ptr<CudaKernels>> NewCudaKernels(int device, CUstream_st* stream);

}  // namespace baton::device::cuda
