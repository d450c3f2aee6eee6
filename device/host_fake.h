#pragma once

// A Device without a GPU, for tests: it behaves like CUDA wherever the protocol above
// device/device.h depends on it, and works across processes through file descriptors, so a rank
// process and a daemon process run the real fd passing, registration, ordering and failure paths.
//
//   - Device memory is host memory in sealed memfds ("baton-fake-gpu" in /proc/<pid>/fd), mapped
//     MAP_SHARED; sizes round up to the page size (4 KiB), not to CUDA's 2 MiB. Every allocation
//     gets a process-unique buffer id (a reused address gets a new one, like
//     CU_POINTER_ATTRIBUTE_BUFFER_ID). Export is always ShareKind::kVmm: one dup'ed,
//     close-on-exec descriptor per segment. Import checks every descriptor (a sealed memfd at
//     least as large as its segment), so a bad export is InvalidArgument and never a SIGBUS.
//     Device i's uuid is the 16 bytes "baton-fake-gpu" followed by i as two decimal digits, the
//     same in every process. Memory imported from another process is device memory here but
//     is not exported again (FailedPrecondition).
//   - A stream is a thread that runs its work in order (FakeStream). nullptr as a StreamHandle
//     names the process's default stream, started on first use and kept until the process ends.
//   - An event is a sealed memfd page with two counters, recorded and completed: Record bumps
//     `recorded` at call time and enqueues a store of that count into `completed`; Query compares
//     them. An opened event may be recorded too (as in CUDA) but not exported again. Unlike
//     CUDA, the fake also opens events in the process that created them.
//   - WaitValue blocks the stream's thread: it looks at the word, spins briefly, then sleeps on a
//     (process-shared) futex in 1 ms slices, so a plain store from another process, with no
//     wake, releases it within about a millisecond. RegisterHost refuses a range that overlaps
//     one already registered (AlreadyExists, as cuMemHostRegister does).
//   - The kernels are the host functions (device::HostKernels(), device/kernels.h), run at once on
//   the caller's
//     thread.
//
// Streams that are destroyed with work still queued (a wait that was never satisfied, and all
// after it) drop that work: each dropped operation is logged (spdlog::warn) and counted in
// HostFakeDroppedOperations(), never run later; a Synchronize waiting for it returns Aborted.
//
// Like CUDA's, the fake's state is the process's, not one HostFakeDevice's: every fake device
// of a process (a test's, and the one libbaton opens with OpenDevice("fake")) sees the same
// device memory, mappings, registered host memory and streams; allocations, mappings, events,
// registrations and streams may outlive the device that made them. A forked child keeps the
// parent's memory and mappings but not its stream threads: it uses only streams it creates
// (and its own default stream).
//
// Threads: as for Device, every object may be used from several threads at once.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace baton::device {

// A stream of the fake: a thread that runs closures one at a time, in the order enqueued.
class FakeStream {
 public:
  // Stops the thread: waits for the closure now running (a WaitValue wait ends within one slice;
  // work enqueued with Enqueue must end on its own), then drops what is still queued (logged,
  // counted in HostFakeDroppedOperations()).
  virtual ~FakeStream() = default;

  // What Device calls take for this stream. Valid until the stream is destroyed; afterwards the
  // device refuses it (InvalidArgument).
  virtual StreamHandle handle() const = 0;

  // Enqueues `work` (a test's "kernel"): it runs on the stream's thread after everything
  // enqueued before it, and before everything enqueued after it.
  virtual void Enqueue(std::function<void()> work) = 0;

  // How many enqueued operations are not done yet: queued, or running now. For tests that wait
  // until work (a Synchronize from another thread) has reached the stream.
  virtual size_t pending() const = 0;
};

struct HostFakeOptions {
  // The number of fake devices, ordinals 0 .. devices - 1; clamped to [0, 99].
  int devices = 1;
};

// The Device interface plus what tests need to build the cases CUDA produces.
class HostFakeDevice : public Device {
 public:
  // A new stream with a thread of its own. It may outlive the device.
  virtual std::unique_ptr<FakeStream> NewStream() = 0;

  // One contiguous allocation made of several memfds, one per entry of `segment_sizes` (each
  // rounded up to the page size), like PyTorch's expandable segments; Export returns one
  // descriptor per segment. InvalidArgument for a bad ordinal, no segments, more than
  // kMaxSegments, or a zero-sized segment.
  virtual absl::StatusOr<std::unique_ptr<Allocation>> AllocateSegmented(
      std::vector<size_t> segment_sizes, int ordinal) = 0;

  // Device memory that cannot be shared (like cudaMallocAsync pool memory): IsDeviceMemory is
  // true, Export is FailedPrecondition, so callers take their staging path.
  virtual absl::StatusOr<std::unique_ptr<Allocation>> AllocateUnshareable(size_t bytes,
                                                                          int ordinal) = 0;
};

std::unique_ptr<HostFakeDevice> NewHostFakeDevice(HostFakeOptions options = {});

// How many enqueued operations destroyed streams have dropped in this process, ever.
uint64_t HostFakeDroppedOperations();

}  // namespace baton::device
