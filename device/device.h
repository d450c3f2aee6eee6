#pragma once

// The GPU as libbaton and batond use it: memory one process exports and another maps,
// interprocess events (a rank's stream -> the daemon), stream waits on a host word (the daemon
// -> a rank's stream), copies and the element-wise kernels. No CUDA type appears here, so the
// protocol code above it (registration, ordering, failure release, staging) is the same for
// both implementations:
//   - device/cuda_device.h: CUDA, built iff BATON_HAVE_CUDA; the driver is loaded at run time,
//     so binaries start on nodes without a GPU (NewCudaDevice then says why there is none);
//   - device/host_fake.h: "device memory" is memfd-backed host memory, streams are threads and
//     events are words in shared memory, so the normal test run covers the protocol on machines
//     without a GPU.
//
// Streams are opaque handles (StreamHandle): a cudaStream_t for CUDA (nullptr is the legacy
// default stream), a HostFakeDevice stream for the fake. Work enqueued on one stream runs in
// order; the host call returns before it runs.
//
// Threads: a Device and its objects may be used from several threads at once.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/kernels.h"

namespace baton::device {

// A file descriptor, closed by the destructor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(-1); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd);

 private:
  int fd_ = -1;
};

using StreamHandle = void*;

// How an allocation is shared with another process.
enum class ShareKind : uint32_t {
  kVmm = 1,        // one POSIX file descriptor per physical segment (cuMemCreate memory)
  kLegacyIpc = 2,  // a 64-byte CUDA IPC handle of a cudaMalloc allocation (no descriptor)
};

// "vmm", "legacy_ipc".
const char* ShareKindName(ShareKind kind);

// The size of CUDA's IPC memory and event handles.
inline constexpr size_t kIpcHandleBytes = 64;
// The most physical segments one exported allocation may have.
inline constexpr size_t kMaxSegments = 16;

// An allocation as another process needs it to map it. Moving it moves the descriptors.
struct ExportedMemory {
  ShareKind kind = ShareKind::kVmm;
  std::array<uint8_t, 16> device_uuid{};  // the GPU that holds it (ordinals differ by process)
  uint64_t base = 0;                      // the allocation's first address in the exporting process
  uint64_t size = 0;                      // its bytes (for kVmm the sum of segment_sizes)
  uint64_t buffer_id = 0;  // the driver's id of the allocation: a reused address gets a new one
  std::vector<uint64_t> segment_sizes;                // kVmm: the segments, in address order
  std::vector<UniqueFd> segment_fds;                  // kVmm: one per segment
  std::array<uint8_t, kIpcHandleBytes> ipc_handle{};  // kLegacyIpc
};

// Memory this process allocated on a device; freed by the destructor.
class Allocation {
 public:
  virtual ~Allocation() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;  // at least the bytes asked for (rounded to the granularity)
};

// Another process's allocation mapped into this one; unmapped by the destructor. The exporter's
// memory stays allocated while it is mapped (VMM), or must (legacy IPC: the exporter promises
// not to free it before it deregisters it).
class Mapping {
 public:
  virtual ~Mapping() = default;
  // The allocation's base address here; ExportedMemory::base + k maps to data() + k.
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  // The ordinal, in this process, of the device that holds it.
  virtual int ordinal() const = 0;
};

// An interprocess event, as it travels: handle bytes, and for the fake a descriptor.
struct EventHandle {
  std::array<uint8_t, kIpcHandleBytes> bytes{};
  UniqueFd fd;
};

// An event one process records on its stream and another queries (cudaEventInterprocess).
class Event {
 public:
  virtual ~Event() = default;
  // What another process passes to Device::OpenIpcEvent. FailedPrecondition for opened events.
  virtual absl::StatusOr<EventHandle> Export() const = 0;
  // Captures the work enqueued on `stream` so far (cudaEventRecord); replaces earlier captures.
  virtual absl::Status Record(StreamHandle stream) = 0;
  // True once the work captured by the latest Record is done, in whichever process recorded it
  // (cudaEventQuery). An event never recorded is done.
  virtual absl::StatusOr<bool> Query() = 0;
};

// Host memory registered for stream memory operations (cuMemHostRegister) until destroyed.
class HostRegistration {
 public:
  virtual ~HostRegistration() = default;
};

// One process's view of the node's GPUs.
class Device {
 public:
  virtual ~Device() = default;

  // For logs and errors: "cuda (2 GPUs: NVIDIA H200, ...)", "host fake".
  virtual std::string Describe() const = 0;
  // The number of devices (ordinals 0 .. count - 1).
  virtual int count() const = 0;

  // Allocates at least `bytes` (> 0) on device `ordinal`, exportable to other processes.
  // InvalidArgument for a bad ordinal or size; ResourceExhausted when the device is full.
  virtual absl::StatusOr<std::unique_ptr<Allocation>> Allocate(size_t bytes, int ordinal) = 0;

  // Whether [ptr, ptr + bytes) is device memory of this process (a host pointer is not).
  virtual bool IsDeviceMemory(const void* ptr, size_t bytes) const = 0;

  // The driver's id of the allocation that holds `ptr` now (ExportedMemory::buffer_id): an
  // allocation freed and another made at the same address have different ids, so a cached
  // registration is checked with it on every use. NotFound for memory that is not device
  // memory of this process.
  virtual absl::StatusOr<uint64_t> BufferId(const void* ptr) const = 0;

  // Exports the allocation that holds [ptr, ptr + bytes): found from ptr (its base may lie
  // before ptr), as a VMM allocation when it is one, else as a legacy IPC handle. NotFound for
  // memory that is not device memory; FailedPrecondition for device memory that can be shared
  // neither way (the caller stages it), or a range that runs past its allocation, saying which.
  virtual absl::StatusOr<ExportedMemory> Export(const void* ptr, size_t bytes) = 0;

  // Maps memory another process exported (taking its descriptors), accessible from every
  // device of this process. InvalidArgument for an export that does not describe memory this
  // node's devices hold (a descriptor of the wrong size, an unknown GPU, a bad handle).
  virtual absl::StatusOr<std::unique_ptr<Mapping>> Import(ExportedMemory memory) = 0;

  // An interprocess event for this process to record and another to query.
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateIpcEvent() = 0;
  // Opens another process's event (taking the handle's descriptor).
  virtual absl::StatusOr<std::unique_ptr<Event>> OpenIpcEvent(EventHandle handle) = 0;

  // Registers host memory that streams wait on (WaitValue), e.g. a shared-memory page.
  virtual absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data,
                                                                         size_t bytes) = 0;
  // Enqueues on `stream` a wait until the word at `word`, inside registered host memory,
  // reaches `value`: (int32_t)(*word - value) >= 0, so the count may wrap. Later work on the
  // stream runs after it; the host call returns at once. Whoever the stream waits for must store
  // the value on every path, or the stream never moves again.
  virtual absl::Status WaitValue(StreamHandle stream, const std::atomic<uint32_t>* word,
                                 uint32_t value) = 0;

  // Waits, on the host, until the work enqueued on `stream` so far is done.
  virtual absl::Status Synchronize(StreamHandle stream) = 0;

  // Enqueues a copy of `bytes` from `src` to `dst` (device or host memory, not overlapping) on
  // `stream`.
  virtual absl::Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;

  // The element-wise kernels (device/kernels.h) for memory device `ordinal` can reach,
  // with a stream of their own; each call returns once its work is done. FailedPrecondition
  // when they cannot run here.
  virtual absl::StatusOr<std::unique_ptr<DeviceKernels>> NewKernels(int ordinal) = 0;
};

// The implementation named `name` (device/open_device.cc):
//   "cuda": CUDA; FailedPrecondition, saying why, without a usable driver and GPU;
//   "fake": a HostFakeDevice (tests; BATON_DEVICE=fake in libbaton, --device=fake in batond);
//   "auto": CUDA when it is usable, else nullptr (no device; not an error);
//   "none": nullptr.
// InvalidArgument for any other name.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view name);

}  // namespace baton::device
