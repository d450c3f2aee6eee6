#include "device/kernels.h"

#include <cstring>

#include "device/reduce.h"

namespace baton::device {
namespace {

class HostKernelsImpl final : public Kernels {
 public:
  MemoryKind memory() const override { return MemoryKind::kHost; }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    device::ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    device::ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    DivideInPlace(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
};

}  // namespace

const Kernels& HostKernels() {
  static const HostKernelsImpl kernels;
  return kernels;
}

}  // namespace baton::device
