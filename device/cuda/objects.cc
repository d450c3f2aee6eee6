#include "device/cuda/objects.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/scoped_device.h"

namespace baton::device::cuda {

LegacyMapping::~LegacyMapping() {
  ScopedDevice scoped;  // the handle was opened in this device's context
  if (scoped.Enter(ordinal_).ok() && cudaIpcCloseMemHandle(data_) != cudaSuccess) {
    cudaGetLastError();
  }
}

CudaEvent::~CudaEvent() {
  ScopedDevice scoped;
  if (scoped.Enter(ordinal_).ok() && cudaEventDestroy(event_) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::StatusOr<EventHandle> CudaEvent::Export() const {
  if (opened_) {
    return absl::FailedPreconditionError(
        "an event opened from another process's handle cannot be exported again");
  }
  ScopedDevice scoped;
  BATON_RETURN_IF_ERROR(scoped.Enter(ordinal_));
  cudaIpcEventHandle_t handle{};
  BATON_CUDART_RETURN_IF_ERROR(cudaIpcGetEventHandle(&handle, event_));
  EventHandle out;
  std::memcpy(out.bytes.data(), &handle, sizeof(handle));
  return out;
}

absl::Status CudaEvent::Record(StreamHandle stream) {
  ScopedDevice scoped;
  BATON_RETURN_IF_ERROR(scoped.Enter(ordinal_));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (cuda_stream != nullptr) {
    int stream_device = -1;
    BATON_CUDART_RETURN_IF_ERROR(cudaStreamGetDevice(cuda_stream, &stream_device));
    if (stream_device != ordinal_) {
      return absl::InvalidArgumentError(absl::StrCat("cannot record an event of CUDA device ",
                                                     ordinal_, " on a stream of device ",
                                                     stream_device));
    }
  }
  BATON_CUDART_RETURN_IF_ERROR(cudaEventRecord(event_, cuda_stream));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEvent::Query() {
  ScopedDevice scoped;
  BATON_RETURN_IF_ERROR(scoped.Enter(ordinal_));
  const cudaError_t error = cudaEventQuery(event_);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  return CudartStatus(error, "cudaEventQuery", __FILE__, __LINE__);
}

bool HostRegistry::Add(uintptr_t base, size_t bytes) {
  absl::MutexLock lock(&mu_);
  auto next = ranges_.lower_bound(base);
  if (next != ranges_.end() && next->first - base < bytes) return false;
  if (next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second > base) {
    return false;
  }
  ranges_.emplace(base, bytes);
  return true;
}

void HostRegistry::Remove(uintptr_t base) {
  absl::MutexLock lock(&mu_);
  ranges_.erase(base);
}

std::optional<uintptr_t> HostRegistry::Find(uintptr_t address, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto next = ranges_.upper_bound(address);
  if (next == ranges_.begin()) return std::nullopt;
  const auto& [base, size] = *std::prev(next);
  if (address - base > size || size - (address - base) < bytes) return std::nullopt;
  return base;
}

CudaHostRegistration::~CudaHostRegistration() {
  ScopedDevice scoped;  // portable registrations belong to no one context
  if (scoped.EnterCurrent().ok() && cudaHostUnregister(data_) != cudaSuccess) {
    cudaGetLastError();
  }
  registry_->Remove(reinterpret_cast<uintptr_t>(data_));
}

}  // namespace baton::device::cuda
