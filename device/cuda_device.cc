#include "device/cuda_device.h"

// <cuda.h> and <cudaTypedefs.h> provide types only: every driver function is called through a
// pointer from cudaGetDriverEntryPointByVersion, so nothing here links libcuda (see the header).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "collective/cuda/cuda_status.h"
#include "collective/cuda/device_kernels.h"
#include "common/status_macros.h"

namespace baton::device {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes);
static_assert(sizeof(CUuuid) == sizeof(ExportedMemory::device_uuid));
static_assert(std::is_same_v<cudaStream_t, CUstream>);

// ---------------------------------------------------------------------------------------------
// The driver API, loaded at run time.

// Entry points are requested as of CUDA 12.0: every function below has its current ABI by then
// (cuMemGetAddressRange_v2, cuStreamWaitValue32_v2, cuDeviceGetUuid_v2, ...), and a driver that
// runs this CUDA 13 runtime is newer. The typedefs name the version each request returns.
constexpr unsigned int kDriverApiVersion = 12000;

// X(name, version): the driver function cu<name> with the typedef PFN_cu<name>_v<version>.
#define BATON_CUDA_DRIVER_FUNCTIONS(X)           \
  X(GetErrorName, 6000)                          \
  X(GetErrorString, 6000)                        \
  X(CtxGetCurrent, 4000)                         \
  X(CtxSetCurrent, 4000)                         \
  X(DeviceGet, 2000)                             \
  X(DeviceGetAttribute, 2000)                    \
  X(DeviceGetUuid, 11040)                        \
  X(MemCreate, 10020)                            \
  X(MemRelease, 10020)                           \
  X(MemAddressReserve, 10020)                    \
  X(MemAddressFree, 10020)                       \
  X(MemMap, 10020)                               \
  X(MemUnmap, 10020)                             \
  X(MemSetAccess, 10020)                         \
  X(MemGetAllocationGranularity, 10020)          \
  X(MemExportToShareableHandle, 10020)           \
  X(MemImportFromShareableHandle, 10020)         \
  X(MemRetainAllocationHandle, 11000)            \
  X(MemGetAllocationPropertiesFromHandle, 10020) \
  X(MemGetAddressRange, 3020)                    \
  X(PointerGetAttribute, 4000)                   \
  X(PointerGetAttributes, 7000)                  \
  X(StreamWaitValue32, 11070)

// The driver functions Baton calls, named as in cuda.h without the "cu" prefix. Filled once by
// LoadedDriver() and never changed.
struct DriverApi {
#define BATON_DECLARE_DRIVER_FUNCTION(name, version) PFN_cu##name##_v##version name = nullptr;
  BATON_CUDA_DRIVER_FUNCTIONS(BATON_DECLARE_DRIVER_FUNCTION)
#undef BATON_DECLARE_DRIVER_FUNCTION
};

template <typename Function>
absl::Status LoadEntryPoint(const char* symbol, Function* function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &address, kDriverApiVersion,
                                                             cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver has no ", symbol, " (CUDA ", kDriverApiVersion / 1000, ".",
        kDriverApiVersion % 1000 / 10, " API): cudaGetDriverEntryPointByVersion returned ",
        cudaGetErrorName(error), ", lookup result ", static_cast<int>(found)));
  }
  *function = reinterpret_cast<Function>(address);
  return absl::OkStatus();
}

absl::StatusOr<DriverApi> LoadDriverApi() {
  DriverApi api;
#define BATON_LOAD_DRIVER_FUNCTION(name, version) \
  BATON_RETURN_IF_ERROR(LoadEntryPoint("cu" #name, &api.name));
  BATON_CUDA_DRIVER_FUNCTIONS(BATON_LOAD_DRIVER_FUNCTION)
#undef BATON_LOAD_DRIVER_FUNCTION
  return api;
}

// The driver's entry points, looked up once per process (after the runtime found a driver).
const absl::StatusOr<DriverApi>& LoadedDriver() {
  static const auto* const api = new absl::StatusOr<DriverApi>(LoadDriverApi());
  return *api;
}

// The loaded driver API. Only called once LoadedDriver() succeeded: every object in this file is
// made by a CudaDevice, which NewCudaDevice creates only then.
const DriverApi& Cu() { return *LoadedDriver(); }

absl::StatusCode CuResultToCode(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return absl::StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_FOUND:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what> failed: <CUDA_ERROR_NAME>: <description> [<file>:<line>]". OK for CUDA_SUCCESS.
absl::Status CuStatus(CUresult result, absl::string_view what, const char* file, int line) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* description = nullptr;
  if (LoadedDriver().ok()) {
    Cu().GetErrorName(result, &name);
    Cu().GetErrorString(result, &description);
  }
  const char* base = std::strrchr(file, '/');
  return absl::Status(
      CuResultToCode(result),
      absl::StrCat(what, " failed: ",
                   name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(result)),
                   ": ", description != nullptr ? description : "unknown error", " [",
                   base != nullptr ? base + 1 : file, ":", line, "]"));
}

// A runtime error as a Status (collective/cuda/cuda_status.h), clearing the calling thread's
// "last error" first: libbaton runs in the user's process, whose own checks (PyTorch's after
// every kernel launch) must not see Baton's failures.
absl::Status CudartStatus(cudaError_t error, absl::string_view what, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return collective::CudaStatus(error, what, file, line);
}

// Calls the driver function cu<function>(...) and evaluates to its Status.
#define BATON_CU(function, ...) \
  ::baton::device::CuStatus(Cu().function(__VA_ARGS__), "cu" #function, __FILE__, __LINE__)

// Evaluates a CUDA runtime call; returns its error as a Status from the enclosing function.
#define BATON_CUDART_RETURN_IF_ERROR(call)                                                  \
  do {                                                                                      \
    const cudaError_t baton_cudart_error_ = (call);                                         \
    if (baton_cudart_error_ != cudaSuccess) {                                               \
      return ::baton::device::CudartStatus(baton_cudart_error_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)

std::string Address(uint64_t address) { return absl::StrCat("0x", absl::Hex(address)); }
std::string Address(const void* pointer) {
  return Address(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pointer)));
}

// The driver hands out addresses as integers (CUdeviceptr).
void* AsPointer(CUdeviceptr address) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): an address, not an integer made a pointer
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}
// cuMemImportFromShareableHandle takes a POSIX descriptor as the value of its pointer argument.
void* DescriptorAsHandle(int fd) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver's convention
  return reinterpret_cast<void*>(static_cast<uintptr_t>(fd));
}
CUdeviceptr AsDevicePointer(const void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}

// ---------------------------------------------------------------------------------------------
// RAII for the calling thread's current device and for driver objects.

// Makes a device current for the calling thread (its primary context, which the runtime uses)
// and restores the thread's previous device and context on destruction, so that a call does not
// change where the caller's own CUDA calls go. Enter once per object.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (!entered_) return;
    if (previous_device_ != ordinal_ && cudaSetDevice(previous_device_) != cudaSuccess) {
      cudaGetLastError();
    }
    CUcontext now = nullptr;
    if (Cu().CtxGetCurrent(&now) == CUDA_SUCCESS && now != previous_context_) {
      Cu().CtxSetCurrent(previous_context_);
    }
  }

  absl::Status Enter(int ordinal) {
    BATON_RETURN_IF_ERROR(BATON_CU(CtxGetCurrent, &previous_context_));
    BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&previous_device_));
    // Always set: it also makes the primary context current where another context was, and
    // creates it where the thread had none (driver calls need a current context).
    BATON_CUDART_RETURN_IF_ERROR(cudaSetDevice(ordinal));
    entered_ = true;
    ordinal_ = ordinal;
    return absl::OkStatus();
  }

  // Enters the calling thread's current device: a context for calls that need one, where any
  // device's will do.
  absl::Status EnterCurrent() {
    int current = 0;
    BATON_CUDART_RETURN_IF_ERROR(cudaGetDevice(&current));
    return Enter(current);
  }

 private:
  bool entered_ = false;
  int ordinal_ = 0;
  int previous_device_ = 0;
  CUcontext previous_context_ = nullptr;
};

// A physical memory handle (cuMemCreate, cuMemRetainAllocationHandle, cuMemImport...), released
// by the destructor. Memory lives while a handle or a mapping refers to it.
class MemHandle {
 public:
  MemHandle() = default;
  explicit MemHandle(CUmemGenericAllocationHandle handle) : handle_(handle), valid_(true) {}
  MemHandle(MemHandle&& other) noexcept
      : handle_(other.handle_), valid_(std::exchange(other.valid_, false)) {}
  MemHandle& operator=(MemHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = other.handle_;
      valid_ = std::exchange(other.valid_, false);
    }
    return *this;
  }
  MemHandle(const MemHandle&) = delete;
  MemHandle& operator=(const MemHandle&) = delete;
  ~MemHandle() { Reset(); }

  CUmemGenericAllocationHandle get() const { return handle_; }

 private:
  void Reset() {
    if (std::exchange(valid_, false)) Cu().MemRelease(handle_);
  }

  CUmemGenericAllocationHandle handle_ = 0;
  bool valid_ = false;
};

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

// A reserved virtual address range and the physical segments mapped into it, unmapped and freed
// by the destructor. (VMM calls need no current context.)
class VmmRange {
 public:
  VmmRange() = default;
  VmmRange(const VmmRange&) = delete;
  VmmRange& operator=(const VmmRange&) = delete;
  ~VmmRange() {
    for (const auto& [offset, bytes] : mapped_) Cu().MemUnmap(base_ + offset, bytes);
    if (size_ > 0) Cu().MemAddressFree(base_, size_);
  }

  absl::Status Reserve(size_t bytes, size_t alignment) {
    BATON_RETURN_IF_ERROR(BATON_CU(MemAddressReserve, &base_, bytes, alignment, 0, 0));
    size_ = bytes;
    return absl::OkStatus();
  }

  // Maps `bytes` of `handle`'s memory at `offset` into the range. The mapping holds its own
  // reference: `handle` may be released afterwards.
  absl::Status Map(size_t offset, size_t bytes, const MemHandle& handle) {
    BATON_RETURN_IF_ERROR(BATON_CU(MemMap, base_ + offset, bytes, 0, handle.get(), 0));
    mapped_.emplace_back(offset, bytes);
    return absl::OkStatus();
  }

  // Read/write access to the whole (mapped) range from each of `ordinals`.
  absl::Status SetAccess(std::span<const int> ordinals) const {
    std::vector<CUmemAccessDesc> access(ordinals.size());
    for (size_t i = 0; i < ordinals.size(); ++i) {
      access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access[i].location.id = ordinals[i];
      access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return BATON_CU(MemSetAccess, base_, size_, access.data(), access.size());
  }

  CUdeviceptr base() const { return base_; }
  size_t size() const { return size_; }

 private:
  CUdeviceptr base_ = 0;
  size_t size_ = 0;                                // reserved bytes; 0 before Reserve
  std::vector<std::pair<size_t, size_t>> mapped_;  // (offset, bytes) of each mapping
};

// ---------------------------------------------------------------------------------------------
// The objects a CudaDevice hands out.

class CudaAllocation final : public Allocation {
 public:
  CudaAllocation(int ordinal, MemHandle handle) : ordinal_(ordinal), handle_(std::move(handle)) {}

  void* data() const override { return AsPointer(range_.base()); }
  size_t size() const override { return range_.size(); }

  int ordinal() const { return ordinal_; }
  const MemHandle& handle() const { return handle_; }
  VmmRange& range() { return range_; }

 private:
  const int ordinal_;
  MemHandle handle_;  // kept while allocated (released after range_ is unmapped)
  VmmRange range_;
};

class VmmMapping final : public Mapping {
 public:
  VmmMapping(int ordinal, size_t size) : ordinal_(ordinal), size_(size) {}

  void* data() const override { return AsPointer(range_.base()); }
  size_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

  VmmRange& range() { return range_; }

 private:
  const int ordinal_;
  const size_t size_;
  VmmRange range_;
};

class LegacyMapping final : public Mapping {
 public:
  LegacyMapping(int ordinal, void* data, size_t size)
      : ordinal_(ordinal), data_(data), size_(size) {}
  LegacyMapping(const LegacyMapping&) = delete;
  LegacyMapping& operator=(const LegacyMapping&) = delete;
  ~LegacyMapping() override {
    ScopedDevice scoped;  // the handle was opened in this device's context
    if (scoped.Enter(ordinal_).ok() && cudaIpcCloseMemHandle(data_) != cudaSuccess) {
      cudaGetLastError();
    }
  }

  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

 private:
  const int ordinal_;
  void* const data_;
  const size_t size_;
};

class CudaEvent final : public Event {
 public:
  // `opened`: from another process (cudaIpcOpenEventHandle), so not exportable again.
  CudaEvent(int ordinal, cudaEvent_t event, bool opened)
      : ordinal_(ordinal), event_(event), opened_(opened) {}
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() override {
    ScopedDevice scoped;
    if (scoped.Enter(ordinal_).ok() && cudaEventDestroy(event_) != cudaSuccess) {
      cudaGetLastError();
    }
  }

  absl::StatusOr<EventHandle> Export() const override {
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

  absl::Status Record(StreamHandle stream) override {
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

  absl::StatusOr<bool> Query() override {
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

 private:
  const int ordinal_;
  const cudaEvent_t event_;
  const bool opened_;
};

// The host ranges registered through one CudaDevice, so that WaitValue can reject a word outside
// them (cuStreamWaitValue32 on unregistered memory fails late, or faults).
class HostRegistry {
 public:
  // Records [base, base + bytes); false when it overlaps a recorded range.
  bool Add(uintptr_t base, size_t bytes) {
    absl::MutexLock lock(&mu_);
    auto next = ranges_.lower_bound(base);
    if (next != ranges_.end() && next->first - base < bytes) return false;
    if (next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second > base) {
      return false;
    }
    ranges_.emplace(base, bytes);
    return true;
  }

  void Remove(uintptr_t base) {
    absl::MutexLock lock(&mu_);
    ranges_.erase(base);
  }

  // The base of the recorded range that holds [address, address + bytes), if any.
  std::optional<uintptr_t> Find(uintptr_t address, size_t bytes) const {
    absl::MutexLock lock(&mu_);
    auto next = ranges_.upper_bound(address);
    if (next == ranges_.begin()) return std::nullopt;
    const auto& [base, size] = *std::prev(next);
    if (address - base > size || size - (address - base) < bytes) return std::nullopt;
    return base;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<uintptr_t, size_t> ranges_ ABSL_GUARDED_BY(mu_);  // base -> bytes
};

class CudaHostRegistration final : public HostRegistration {
 public:
  CudaHostRegistration(std::shared_ptr<HostRegistry> registry, void* data)
      : registry_(std::move(registry)), data_(data) {}
  CudaHostRegistration(const CudaHostRegistration&) = delete;
  CudaHostRegistration& operator=(const CudaHostRegistration&) = delete;
  ~CudaHostRegistration() override {
    ScopedDevice scoped;  // portable registrations belong to no one context
    if (scoped.EnterCurrent().ok() && cudaHostUnregister(data_) != cudaSuccess) {
      cudaGetLastError();
    }
    registry_->Remove(reinterpret_cast<uintptr_t>(data_));
  }

 private:
  const std::shared_ptr<HostRegistry> registry_;
  void* const data_;
};

// collective::DeviceKernels (collective/cuda/device_kernels.h) as device::DeviceKernels.
class CudaKernels final : public DeviceKernels {
 public:
  explicit CudaKernels(std::unique_ptr<collective::DeviceKernels> kernels)
      : kernels_(std::move(kernels)) {}

  transport::MemoryKind memory() const override { return kernels_->memory(); }
  void ReduceInto(collective::DataType type, collective::ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    kernels_->ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(collective::DataType type, collective::ReduceOp op, void* dst,
                  std::span<const void* const> srcs, size_t count) const override {
    kernels_->ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(collective::DataType type, void* data, size_t count, int divisor) const override {
    kernels_->Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    kernels_->Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override { kernels_->Zero(dst, bytes); }
  absl::Status last_error() const override { return kernels_->last_error(); }

 private:
  const std::unique_ptr<collective::DeviceKernels> kernels_;
};

// ---------------------------------------------------------------------------------------------
// The device.

// What NewCudaDevice learns about one GPU.
struct Gpu {
  std::string name;
  std::array<uint8_t, 16> uuid{};
  bool rdma_with_vmm = false;  // cuMemCreate may ask for gpuDirectRDMACapable
  size_t granularity = 0;      // the minimum VMM allocation granularity
  std::vector<int> accessors;  // this GPU and the peers that can access its memory
};

CUmemAllocationProp AllocationProperties(int ordinal, bool rdma) {
  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = ordinal;
  properties.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  return properties;
}

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
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<collective::DeviceKernels> kernels,
                           collective::NewDeviceKernels(ordinal));
    return std::make_unique<CudaKernels>(std::move(kernels));
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

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice() {
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
  return std::unique_ptr<Device>(new CudaDevice(std::move(gpus)));
}

}  // namespace baton::device
