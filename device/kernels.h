#pragma once

// The element-wise work of an operation, per memory kind: reduce, copy, zero, divide. Algorithms
// and schedules (collective/) call them through their operation context
// (collective::OpContext::kernels), never the host functions of device/reduce.h directly, so that
// buffers in another kind of memory (GPU) need one more Kernels implementation, not a copy of
// each algorithm. Implementations: HostKernels() below; the device's (Device::NewKernels:
// device/cuda/kernels.h for CUDA, the host fake's for tests).

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "device/data_type.h"
#include "device/memory_kind.h"

namespace baton::device {

class Kernels {
 public:
  virtual ~Kernels() = default;

  // The memory the kernels read and write.
  virtual MemoryKind memory() const = 0;
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

// The element-wise kernels on device memory. Kernels calls return nothing, so a failure (a CUDA
// error) is kept: last_error() returns the first one, and later calls do nothing. Callers check
// it before they trust or publish results.
class DeviceKernels : public Kernels {
 public:
  virtual absl::Status last_error() const = 0;
};

}  // namespace baton::device
