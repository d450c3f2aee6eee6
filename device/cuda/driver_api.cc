#include "device/cuda/driver_api.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace baton::device::cuda {
namespace {

// Entry points are requested as of CUDA 12.0: every function below has its current ABI by then
// (cuMemGetAddressRange_v2, cuStreamWaitValue32_v2, cuDeviceGetUuid_v2, ...), and a driver that
// runs this CUDA 13 runtime is newer. The typedefs name the version each request returns.
constexpr unsigned int kDriverApiVersion = 12000;

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

}  // namespace

const absl::StatusOr<DriverApi>& LoadedDriver() {
  static const auto* const api = new absl::StatusOr<DriverApi>(LoadDriverApi());
  return *api;
}

const DriverApi& Cu() { return *LoadedDriver(); }

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

std::string Address(uint64_t address) { return absl::StrCat("0x", absl::Hex(address)); }
std::string Address(const void* pointer) {
  return Address(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pointer)));
}

}  // namespace baton::device::cuda
