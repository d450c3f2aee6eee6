#include "device/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace baton::device::cuda {

absl::StatusCode CudaErrorToCode(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudartStatus(cudaError_t error, absl::string_view what, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // see the header
  return absl::Status(CudaErrorToCode(error),
                      absl::StrCat(what, " failed: ", cudaGetErrorName(error), ": ",
                                   cudaGetErrorString(error), " [", file, ":", line, "]"));
}

}  // namespace baton::device::cuda
