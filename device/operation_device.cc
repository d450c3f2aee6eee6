#include "device/operation_device.h"

#include <utility>

#include "common/status_macros.h"

namespace baton::device {
namespace {

class OrdinalDevice final : public OperationDevice {
 public:
  OrdinalDevice(Device* device, std::unique_ptr<DeviceKernels> kernels, PinnedPool* staging_pool)
      : device_(device), kernels_(std::move(kernels)), staging_pool_(staging_pool) {}

  const DeviceKernels& kernels() const override { return *kernels_; }

  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    // On the legacy default stream, synchronised: done before the caller reads or reuses either
    // side. (On CUDA the copies of the staging threads serialise on it; docs/gpu.md.)
    BATON_RETURN_IF_ERROR(device_->CopyAsync(dst, src, bytes, nullptr));
    return device_->Synchronize(nullptr);
  }

  absl::StatusOr<PinnedBuffer> StagingMemory(size_t bytes) const override {
    return staging_pool_->Take(bytes);
  }

 private:
  Device* const device_;
  const std::unique_ptr<DeviceKernels> kernels_;
  PinnedPool* const staging_pool_;
};

}  // namespace

OperationDevices::OperationDevices(Device* device, size_t staging_keep_bytes,
                                   PinnedPool::AlsoRegister also_register)
    : device_(device), staging_pool_(device, staging_keep_bytes, std::move(also_register)) {}

OperationDevices::~OperationDevices() = default;

absl::StatusOr<const OperationDevice*> OperationDevices::For(int ordinal) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<OperationDevice>& found = devices_[ordinal];
  if (found == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceKernels>> kernels = device_->NewKernels(ordinal);
    if (!kernels.ok()) {
      devices_.erase(ordinal);
      return kernels.status();
    }
    found = std::make_unique<OrdinalDevice>(device_, std::move(*kernels), &staging_pool_);
  }
  return found.get();
}

}  // namespace baton::device
