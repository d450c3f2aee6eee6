#include "device/reduce.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <type_traits>

#include "device/half.h"

// The kernels are plain loops over __restrict pointers so that the compiler vectorises them
// (this file is built with -O3; see CMakeLists.txt), for each instruction set (BATON_SIMD_CLONES).
// Every (type, op) pair is one template instantiation; the switch statements at the bottom pick one
// per call, outside the loops.

// The loops below are compiled three times on x86-64: for AVX-512 (x86-64-v4), for AVX2 and F16C
// (x86-64-v3), and for the baseline (SSE2), and the first call picks the best the CPU has
// (GCC's target_clones). Not under the sanitizers, whose runtimes are not set up yet when the
// loader resolves the choice, and not under clang (nor so clang-tidy), which rejects
// target_clones on function templates ("multiversioned functions do not yet support function
// templates", clang 14).
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define BATON_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BATON_SIMD_CLONES
#endif

namespace baton::device {
namespace {

// How elements are stored and in which type they are combined. Narrow floats are combined in
// float32 and rounded once on the way back.
template <typename T>
struct NativeFormat {
  using Storage = T;
  using Acc = T;
  static T Load(T x) { return x; }
  static T Store(T x) { return x; }
};
struct Float16Format {
  using Storage = uint16_t;
  using Acc = float;
  static float Load(uint16_t x) { return HalfToFloat(x); }
  static uint16_t Store(float x) { return FloatToHalf(x); }
};
struct Bfloat16Format {
  using Storage = uint16_t;
  using Acc = float;
  static float Load(uint16_t x) { return Bfloat16ToFloat(x); }
  static uint16_t Store(float x) { return FloatToBfloat16(x); }
};
struct Fp8E4M3Format {
  using Storage = uint8_t;
  using Acc = float;
  static float Load(uint8_t x) { return kFp8E4M3Values[x]; }  // a lookup beats SSE2 arithmetic
  static uint8_t Store(float x) { return FloatToFp8E4M3(x); }
};
struct Fp8E5M2Format {
  using Storage = uint8_t;
  using Acc = float;
  static float Load(uint8_t x) { return kFp8E5M2Values[x]; }
  static uint8_t Store(float x) { return FloatToFp8E5M2(x); }
};

// Integer sums and products wrap around (two's complement). They are computed in an unsigned
// type at least as wide as `unsigned`, so that neither signed overflow nor the promotion of
// narrow unsigned operands to `int` can invoke undefined behaviour; converting back to T is
// modular (C++20).
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};
// Floating-point min and max propagate NaN (like IEEE 754-2019 minimum/maximum and
// torch.minimum): a NaN anywhere makes the result NaN, whatever order the ranks reduce in. The
// `a != a` test is the vectorisable spelling of isnan.
struct MinOp {
  template <typename T>
  static T Apply(T a, T b) {
    return (a < b || a != a) ? a : b;  // NOLINT(misc-redundant-expression)
  }
};
struct MaxOp {
  template <typename T>
  static T Apply(T a, T b) {
    return (a > b || a != a) ? a : b;  // NOLINT(misc-redundant-expression)
  }
};

template <typename Format, typename Op>
BATON_SIMD_CLONES void ReduceIntoDistinct(typename Format::Storage* __restrict dst,
                                          const typename Format::Storage* __restrict src,
                                          size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Format::Store(Op::Apply(Format::Load(dst[i]), Format::Load(src[i])));
  }
}

template <typename Format, typename Op>
BATON_SIMD_CLONES void ReduceIntoSelf(typename Format::Storage* data, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const auto x = Format::Load(data[i]);
    data[i] = Format::Store(Op::Apply(x, x));
  }
}

template <typename Format, typename Op>
void ReduceIntoTyped(void* dst, const void* src, size_t count) {
  using Storage = typename Format::Storage;
  if (dst == src) {
    ReduceIntoSelf<Format, Op>(static_cast<Storage*>(dst), count);
  } else {
    ReduceIntoDistinct<Format, Op>(static_cast<Storage*>(dst), static_cast<const Storage*>(src),
                                   count);
  }
}

// ReduceMany works through the buffers in blocks that fit in L1: every source is folded into a
// block of accumulators before the block is stored once. Reading all sources of a block before
// writing it also makes `dst` being one of the sources harmless.
constexpr size_t kBlockElements = 1024;

template <typename Format>
BATON_SIMD_CLONES void LoadBlock(typename Format::Acc* __restrict acc,
                                 const typename Format::Storage* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) acc[i] = Format::Load(src[i]);
}

template <typename Format, typename Op>
BATON_SIMD_CLONES void FoldBlock(typename Format::Acc* __restrict acc,
                                 const typename Format::Storage* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) acc[i] = Op::Apply(acc[i], Format::Load(src[i]));
}

template <typename Format>
BATON_SIMD_CLONES void StoreBlock(typename Format::Storage* __restrict dst,
                                  const typename Format::Acc* __restrict acc, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Format::Store(acc[i]);
}

// Two sources into a third buffer in one pass (the ring's out-of-place step: own input plus what
// arrived), without the block accumulators.
template <typename Format, typename Op>
BATON_SIMD_CLONES void ReducePairDistinct(typename Format::Storage* __restrict dst,
                                          const typename Format::Storage* __restrict a,
                                          const typename Format::Storage* __restrict b,
                                          size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Format::Store(Op::Apply(Format::Load(a[i]), Format::Load(b[i])));
  }
}

template <typename Format, typename Op>
void ReduceManyTyped(void* dst, std::span<const void* const> srcs, size_t count) {
  using Storage = typename Format::Storage;
  if (srcs.size() == 2 && dst != srcs[0] && dst != srcs[1]) {
    ReducePairDistinct<Format, Op>(static_cast<Storage*>(dst), static_cast<const Storage*>(srcs[0]),
                                   static_cast<const Storage*>(srcs[1]), count);
    return;
  }
  if (srcs.size() == 2 && dst == srcs[0]) {
    ReduceIntoTyped<Format, Op>(dst, srcs[1], count);
    return;
  }
  typename Format::Acc acc[kBlockElements];
  for (size_t begin = 0; begin < count; begin += kBlockElements) {
    const size_t n = std::min(kBlockElements, count - begin);
    LoadBlock<Format>(acc, static_cast<const Storage*>(srcs[0]) + begin, n);
    for (size_t s = 1; s < srcs.size(); ++s) {
      FoldBlock<Format, Op>(acc, static_cast<const Storage*>(srcs[s]) + begin, n);
    }
    StoreBlock<Format>(static_cast<Storage*>(dst) + begin, acc, n);
  }
}

template <typename Format>
BATON_SIMD_CLONES void DivideTyped(void* data, size_t count, int divisor) {
  auto* values = static_cast<typename Format::Storage*>(data);
  using Acc = typename Format::Acc;
  // Integers divide in a 64-bit type of their signedness (a divisor above 127 must not wrap in
  // int8) and truncate toward zero; the quotient always fits back. Floats divide in their
  // accumulation type and round once.
  using Divisor =
      std::conditional_t<std::is_integral_v<Acc>,
                         std::conditional_t<std::is_signed_v<Acc>, int64_t, uint64_t>, Acc>;
  const auto d = static_cast<Divisor>(divisor);
  for (size_t i = 0; i < count; ++i) {
    values[i] = Format::Store(static_cast<Acc>(Format::Load(values[i]) / d));
  }
}

// Calls Fn::template Run<Format, Op> for the runtime (type, op).
template <typename Format, typename Fn, typename... Args>
void WithOp(ReduceOp op, Args... args) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Fn::template Run<Format, SumOp>(args...);
    case ReduceOp::kProd:
      return Fn::template Run<Format, ProdOp>(args...);
    case ReduceOp::kMin:
      return Fn::template Run<Format, MinOp>(args...);
    case ReduceOp::kMax:
      return Fn::template Run<Format, MaxOp>(args...);
  }
}

template <typename Fn, typename... Args>
void WithTypeAndOp(DataType type, ReduceOp op, Args... args) {
  switch (type) {
    case DataType::kInt8:
      return WithOp<NativeFormat<int8_t>, Fn>(op, args...);
    case DataType::kUint8:
      return WithOp<NativeFormat<uint8_t>, Fn>(op, args...);
    case DataType::kInt32:
      return WithOp<NativeFormat<int32_t>, Fn>(op, args...);
    case DataType::kUint32:
      return WithOp<NativeFormat<uint32_t>, Fn>(op, args...);
    case DataType::kInt64:
      return WithOp<NativeFormat<int64_t>, Fn>(op, args...);
    case DataType::kUint64:
      return WithOp<NativeFormat<uint64_t>, Fn>(op, args...);
    case DataType::kFloat16:
      return WithOp<Float16Format, Fn>(op, args...);
    case DataType::kBfloat16:
      return WithOp<Bfloat16Format, Fn>(op, args...);
    case DataType::kFloat32:
      return WithOp<NativeFormat<float>, Fn>(op, args...);
    case DataType::kFloat64:
      return WithOp<NativeFormat<double>, Fn>(op, args...);
    case DataType::kFp8E4M3:
      return WithOp<Fp8E4M3Format, Fn>(op, args...);
    case DataType::kFp8E5M2:
      return WithOp<Fp8E5M2Format, Fn>(op, args...);
  }
}

struct ReduceIntoFn {
  template <typename Format, typename Op>
  static void Run(void* dst, const void* src, size_t count) {
    ReduceIntoTyped<Format, Op>(dst, src, count);
  }
};
struct ReduceManyFn {
  template <typename Format, typename Op>
  static void Run(void* dst, std::span<const void* const> srcs, size_t count) {
    ReduceManyTyped<Format, Op>(dst, srcs, count);
  }
};
struct DivideFn {
  // Division does not depend on the reduce op; WithTypeAndOp is called with kSum only.
  template <typename Format, typename Op>
  static void Run(void* data, size_t count, int divisor) {
    DivideTyped<Format>(data, count, divisor);
  }
};

}  // namespace

void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src, size_t count) {
  if (count == 0) return;
  WithTypeAndOp<ReduceIntoFn>(type, op, dst, src, count);
}

void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                size_t count) {
  assert(!srcs.empty());
  if (count == 0 || srcs.empty()) return;
  WithTypeAndOp<ReduceManyFn>(type, op, dst, srcs, count);
}

void DivideInPlace(DataType type, void* data, size_t count, int divisor) {
  assert(divisor > 0);
  if (count == 0 || divisor <= 0) return;
  WithTypeAndOp<DivideFn>(type, ReduceOp::kSum, data, count, divisor);
}

}  // namespace baton::device
