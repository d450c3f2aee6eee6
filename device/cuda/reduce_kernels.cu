#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/cuda/reduce_kernels.h"

// One kernel template per (format, op), as in reduce.cc: a grid-stride loop over 16-byte vectors
// when every pointer is 16-byte aligned, else over elements, and a scalar loop for the tail.
// Every thread reads all sources of its elements before it writes them, so dst may be one of
// the sources. The sources travel by value in a __grid_constant__ parameter: without it ptxas
// copies the runtime-indexed array to a local stack frame in every instantiation
// (../shared/reference/gpu.md, 3.2).
//
// Plain loads, not __ldg: dst may alias a source, and the read-only path is only valid for
// memory nobody writes during the kernel. Tuning (unrolling, CTAs per SM) is later work; the
// contract here is parity with reduce.h.

namespace baton::device::cuda::internal {
namespace {

constexpr int kThreads = 512;
constexpr size_t kVectorBytes = 16;

// ---- Formats: how elements are stored and in which type they are combined (reduce.cc) ----

template <typename T>
struct NativeFormat {
  using Storage = T;
  using Acc = T;
  __device__ static T Load(T x) { return x; }
  __device__ static T Store(T x) { return x; }
};

// NaN results are stored as reduce.h's canonical NaNs; the CUDA conversions produce 0x7FFF.
struct Float16Format {
  using Storage = uint16_t;
  using Acc = float;
  __device__ static float Load(uint16_t x) { return __half2float(__ushort_as_half(x)); }
  __device__ static uint16_t Store(float x) {
    return x != x ? uint16_t{0x7E00} : __half_as_ushort(__float2half_rn(x));
  }
};
struct Bfloat16Format {
  using Storage = uint16_t;
  using Acc = float;
  __device__ static float Load(uint16_t x) { return __uint_as_float(uint32_t{x} << 16); }
  __device__ static uint16_t Store(float x) {
    return x != x ? uint16_t{0x7FC0} : __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};
// e4m3 saturates to +/-448 like half.h (__NV_SATFINITE); NaN becomes 0x7F either way.
struct Fp8E4M3Format {
  using Storage = uint8_t;
  using Acc = float;
  __device__ static float Load(uint8_t x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
  }
  __device__ static uint8_t Store(float x) {
    return x != x ? uint8_t{0x7F} : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  }
};
// e5m2 overflows to infinity like half.h. __NV_NOSAT would do that in a software sequence
// (PTX has no non-saturating f32->e5m2 conversion), so: the saturating instruction, and
// infinity for every magnitude that rounds above 57344 (from 61440 on, ties to even included).
struct Fp8E5M2Format {
  using Storage = uint8_t;
  using Acc = float;
  __device__ static float Load(uint8_t x) {
    return __half2float(__ushort_as_half(static_cast<uint16_t>(uint32_t{x} << 8)));
  }
  __device__ static uint8_t Store(float x) {
    const uint8_t saturated = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    const uint8_t infinity = static_cast<uint8_t>((__float_as_uint(x) >> 24 & 0x80u) | 0x7Cu);
    if (x != x) return 0x7F;
    return fabsf(x) >= 61440.0f ? infinity : saturated;
  }
};

// ---- Operators (reduce.cc) ----

// Integer sums and products wrap around: computed in an unsigned type at least as wide as
// `unsigned`, converted back modulo 2^n.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  template <typename T>
  __device__ static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename T>
  __device__ static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};
// NaN propagates: the same expressions as reduce.cc, so ties between +0 and -0 also resolve
// the same way.
struct MinOp {
  template <typename T>
  __device__ static T Apply(T a, T b) {
    return (a < b || a != a) ? a : b;  // NOLINT(misc-redundant-expression)
  }
};
struct MaxOp {
  template <typename T>
  __device__ static T Apply(T a, T b) {
    return (a > b || a != a) ? a : b;  // NOLINT(misc-redundant-expression)
  }
};

// ---- Kernels ----

struct ReduceArgs {
  void* dst;
  const void* srcs[kMaxReduceSources];
  int num_srcs;
  size_t count;
  bool vectorized;  // every pointer is 16-byte aligned
};

template <typename Format, typename Op>
__device__ void ReduceElement(const ReduceArgs& args, size_t i) {
  using Storage = typename Format::Storage;
  auto acc = Format::Load(static_cast<const Storage*>(args.srcs[0])[i]);
  for (int s = 1; s < args.num_srcs; ++s) {
    acc = Op::Apply(acc, Format::Load(static_cast<const Storage*>(args.srcs[s])[i]));
  }
  static_cast<Storage*>(args.dst)[i] = Format::Store(acc);
}

template <typename Format, typename Op>
__global__ void __launch_bounds__(kThreads) ReduceKernel(const __grid_constant__ ReduceArgs args) {
  using Storage = typename Format::Storage;
  using Acc = typename Format::Acc;
  constexpr size_t kPerVector = kVectorBytes / sizeof(Storage);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_begin = 0;
  if (args.vectorized) {
    const size_t vectors = args.count / kPerVector;
    for (size_t v = first; v < vectors; v += stride) {
      Storage elements[kPerVector];
      Acc acc[kPerVector];
      uint4 raw = static_cast<const uint4*>(args.srcs[0])[v];
      memcpy(elements, &raw, kVectorBytes);
#pragma unroll
      for (size_t e = 0; e < kPerVector; ++e) acc[e] = Format::Load(elements[e]);
      for (int s = 1; s < args.num_srcs; ++s) {
        raw = static_cast<const uint4*>(args.srcs[s])[v];
        memcpy(elements, &raw, kVectorBytes);
#pragma unroll
        for (size_t e = 0; e < kPerVector; ++e)
          acc[e] = Op::Apply(acc[e], Format::Load(elements[e]));
      }
#pragma unroll
      for (size_t e = 0; e < kPerVector; ++e) elements[e] = Format::Store(acc[e]);
      memcpy(&raw, elements, kVectorBytes);
      static_cast<uint4*>(args.dst)[v] = raw;
    }
    scalar_begin = vectors * kPerVector;
  }
  for (size_t i = scalar_begin + first; i < args.count; i += stride) {
    ReduceElement<Format, Op>(args, i);
  }
}

// Integers divide in a 64-bit type of their signedness and truncate; floats divide in their
// accumulation type and round once (reduce.cc DivideTyped).
template <typename Format>
__global__ void __launch_bounds__(kThreads)
    DivideKernel(typename Format::Storage* data, size_t count, int divisor) {
  using Acc = typename Format::Acc;
  using Divisor =
      std::conditional_t<std::is_integral_v<Acc>,
                         std::conditional_t<std::is_signed_v<Acc>, int64_t, uint64_t>, Acc>;
  const auto d = static_cast<Divisor>(divisor);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = Format::Store(static_cast<Acc>(Format::Load(data[i]) / d));
  }
}

// ---- Dispatch ----

int GridFor(size_t work_items, int max_blocks) {
  const size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < static_cast<size_t>(max_blocks) ? blocks : max_blocks);
}

template <typename Format, typename Op>
LaunchError Reduce(const ReduceArgs& args, int max_blocks, cudaStream_t stream) {
  constexpr size_t kPerVector = kVectorBytes / sizeof(typename Format::Storage);
  const size_t work = args.vectorized ? args.count / kPerVector + kPerVector : args.count;
  ReduceKernel<Format, Op><<<GridFor(work, max_blocks), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

template <typename Format>
LaunchError WithOp(ReduceOp op, const ReduceArgs& args, int max_blocks, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Reduce<Format, SumOp>(args, max_blocks, stream);
    case ReduceOp::kProd:
      return Reduce<Format, ProdOp>(args, max_blocks, stream);
    case ReduceOp::kMin:
      return Reduce<Format, MinOp>(args, max_blocks, stream);
    case ReduceOp::kMax:
      return Reduce<Format, MaxOp>(args, max_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename Format>
LaunchError Divide(void* data, size_t count, int divisor, int max_blocks, cudaStream_t stream) {
  DivideKernel<Format><<<GridFor(count, max_blocks), kThreads, 0, stream>>>(
      static_cast<typename Format::Storage*>(data), count, divisor);
  return cudaGetLastError();
}

// Calls Fn::Run<Format>(args...) for the runtime type.
template <typename Fn, typename... Args>
LaunchError WithType(DataType type, Args... args) {
  switch (type) {
    case DataType::kInt8:
      return Fn::template Run<NativeFormat<int8_t>>(args...);
    case DataType::kUint8:
      return Fn::template Run<NativeFormat<uint8_t>>(args...);
    case DataType::kInt32:
      return Fn::template Run<NativeFormat<int32_t>>(args...);
    case DataType::kUint32:
      return Fn::template Run<NativeFormat<uint32_t>>(args...);
    case DataType::kInt64:
      return Fn::template Run<NativeFormat<int64_t>>(args...);
    case DataType::kUint64:
      return Fn::template Run<NativeFormat<uint64_t>>(args...);
    case DataType::kFloat16:
      return Fn::template Run<Float16Format>(args...);
    case DataType::kBfloat16:
      return Fn::template Run<Bfloat16Format>(args...);
    case DataType::kFloat32:
      return Fn::template Run<NativeFormat<float>>(args...);
    case DataType::kFloat64:
      return Fn::template Run<NativeFormat<double>>(args...);
    case DataType::kFp8E4M3:
      return Fn::template Run<Fp8E4M3Format>(args...);
    case DataType::kFp8E5M2:
      return Fn::template Run<Fp8E5M2Format>(args...);
  }
  return cudaErrorInvalidValue;
}

struct ReduceFn {
  template <typename Format>
  static LaunchError Run(ReduceOp op, const ReduceArgs* args, int max_blocks, cudaStream_t stream) {
    return WithOp<Format>(op, *args, max_blocks, stream);
  }
};
struct DivideFn {
  template <typename Format>
  static LaunchError Run(void* data, size_t count, int divisor, int max_blocks,
                         cudaStream_t stream) {
    return Divide<Format>(data, count, divisor, max_blocks, stream);
  }
};

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0; }

}  // namespace

LaunchError LaunchReduce(DataType type, ReduceOp op, void* dst, const void* const* srcs,
                         int num_srcs, size_t count, int max_blocks, CUstream_st* stream) {
  if (num_srcs < 1 || num_srcs > kMaxReduceSources || max_blocks < 1) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  ReduceArgs args{};
  args.dst = dst;
  args.num_srcs = num_srcs;
  args.count = count;
  args.vectorized = Aligned(dst);
  for (int s = 0; s < num_srcs; ++s) {
    args.srcs[s] = srcs[s];
    args.vectorized = args.vectorized && Aligned(srcs[s]);
  }
  return WithType<ReduceFn>(type, op, &args, max_blocks, stream);
}

LaunchError LaunchDivide(DataType type, void* data, size_t count, int divisor, int max_blocks,
                         CUstream_st* stream) {
  if (divisor < 1 || max_blocks < 1) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return WithType<DivideFn>(type, data, count, divisor, max_blocks, stream);
}

}  // namespace baton::device::cuda::internal
