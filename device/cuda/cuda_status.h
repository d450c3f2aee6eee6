#pragma once

// CUDA runtime errors as absl::Status, with the call and its location (common/status_macros.h
// does the same for errno; device/cuda/driver_api.h for the driver API's CUresult). Host code
// only; needs cuda_runtime_api.h. Internal to target baton_device_cuda.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace baton::device::cuda {

// The canonical code that fits a CUDA error: no driver or device -> FailedPrecondition, out of
// memory -> ResourceExhausted, bad arguments -> InvalidArgument, everything else -> Internal.
absl::StatusCode CudaErrorToCode(cudaError_t error);

// "<what> failed: <cudaErrorName>: <description> [<file>:<line>]". OK for cudaSuccess.
//
// A failure also clears the calling thread's "last error" (cudaGetLastError): the device layer
// runs inside the user's process (libbaton), whose own checks (PyTorch's after every kernel
// launch) must not find Baton's failures, and in batond a kept error would make an unrelated
// later check on the same thread fail. The error is reported here, as a Status, instead. (A
// sticky error, one that breaks the context, stays whatever we do: every later call reports it.)
absl::Status CudartStatus(cudaError_t error, absl::string_view what, const char* file, int line);

}  // namespace baton::device::cuda

// Evaluates a CUDA runtime call (or a cudaError_t); returns its error as a Status (CudartStatus:
// the thread's last error cleared) from the enclosing function.
#define BATON_CUDART_RETURN_IF_ERROR(call)                                                        \
  do {                                                                                            \
    const cudaError_t baton_cudart_error_ = (call);                                               \
    if (baton_cudart_error_ != cudaSuccess) {                                                     \
      return ::baton::device::cuda::CudartStatus(baton_cudart_error_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)
