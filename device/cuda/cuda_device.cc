#include "device/cuda_device.h"

// <cuda.h> provides types only: every driver function is called through the table of
// device/cuda/driver_api.h, so nothing here links libcuda (see the header).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/kernels.h"
#include "device/cuda/objects.h"
#include "device/cuda/probe.h"
#include "device/cuda/scoped_device.h"
#include "device/cuda/vmm.h"

namespace baton::device {
namespace {

using cuda::Address;
using cuda::AllocationProperties;
using cuda::AsDevicePointer;
using cuda::AsPointer;
using cuda::Cu;
using cuda::CudaAllocation;
using cuda::CudaEvent;
using cuda::CudaHostRegistration;
using cuda::CudartStatus;
using cuda::DescriptorAsHandle;
using cuda::Gpu;
using cuda::HostRegistry;
using cuda::LegacyMapping;
using cuda::MemHandle;
using cuda::PropertiesOf;
using cuda::RetainHandle;
using cuda::ScopedDevice;
using cuda::VmmMapping;

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes);
static_assert(sizeof(CUuuid) == sizeof(ExportedMemory::device_uuid));
static_assert(std::is_same_v<cudaStream_t, CUstream>);

// ---------------------------------------------------------------------------------------------
// The device.

// What cuPointerGetAttributes says about an address (zeros for memory CUDA does not know).
struct PointerFacts {
  unsigned int memory_type = 0;  // CUmemorytype
  unsigned int is_managed = 0;
  int ordinal = -1;
  unsigned int legacy_ipc_capable = 0;
};

absl::StatusOr<PointerFacts> QueryPointer(CUdeviceptr address) {
  PointerFacts facts;
  std::array<CUpointer_attribute, 4> attributes = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  std::array<void*, 4> data = {&facts.memory_type, &facts.is_managed, &facts.ordinal,
                               &facts.legacy_ipc_capable};
  BATON_RETURN_IF_ERROR(BATON_CU(PointerGetAttributes, static_cast<unsigned int>(attributes.size()),
                                 attributes.data(), data.data(), address));
  return facts;
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(std::vector<Gpu> gpus) : gpus_(std::move(gpus)) {}

  std::string Describe() const override {
    std::vector<absl::string_view> names;
    names.reserve(gpus_.size());
    for (const Gpu& gpu : gpus_) names.push_back(gpu.name);
    return absl::StrCat("cuda (", gpus_.size(),
                        gpus_.size() == 1 ? " GPU: " : " GPUs: ", absl::StrJoin(names, ", "), ")");
  }

  int count() const override { return static_cast<int>(gpus_.size()); }

  absl::StatusOr<std::unique_ptr<Allocation>> Allocate(size_t bytes, int ordinal) override {
    BATON_RETURN_IF_ERROR(CheckOrdinal(ordinal));
    const Gpu& gpu = gpus_[ordinal];
    if (bytes == 0 || bytes > std::numeric_limits<size_t>::max() - gpu.granularity) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate ", bytes, " bytes of device memory"));
    }
    const size_t size = (bytes + gpu.granularity - 1) / gpu.granularity * gpu.granularity;
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.Enter(ordinal));
    const CUmemAllocationProp properties = AllocationProperties(ordinal, gpu.rdma_with_vmm);
    CUmemGenericAllocationHandle handle = 0;
    BATON_RETURN_IF_ERROR(
        Annotate(BATON_CU(MemCreate, &handle, size, &properties, 0),
                 absl::StrCat("allocating ", size, " bytes on CUDA device ", ordinal)));
    auto allocation = std::make_unique<CudaAllocation>(ordinal, MemHandle(handle));
    BATON_RETURN_IF_ERROR(allocation->range().Reserve(size, gpu.granularity));
    BATON_RETURN_IF_ERROR(allocation->range().Map(0, size, allocation->handle()));
    BATON_RETURN_IF_ERROR(allocation->range().SetAccess(gpu.accessors));
    return allocation;
  }

  bool IsDeviceMemory(const void* ptr, size_t bytes) const override {
    const CUdeviceptr first = AsDevicePointer(ptr);
    const CUdeviceptr last = first + (bytes > 0 ? bytes - 1 : 0);
    if (ptr == nullptr || last < first) return false;
    ScopedDevice scoped;
    if (!scoped.EnterCurrent().ok()) return false;
    for (const CUdeviceptr address : {first, last}) {
      const absl::StatusOr<PointerFacts> facts = QueryPointer(address);
      if (!facts.ok() || (facts->memory_type != CU_MEMORYTYPE_DEVICE && facts->is_managed == 0)) {
        return false;
      }
    }
    return true;
  }

  absl::StatusOr<uint64_t> BufferId(const void* ptr) const override {
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.EnterCurrent());
    unsigned int memory_type = 0;
    unsigned long long id = 0;  // NOLINT(google-runtime-int): the driver's type
    std::array<CUpointer_attribute, 2> attributes = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                     CU_POINTER_ATTRIBUTE_BUFFER_ID};
    std::array<void*, 2> data = {&memory_type, &id};
    BATON_RETURN_IF_ERROR(BATON_CU(PointerGetAttributes,
                                   static_cast<unsigned int>(attributes.size()), attributes.data(),
                                   data.data(), AsDevicePointer(ptr)));
    if (memory_type != CU_MEMORYTYPE_DEVICE || id == 0) {
      return absl::NotFoundError(absl::StrCat(Address(ptr), " is not CUDA device memory"));
    }
    return static_cast<uint64_t>(id);
  }

  absl::StatusOr<ExportedMemory> Export(const void* ptr, size_t bytes) override {
    const CUdeviceptr begin = AsDevicePointer(ptr);
    const CUdeviceptr end = begin + std::max<size_t>(bytes, 1);
    if (end < begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("the range at ", Address(ptr), " of ", bytes, " bytes wraps around"));
    }
    ScopedDevice any;
    BATON_RETURN_IF_ERROR(any.EnterCurrent());
    BATON_ASSIGN_OR_RETURN(const PointerFacts facts, QueryPointer(begin));
    if (facts.is_managed != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(Address(ptr), " is CUDA managed memory, which cannot be shared; stage it"));
    }
    if (facts.memory_type != CU_MEMORYTYPE_DEVICE) {
      return absl::NotFoundError(absl::StrCat(Address(ptr), " is not CUDA device memory"));
    }
    BATON_RETURN_IF_ERROR(CheckOrdinal(facts.ordinal));
    ScopedDevice owner;
    BATON_RETURN_IF_ERROR(owner.Enter(facts.ordinal));

    CUdeviceptr base = 0;
    size_t size = 0;
    BATON_RETURN_IF_ERROR(BATON_CU(MemGetAddressRange, &base, &size, begin));
    ExportedMemory out;
    out.device_uuid = gpus_[facts.ordinal].uuid;
    static_assert(sizeof(out.buffer_id) == sizeof(unsigned long long));  // the driver's type
    BATON_RETURN_IF_ERROR(
        BATON_CU(PointerGetAttribute, &out.buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, base));

    std::string not_vmm = "not VMM memory";
    if (RetainHandle(base).ok()) {
      const absl::Status vmm = ExportVmm(base, begin, end, facts.ordinal, out);
      if (vmm.ok()) return out;
      if (!absl::IsFailedPrecondition(vmm) || facts.legacy_ipc_capable == 0) return vmm;
      not_vmm.assign(vmm.message().data(), vmm.message().size());
      out.segment_fds.clear();
      out.segment_sizes.clear();
    }
    if (facts.legacy_ipc_capable == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("device memory at ", Address(ptr), " (allocation ", Address(base), ", ",
                       size, " bytes) is ", not_vmm,
                       " and not legacy CUDA IPC capable (e.g. a cudaMallocAsync "
                       "pool): it cannot be shared; stage it"));
    }
    if (end > base + size) {
      return absl::FailedPreconditionError(
          absl::StrCat("the range at ", Address(ptr), " of ", bytes,
                       " bytes runs past the end of its cudaMalloc allocation (", Address(base),
                       ", ", size, " bytes)"));
    }
    cudaIpcMemHandle_t handle{};
    BATON_CUDART_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, AsPointer(base)));
    out.kind = ShareKind::kLegacyIpc;
    out.base = base;
    out.size = size;
    std::memcpy(out.ipc_handle.data(), &handle, sizeof(handle));
    return out;
  }

  absl::StatusOr<std::unique_ptr<Mapping>> Import(ExportedMemory memory) override {
    BATON_ASSIGN_OR_RETURN(const int ordinal, OrdinalOf(memory.device_uuid));
    switch (memory.kind) {
      case ShareKind::kVmm:
        return ImportVmm(memory, ordinal);
      case ShareKind::kLegacyIpc:
        return ImportLegacy(memory, ordinal);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown kind of exported memory ", static_cast<uint32_t>(memory.kind)));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateIpcEvent() override {
    int ordinal = 0;
    BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&ordinal));
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.Enter(ordinal));
    cudaEvent_t event = nullptr;
    BATON_CUDART_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming));
    return std::make_unique<CudaEvent>(ordinal, event, /*opened=*/false);
  }

  absl::StatusOr<std::unique_ptr<Event>> OpenIpcEvent(EventHandle handle) override {
    int ordinal = 0;
    BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&ordinal));
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.Enter(ordinal));
    cudaIpcEventHandle_t ipc{};
    std::memcpy(&ipc, handle.bytes.data(), sizeof(ipc));
    cudaEvent_t event = nullptr;
    const cudaError_t error = cudaIpcOpenEventHandle(&event, ipc);
    if (error != cudaSuccess) {
      // Also what an event of this very process gives (CUDA opens only other processes' events).
      const absl::Status status = CudartStatus(error, "cudaIpcOpenEventHandle", __FILE__, __LINE__);
      return absl::InvalidArgumentError(
          absl::StrCat("not another process's CUDA event handle: ", status.message()));
    }
    return std::make_unique<CudaEvent>(ordinal, event, /*opened=*/true);
  }

  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data,
                                                                 size_t bytes) override {
    const auto base = reinterpret_cast<uintptr_t>(data);
    if (data == nullptr || bytes == 0 || base + bytes < base) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot register ", bytes, " bytes of host memory at ", Address(data)));
    }
    if (!host_registry_->Add(base, bytes)) {
      return absl::FailedPreconditionError(
          absl::StrCat("host memory at ", Address(data), " overlaps memory registered before"));
    }
    ScopedDevice scoped;
    absl::Status status = scoped.EnterCurrent();
    if (status.ok()) {
      const cudaError_t error =
          cudaHostRegister(data, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
      status = CudartStatus(error, "cudaHostRegister", __FILE__, __LINE__);
      if (error == cudaErrorHostMemoryAlreadyRegistered) {
        status = absl::FailedPreconditionError(status.message());
      }
    }
    if (!status.ok()) {
      host_registry_->Remove(base);
      return status;
    }
    return std::make_unique<CudaHostRegistration>(host_registry_, data);
  }

  absl::Status WaitValue(StreamHandle stream, const std::atomic<uint32_t>* word,
                         uint32_t value) override {
    const auto address = reinterpret_cast<uintptr_t>(word);
    const std::optional<uintptr_t> base = host_registry_->Find(address, sizeof(*word));
    if (!base.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the word at ", Address(word), " is not in host memory registered with RegisterHost"));
    }
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(EnterStreamDevice(stream, scoped));
    void* device_base = nullptr;
    BATON_CUDART_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device_base, AsPointer(*base), 0));
    const CUdeviceptr device_word = AsDevicePointer(device_base) + (address - *base);
    return BATON_CU(StreamWaitValue32, static_cast<cudaStream_t>(stream), device_word, value,
                    CU_STREAM_WAIT_VALUE_GEQ);
  }

  absl::Status Synchronize(StreamHandle stream) override {
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(EnterStreamDevice(stream, scoped));
    BATON_CUDART_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }

  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return absl::OkStatus();
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(EnterStreamDevice(stream, scoped));
    BATON_CUDART_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceKernels>> NewKernels(int ordinal) override {
    BATON_RETURN_IF_ERROR(CheckOrdinal(ordinal));
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKernels> kernels, cuda::NewCudaKernels(ordinal));
    return kernels;
  }

 private:
  absl::Status CheckOrdinal(int ordinal) const {
    if (ordinal < 0 || ordinal >= count()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA device ", ordinal, " does not exist: this process sees ", count()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> OrdinalOf(const std::array<uint8_t, 16>& uuid) const {
    for (size_t ordinal = 0; ordinal < gpus_.size(); ++ordinal) {
      if (gpus_[ordinal].uuid == uuid) return static_cast<int>(ordinal);
    }
    std::string hex;
    for (const uint8_t byte : uuid) absl::StrAppend(&hex, absl::Hex(byte, absl::kZeroPad2));
    return absl::InvalidArgumentError(
        absl::StrCat("the exported memory is on GPU ", hex, ", which this process does not see"));
  }

  // The stream's device (the calling thread's current one for the legacy default stream).
  static absl::Status EnterStreamDevice(StreamHandle stream, ScopedDevice& scoped) {
    if (stream == nullptr) return scoped.EnterCurrent();
    int ordinal = 0;
    BATON_CUDART_RETURN_IF_ERROR(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &ordinal));
    return scoped.Enter(ordinal);
  }

  // Exports the VMM segments from `first` (the base of the segment that holds `begin`) until
  // `end` is covered, as NCCL's ipcHandleMultiSegmentRegistration walks them.
  static absl::Status ExportVmm(CUdeviceptr first, CUdeviceptr begin, CUdeviceptr end, int ordinal,
                                ExportedMemory& out) {
    out.kind = ShareKind::kVmm;
    out.base = first;
    out.size = 0;
    for (CUdeviceptr next = first; next < end;) {
      CUdeviceptr segment = 0;
      size_t bytes = 0;
      if (Cu().MemGetAddressRange(&segment, &bytes, next) != CUDA_SUCCESS || segment != next ||
          bytes == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("the range at ", Address(begin), " of ", end - begin,
                         " bytes runs past the end of its VMM allocation (mapped from ",
                         Address(first), " to ", Address(next), ")"));
      }
      if (out.segment_fds.size() == kMaxSegments) {
        return absl::FailedPreconditionError(absl::StrCat("the range at ", Address(begin), " of ",
                                                          end - begin, " bytes spans more than ",
                                                          kMaxSegments, " VMM segments; stage it"));
      }
      absl::StatusOr<MemHandle> handle = RetainHandle(segment);
      if (!handle.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the range at ", Address(begin), " runs from VMM memory into other memory at ",
            Address(segment), ": ", handle.status().message()));
      }
      BATON_ASSIGN_OR_RETURN(const CUmemAllocationProp properties, PropertiesOf(*handle));
      if (properties.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          properties.location.id != ordinal) {
        return absl::FailedPreconditionError(
            absl::StrCat("the range at ", Address(begin), " spans VMM memory of several devices"));
      }
      if ((properties.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("VMM memory created without POSIX file descriptor handles (segment at ",
                         Address(segment), ")"));
      }
      int fd = -1;
      BATON_RETURN_IF_ERROR(BATON_CU(MemExportToShareableHandle, &fd, handle->get(),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      out.segment_fds.emplace_back(fd);
      out.segment_sizes.push_back(bytes);
      out.size += bytes;
      next = segment + bytes;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Mapping>> ImportVmm(ExportedMemory& memory, int ordinal) const {
    const size_t segments = memory.segment_fds.size();
    if (segments == 0 || segments > kMaxSegments || memory.segment_sizes.size() != segments) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported VMM memory needs 1 to ", kMaxSegments,
                       " segments, each with a descriptor; it has ", memory.segment_sizes.size(),
                       " sizes and ", segments, " descriptors"));
    }
    const size_t granularity = gpus_[ordinal].granularity;
    uint64_t total = 0;
    for (size_t i = 0; i < segments; ++i) {
      const uint64_t bytes = memory.segment_sizes[i];
      if (!memory.segment_fds[i].valid() || bytes == 0 || bytes % granularity != 0 ||
          bytes > std::numeric_limits<size_t>::max() - total) {
        return absl::InvalidArgumentError(absl::StrCat(
            "exported VMM segment ", i, " is invalid: ", bytes, " bytes (a positive multiple of ",
            granularity, " is needed), descriptor ", memory.segment_fds[i].get()));
      }
      total += bytes;
    }
    if (total != memory.size) {
      return absl::InvalidArgumentError(absl::StrCat("exported VMM memory says ", memory.size,
                                                     " bytes but its segments hold ", total));
    }
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.Enter(ordinal));
    auto mapping = std::make_unique<VmmMapping>(ordinal, total);
    BATON_RETURN_IF_ERROR(mapping->range().Reserve(total, granularity));
    size_t offset = 0;
    for (size_t i = 0; i < segments; ++i) {
      CUmemGenericAllocationHandle raw = 0;
      const absl::Status imported = BATON_CU(MemImportFromShareableHandle, &raw,
                                             DescriptorAsHandle(memory.segment_fds[i].get()),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      if (!imported.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("exported VMM segment ", i, " is not CUDA memory: ", imported.message()));
      }
      const MemHandle handle(raw);  // released at the end of the iteration: mapped, it stays
      memory.segment_fds[i].Reset(-1);
      BATON_ASSIGN_OR_RETURN(const CUmemAllocationProp properties, PropertiesOf(handle));
      if (properties.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          properties.location.id != ordinal) {
        return absl::InvalidArgumentError(absl::StrCat(
            "exported VMM segment ", i, " is memory of CUDA device ", properties.location.id,
            ", not of device ", ordinal, " that the export names"));
      }
      const absl::Status mapped = mapping->range().Map(offset, memory.segment_sizes[i], handle);
      if (!mapped.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("exported VMM segment ", i, " cannot be mapped with its size (",
                         memory.segment_sizes[i], " bytes): ", mapped.message()));
      }
      offset += memory.segment_sizes[i];
    }
    BATON_RETURN_IF_ERROR(mapping->range().SetAccess(gpus_[ordinal].accessors));
    return mapping;
  }

  static absl::StatusOr<std::unique_ptr<Mapping>> ImportLegacy(const ExportedMemory& memory,
                                                               int ordinal) {
    if (!memory.segment_fds.empty() || !memory.segment_sizes.empty() || memory.size == 0) {
      return absl::InvalidArgumentError(
          "exported legacy IPC memory has no segments and a positive size");
    }
    ScopedDevice scoped;
    BATON_RETURN_IF_ERROR(scoped.Enter(ordinal));
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, memory.ipc_handle.data(), sizeof(handle));
    void* data = nullptr;
    const cudaError_t error = cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess);
    if (error != cudaSuccess) {
      absl::Status status = CudartStatus(error, "cudaIpcOpenMemHandle", __FILE__, __LINE__);
      if (error == cudaErrorMemoryAllocation || error == cudaErrorTooManyPeers) {
        status = absl::ResourceExhaustedError(status.message());
      } else {
        status = absl::InvalidArgumentError(status.message());  // a bad or stale handle
      }
      return status;
    }
    auto mapping = std::make_unique<LegacyMapping>(ordinal, data, memory.size);
    CUdeviceptr base = 0;
    size_t size = 0;
    BATON_RETURN_IF_ERROR(BATON_CU(MemGetAddressRange, &base, &size, AsDevicePointer(data)));
    if (memory.size > size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "exported legacy IPC memory says ", memory.size, " bytes; the allocation has ", size));
    }
    return mapping;
  }

  const std::vector<Gpu> gpus_;
  const std::shared_ptr<HostRegistry> host_registry_ = std::make_shared<HostRegistry>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice() {
  BATON_ASSIGN_OR_RETURN(std::vector<Gpu> gpus, cuda::ProbeGpus());
  return std::unique_ptr<Device>(new CudaDevice(std::move(gpus)));
}

}  // namespace baton::device
