#include "device/cuda/probe.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/vmm.h"

namespace baton::device::cuda {
namespace {

absl::StatusOr<int> DeviceAttribute(CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  BATON_RETURN_IF_ERROR(BATON_CU(DeviceGetAttribute, &value, attribute, device));
  return value;
}

absl::StatusOr<Gpu> ProbeGpu(int ordinal) {
  Gpu gpu;
  cudaDeviceProp properties{};
  BATON_CUDART_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, ordinal));
  gpu.name = properties.name;
  CUdevice device = 0;
  BATON_RETURN_IF_ERROR(BATON_CU(DeviceGet, &device, ordinal));
  CUuuid uuid{};
  BATON_RETURN_IF_ERROR(BATON_CU(DeviceGetUuid, &uuid, device));
  std::memcpy(gpu.uuid.data(), uuid.bytes, gpu.uuid.size());
  BATON_ASSIGN_OR_RETURN(
      const int vmm,
      DeviceAttribute(device, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  BATON_ASSIGN_OR_RETURN(
      const int fds,
      DeviceAttribute(device, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED));
  if (vmm == 0 || fds == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", ordinal, " (", gpu.name, ") does not support ",
        vmm == 0 ? "virtual memory management" : "POSIX file descriptor memory handles",
        ", which Baton needs to share GPU memory between processes"));
  }
  BATON_ASSIGN_OR_RETURN(
      const int rdma,
      DeviceAttribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED));
  gpu.rdma_with_vmm = rdma != 0;
  const CUmemAllocationProp allocation = AllocationProperties(ordinal, gpu.rdma_with_vmm);
  BATON_RETURN_IF_ERROR(BATON_CU(MemGetAllocationGranularity, &gpu.granularity, &allocation,
                                 CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (gpu.granularity == 0) {
    return absl::InternalError(absl::StrCat("CUDA device ", ordinal, " reports granularity 0"));
  }
  return gpu;
}

}  // namespace

absl::StatusOr<int> CountGpus() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA driver or GPU on this node (cudaGetDeviceCount: ", cudaGetErrorName(error), ": ",
        cudaGetErrorString(error),
        error == cudaErrorInsufficientDriver
            ? "; no NVIDIA driver, or one older than the CUDA runtime Baton was built with)"
            : ")"));
  }
  if (count <= 0) {
    return absl::FailedPreconditionError("no CUDA GPU on this node (cudaGetDeviceCount: 0)");
  }
  return count;
}

absl::StatusOr<std::vector<Gpu>> ProbeGpus() {
  BATON_ASSIGN_OR_RETURN(const int count, CountGpus());
  BATON_RETURN_IF_ERROR(LoadedDriver().status());
  std::vector<Gpu> gpus(count);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    BATON_ASSIGN_OR_RETURN(gpus[ordinal], ProbeGpu(ordinal));
  }
  for (int owner = 0; owner < count; ++owner) {
    for (int accessor = 0; accessor < count; ++accessor) {
      int can_access = accessor == owner ? 1 : 0;
      if (accessor != owner) {
        BATON_CUDART_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can_access, accessor, owner));
      }
      if (can_access != 0) gpus[owner].accessors.push_back(accessor);
    }
  }
  return gpus;
}

}  // namespace baton::device::cuda
