#pragma once

// The CUDA driver API as the CUDA device (device/cuda_device.h) calls it: a table of entry points
// looked up once per process with cudaGetDriverEntryPointByVersion, so nothing links libcuda, and
// the macro that turns a driver failure into an absl::Status with the call and its location
// (runtime failures: device/cuda/cuda_status.h). Internal to target baton_device_cuda; built iff
// BATON_HAVE_CUDA.
//
// <cuda.h> and <cudaTypedefs.h> provide types only: every driver function is called through a
// pointer of the table.
//
// Threads: LoadedDriver() may be called from any thread (the lookup runs once); the table never
// changes afterwards.

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::device::cuda {

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

// The driver's entry points, looked up once per process (call it after the runtime found a
// driver: NewCudaDevice does, after cudaGetDeviceCount). FailedPrecondition names the first entry
// point the driver lacks.
const absl::StatusOr<DriverApi>& LoadedDriver();

// The loaded driver API. Only called once LoadedDriver() succeeded: every object of the CUDA
// device is made by a CudaDevice, which NewCudaDevice creates only then.
const DriverApi& Cu();

// "<what> failed: <CUDA_ERROR_NAME>: <description> [<file>:<line>]" with the canonical code that
// fits (out of memory -> ResourceExhausted, bad values or handles -> InvalidArgument, no driver,
// device or support -> FailedPrecondition, else Internal). OK for CUDA_SUCCESS.
absl::Status CuStatus(CUresult result, absl::string_view what, const char* file, int line);

// "0x<hex>", for error messages.
std::string Address(uint64_t address);
std::string Address(const void* pointer);

// The driver hands out addresses as integers (CUdeviceptr).
inline void* AsPointer(CUdeviceptr address) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): an address, not an integer made a pointer
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}
inline CUdeviceptr AsDevicePointer(const void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}
// cuMemImportFromShareableHandle takes a POSIX descriptor as the value of its pointer argument.
inline void* DescriptorAsHandle(int fd) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver's convention
  return reinterpret_cast<void*>(static_cast<uintptr_t>(fd));
}

}  // namespace baton::device::cuda

// Calls the driver function cu<function>(...) and evaluates to its Status.
#define BATON_CU(function, ...)                                                      \
  ::baton::device::cuda::CuStatus(::baton::device::cuda::Cu().function(__VA_ARGS__), \
                                  "cu" #function, __FILE__, __LINE__)
