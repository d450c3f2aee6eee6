#include "device/cuda/vmm.h"

#include <cuda.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "device/cuda/driver_api.h"

namespace baton::device::cuda {

CUmemAllocationProp AllocationProperties(int ordinal, bool rdma) {
  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = ordinal;
  properties.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  return properties;
}

void MemHandle::Reset() {
  if (std::exchange(valid_, false)) Cu().MemRelease(handle_);
}

absl::StatusOr<MemHandle> RetainHandle(CUdeviceptr address) {
  CUmemGenericAllocationHandle handle = 0;
  BATON_RETURN_IF_ERROR(BATON_CU(MemRetainAllocationHandle, &handle, AsPointer(address)));
  return MemHandle(handle);
}

absl::StatusOr<CUmemAllocationProp> PropertiesOf(const MemHandle& handle) {
  CUmemAllocationProp properties{};
  BATON_RETURN_IF_ERROR(BATON_CU(MemGetAllocationPropertiesFromHandle, &properties, handle.get()));
  return properties;
}

VmmRange::~VmmRange() {
  for (const auto& [offset, bytes] : mapped_) Cu().MemUnmap(base_ + offset, bytes);
  if (size_ > 0) Cu().MemAddressFree(base_, size_);
}

absl::Status VmmRange::Reserve(size_t bytes, size_t alignment) {
  BATON_RETURN_IF_ERROR(BATON_CU(MemAddressReserve, &base_, bytes, alignment, 0, 0));
  size_ = bytes;
  return absl::OkStatus();
}

absl::Status VmmRange::Map(size_t offset, size_t bytes, const MemHandle& handle) {
  BATON_RETURN_IF_ERROR(BATON_CU(MemMap, base_ + offset, bytes, 0, handle.get(), 0));
  mapped_.emplace_back(offset, bytes);
  return absl::OkStatus();
}

absl::Status VmmRange::SetAccess(std::span<const int> ordinals) const {
  std::vector<CUmemAccessDesc> access(ordinals.size());
  for (size_t i = 0; i < ordinals.size(); ++i) {
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].location.id = ordinals[i];
    access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  return BATON_CU(MemSetAccess, base_, size_, access.data(), access.size());
}

}  // namespace baton::device::cuda
