#pragma once

// Element-wise reduction kernels on host memory. Half-precision and fp8 types are accumulated in
// float32 inside one call and rounded (round-to-nearest-even) once when stored; device/half.h
// documents the conversions (fp8 e4m3 saturates to +/-448, the other narrow types overflow to
// infinity, NaN becomes the format's canonical NaN).
//
// Integer sums and products wrap around (two's complement). Floating-point min and max propagate
// NaN; between +0 and -0 either may be returned. Pointers must be aligned for the element type.
// The functions are thread-safe (no state).

#include <cstddef>
#include <span>

#include "device/data_type.h"

namespace baton::device {

// dst[i] = op(dst[i], src[i]) for i < count. kAvg reduces as kSum. dst and src may be equal but
// must not otherwise overlap.
void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src, size_t count);

// dst[i] = op(srcs[0][i], srcs[1][i], ...) for i < count, accumulating all sources before storing
// once. srcs must be non-empty; dst may be one of the sources. kAvg reduces as kSum.
void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                size_t count);

// data[i] = data[i] / divisor, the final step of kAvg. Integer types divide with truncation.
// divisor must be positive (it is the number of ranks).
void DivideInPlace(DataType type, void* data, size_t count, int divisor);

}  // namespace baton::device
