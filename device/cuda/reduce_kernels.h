#pragma once

// The CUDA launchers behind CudaKernels (kernels.h): plain functions over device
// pointers that enqueue one kernel on `stream` and return the launch's error, without waiting.
// Only kernels.cc calls them; they are split from it so that nvcc compiles the kernels
// alone (reduce_kernels.cu) and absl stays on the host compiler's side.
//
// The element semantics are device/reduce.h's, bit for bit: integers wrap around; float16,
// bfloat16 and fp8 are widened to float32, combined there in source order and rounded once on
// the store (fp8 e4m3 saturates to +/-448, e5m2 and the 16-bit formats overflow to infinity);
// min and max propagate NaN; a NaN result is stored as the format's canonical NaN (reduce.h's
// 0x7E00, 0x7FC0, 0x7F). float32 and float64 NaN payloads are the GPU's.

#include <cstddef>

#include "device/data_type.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace baton::device::cuda::internal {

// The most sources one ReduceMany pass takes (they travel in the kernel's parameters).
inline constexpr int kMaxReduceSources = 128;

// The launch error as the CUDA runtime's cudaError_t value (0 = cudaSuccess), kept an int here
// so that this header needs no CUDA header.
using LaunchError = int;

// dst[i] = op(srcs[0][i], ..., srcs[num_srcs - 1][i]) for i < count; kAvg reduces as kSum.
// 1 <= num_srcs <= kMaxReduceSources; dst may be one of the sources, otherwise no range may
// overlap another. `max_blocks` caps the grid (a small multiple of the device's SMs).
LaunchError LaunchReduce(DataType type, ReduceOp op, void* dst, const void* const* srcs,
                         int num_srcs, size_t count, int max_blocks, CUstream_st* stream);

// data[i] /= divisor (reduce.h DivideInPlace: integers truncate toward zero). divisor > 0.
LaunchError LaunchDivide(DataType type, void* data, size_t count, int divisor, int max_blocks,
                         CUstream_st* stream);

}  // namespace baton::device::cuda::internal
