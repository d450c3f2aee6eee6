#pragma once

// How an operation on device memory runs (OperationRunner::Run with a DeviceAccess): on the
// device itself, with the device's kernels, when every rank of the communicator is on this
// daemon and the collective's schedule needs no memory of its own (all_reduce, broadcast,
// all_gather, barrier: one pass of the device's ReduceMany over every local input, then copies);
// otherwise staged through host memory: each local rank's input copied to the host, the host
// schedule run there (the network transports move host memory), and the outputs copied back.
// Staging copies whole buffers before and after the schedule (an all_reduce one buffer, after a
// reduction on the device); pipelining them with the transport's chunks is later work
// (docs/gpu.md).

#include <cstddef>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "collective/kernels.h"
#include "collective/layout.h"
#include "collective/schedule.h"

namespace baton::collective {

struct DeviceAccess {
  // The element-wise kernels of the device that holds the parts' memory.
  const Kernels* kernels = nullptr;
  // Copies `bytes` between host and device memory (either direction), done when it returns.
  std::function<absl::Status(void* dst, const void* src, size_t bytes)> copy;
  // The kernels' first error (they return nothing themselves); checked after every operation.
  std::function<absl::Status()> kernels_error;
};

// Whether `collective` runs on the device directly when every rank is on one daemon.
bool RunsOnDevice(Collective collective);

// Runs `run` on host copies of `parts` (device memory of `layout`'s local ranks): inputs
// (OpSpec::SendElements) copied to the host first, outputs (RecvElements) copied back after a
// successful run. A send buffer inside its rank's recv buffer (in place) stays inside it on the
// host. An all_reduce is staged as one buffer instead: the local inputs are reduced on the
// device into the first local output, and `run` gets one part (that buffer's host copy, in
// place) whatever the number of local ranks; the result goes back to every output. Errors: the
// copies', the device kernels', or `run`'s.
absl::Status RunStaged(std::span<const LocalPart> parts, const Layout& layout,
                       const DeviceAccess& device,
                       const std::function<absl::Status(std::span<const LocalPart>)>& run);

}  // namespace baton::collective
