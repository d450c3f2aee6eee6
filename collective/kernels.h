#pragma once

// The element-wise work of an operation, per memory kind: reduce, copy, zero, divide. Algorithms
// and schedules call them through their operation context (OpContext::kernels), never the host
// functions of reduce.h directly, so that buffers in another kind of memory (GPU) need one more
// Kernels implementation, not a copy of each algorithm.

#include <cstddef>
#include <span>

#include "collective/data_type.h"
#include "transport/memory.h"

namespace baton::collective {

class Kernels {
 public:
  virtual ~Kernels() = default;

  // The memory the kernels read and write.
  virtual transport::MemoryKind memory() const = 0;
  // dst[i] = op(dst[i], src[i]) for i < count (reduce.h ReduceInto).
  virtual void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                          size_t count) const = 0;
  // dst[i] = op over srcs[k][i] (reduce.h ReduceMany); dst may be one of the sources.
  virtual void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                          size_t count) const = 0;
  // data[i] /= divisor (reduce.h DivideInPlace), the last step of kAvg.
  virtual void Divide(DataType type, void* data, size_t count, int divisor) const = 0;
  // Copies `bytes`; the ranges may overlap (memmove).
  virtual void Copy(void* dst, const void* src, size_t bytes) const = 0;
  // Sets `bytes` at dst to zero.
  virtual void Zero(void* dst, size_t bytes) const = 0;
};

// The kernels of host memory (reduce.h, memmove, memset). Thread-safe; lives forever.
const Kernels& HostKernels();

}  // namespace baton::collective
