#pragma once

// The objects the CUDA device (device/cuda_device.h) hands out: allocations, mappings of other
// processes' memory, interprocess events and host registrations, each releasing what it holds
// in its destructor. Internal to target baton_device_cuda.
//
// Destructors that need a context enter the object's device (ScopedDevice) and restore the
// calling thread's; their failures are not reported and leave no "last error". Threads: as for
// device::Device, an object may be used from several threads at once.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device/cuda/driver_api.h"
#include "device/cuda/vmm.h"
#include "device/device.h"

namespace baton::device::cuda {

// Memory of device `ordinal` made with cuMemCreate: `handle`, mapped into range() by the
// device after construction.
class CudaAllocation final : public Allocation {
 public:
  CudaAllocation(int ordinal, MemHandle handle) : ordinal_(ordinal), handle_(std::move(handle)) {}

  void* data() const override { return AsPointer(range_.base()); }
  size_t size() const override { return range_.size(); }

  int ordinal() const { return ordinal_; }
  const MemHandle& handle() const { return handle_; }
  VmmRange& range() { return range_; }

 private:
  const int ordinal_;
  MemHandle handle_;  // kept while allocated (released after range_ is unmapped)
  VmmRange range_;
};

// Another process's VMM segments, mapped into range() by the device after construction.
class VmmMapping final : public Mapping {
 public:
  VmmMapping(int ordinal, size_t size) : ordinal_(ordinal), size_(size) {}

  void* data() const override { return AsPointer(range_.base()); }
  size_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

  VmmRange& range() { return range_; }

 private:
  const int ordinal_;
  const size_t size_;
  VmmRange range_;
};

// Another process's cudaMalloc memory, opened with cudaIpcOpenMemHandle on device `ordinal`;
// closed by the destructor.
class LegacyMapping final : public Mapping {
 public:
  LegacyMapping(int ordinal, void* data, size_t size)
      : ordinal_(ordinal), data_(data), size_(size) {}
  LegacyMapping(const LegacyMapping&) = delete;
  LegacyMapping& operator=(const LegacyMapping&) = delete;
  ~LegacyMapping() override;

  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int ordinal() const override { return ordinal_; }

 private:
  const int ordinal_;
  void* const data_;
  const size_t size_;
};

// An interprocess event of device `ordinal`; destroyed by the destructor.
class CudaEvent final : public Event {
 public:
  // `opened`: from another process (cudaIpcOpenEventHandle), so not exportable again.
  CudaEvent(int ordinal, cudaEvent_t event, bool opened)
      : ordinal_(ordinal), event_(event), opened_(opened) {}
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() override;

  absl::StatusOr<EventHandle> Export() const override;
  // InvalidArgument for a stream of another device.
  absl::Status Record(StreamHandle stream) override;
  absl::StatusOr<bool> Query() override;

 private:
  const int ordinal_;
  const cudaEvent_t event_;
  const bool opened_;
};

// The host ranges registered through one CudaDevice, so that WaitValue can reject a word outside
// them (cuStreamWaitValue32 on unregistered memory fails late, or faults).
class HostRegistry {
 public:
  // Records [base, base + bytes); false when it overlaps a recorded range.
  bool Add(uintptr_t base, size_t bytes);

  void Remove(uintptr_t base);

  // The base of the recorded range that holds [address, address + bytes), if any.
  std::optional<uintptr_t> Find(uintptr_t address, size_t bytes) const;

 private:
  mutable absl::Mutex mu_;
  std::map<uintptr_t, size_t> ranges_ ABSL_GUARDED_BY(mu_);  // base -> bytes
};

// Host memory at `data`, registered with cudaHostRegister and recorded in `registry`;
// unregistered and removed from it by the destructor.
class CudaHostRegistration final : public HostRegistration {
 public:
  CudaHostRegistration(std::shared_ptr<HostRegistry> registry, void* data)
      : registry_(std::move(registry)), data_(data) {}
  CudaHostRegistration(const CudaHostRegistration&) = delete;
  CudaHostRegistration& operator=(const CudaHostRegistration&) = delete;
  ~CudaHostRegistration() override;

 private:
  const std::shared_ptr<HostRegistry> registry_;
  void* const data_;
};

}  // namespace baton::device::cuda
