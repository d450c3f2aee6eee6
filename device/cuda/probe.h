#pragma once

// What the CUDA device (device/cuda_device.h) learns about the node's GPUs before it serves
// them, and the checks that decide whether it can. Internal to target baton_device_cuda.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::device::cuda {

// What NewCudaDevice learns about one GPU.
struct Gpu {
  std::string name;
  std::array<uint8_t, 16> uuid{};
  bool rdma_with_vmm = false;  // cuMemCreate may ask for gpuDirectRDMACapable
  size_t granularity = 0;      // the minimum VMM allocation granularity
  std::vector<int> accessors;  // this GPU and the peers that can access its memory
};

// The number of GPUs this process sees (cudaGetDeviceCount), at least 1; FailedPrecondition
// without a driver or GPU: "no CUDA driver or GPU on this node (cudaGetDeviceCount: ...)", or
// "no CUDA GPU on this node (cudaGetDeviceCount: 0)". The one probe of whether CUDA can run here
// (the device's and the kernels').
absl::StatusOr<int> CountGpus();

// Every GPU this process sees, by ordinal, with the peers that can access each one's memory.
// Loads the driver's entry points (driver_api.h) once the runtime has found a driver.
// FailedPrecondition saying why the GPUs cannot be used: no driver or GPU ("no CUDA driver or GPU
// on this node (cudaGetDeviceCount: ...)"), a driver without an entry point Baton needs, a GPU
// without VMM or POSIX descriptor handles (named).
absl::StatusOr<std::vector<Gpu>> ProbeGpus();

}  // namespace baton::device::cuda
