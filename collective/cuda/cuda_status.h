#pragma once

// CUDA runtime errors as absl::Status, with the call and its location (common/status_macros.h
// does the same for errno). Host code only; needs cuda_runtime_api.h.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace baton::collective {

// The canonical code that fits a CUDA error: no driver or device -> FailedPrecondition, out of
// memory -> ResourceExhausted, bad arguments -> InvalidArgument, everything else -> Internal.
absl::StatusCode CudaErrorToCode(cudaError_t error);

// "<what> failed: <cudaErrorName>: <description> [<file>:<line>]". OK for cudaSuccess.
absl::Status CudaStatus(cudaError_t error, absl::string_view what, const char* file, int line);

}  // namespace baton::collective

// Evaluates a CUDA runtime call; returns its error as a Status from the enclosing function.
#define BATON_CUDA_RETURN_IF_ERROR(call)                                                    \
  do {                                                                                      \
    const cudaError_t baton_cuda_error_ = (call);                                           \
    if (baton_cuda_error_ != cudaSuccess) {                                                 \
      return ::baton::collective::CudaStatus(baton_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)
