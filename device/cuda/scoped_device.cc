#include "device/cuda/scoped_device.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/driver_api.h"

namespace baton::device::cuda {

ScopedDevice::~ScopedDevice() {
  if (!entered_) return;
  if (previous_device_ != ordinal_ && cudaSetDevice(previous_device_) != cudaSuccess) {
    cudaGetLastError();
  }
  CUcontext now = nullptr;
  if (Cu().CtxGetCurrent(&now) == CUDA_SUCCESS && now != previous_context_) {
    Cu().CtxSetCurrent(previous_context_);
  }
}

absl::Status ScopedDevice::Enter(int ordinal) {
  // The driver table is loaded once per process; the kernels (kernels.h) may be made without a
  // CudaDevice, whose probe loads it otherwise.
  BATON_RETURN_IF_ERROR(LoadedDriver().status());
  BATON_RETURN_IF_ERROR(BATON_CU(CtxGetCurrent, &previous_context_));
  BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&previous_device_));
  // Always set: it also makes the primary context current where another context was, and
  // creates it where the thread had none (driver calls need a current context).
  BATON_CUDART_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  entered_ = true;
  ordinal_ = ordinal;
  return absl::OkStatus();
}

absl::Status ScopedDevice::EnterCurrent() {
  int current = 0;
  BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&current));
  return Enter(current);
}

}  // namespace baton::device::cuda
