#pragma once

// How an operation on device memory runs (OperationRunner::Run with a device::OperationDevice):
// on the device itself, with the device's kernels, when every rank of the communicator is on
// this daemon and the collective's schedule needs no memory of its own (all_reduce, broadcast,
// all_gather, barrier: one pass of the device's ReduceMany over every local input, then copies);
// otherwise staged through host memory: each local rank's input copied to the host, the host
// schedule run there (the network transports move host memory), and the outputs copied back.
// Staging copies whole buffers before and after the schedule, except all_reduce's: one buffer,
// after a reduction on the device, copied to the host while the schedule already sends it, and
// back while it still receives (docs/gpu.md).

#include <cstddef>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/layout.h"
#include "collective/schedule.h"
#include "device/kernels.h"
#include "device/operation_device.h"
#include "transport/transport.h"

namespace baton::collective {

// Whether `collective` runs on the device directly when every rank is on one daemon.
bool RunsOnDevice(Collective collective);
// Whether `collective` runs on the device memory directly across daemons whose links move device
// memory themselves (transport::Endpoint::MovesDirectly: GPUDirect RDMA): its schedule only
// moves and copies the parts' own memory, with no host scratch and no reduction of what arrives
// (broadcast, all_gather, barrier). Everything else is staged through host memory.
bool RunsOnDeviceAcrossDaemons(Collective collective);

// What RunStaged runs: the schedule on `parts` (host memory), with the endpoint and kernels it
// must use (they wait for input still being staged).
using StagedRun =
    std::function<absl::Status(std::span<const LocalPart> parts, transport::Endpoint* endpoint,
                               const device::Kernels* kernels)>;

// Runs `run` on host copies of `parts` (device memory of `layout`'s local ranks) over
// `endpoint`: inputs (OpSpec::SendElements) copied to the host first, outputs (RecvElements)
// copied back after a successful run. A send buffer inside its rank's recv buffer (in place)
// stays inside it on the host. An all_reduce is staged as one buffer instead, and pipelined: the
// local inputs are reduced on the device into the first local output, `run` gets one part (that
// buffer's host copy, in place) whatever the number of local ranks, at once, while the buffer is
// copied to the host in chunks of `chunk_bytes` (collective/staged_input.h: each send, receive
// and kernel call waits for the chunks it touches, the first ones waited for copied first), and
// copied back as receives complete its chunks (the rest after the schedule); the result goes to
// every output. Host copies are `device`'s staging memory. Waits end at `deadline`. Errors: the
// copies', the device kernels' (kernels().last_error()), or `run`'s.
absl::Status RunStaged(std::span<const LocalPart> parts, const Layout& layout,
                       const device::OperationDevice& device, transport::Endpoint* endpoint,
                       size_t chunk_bytes, absl::Time deadline, const StagedRun& run);

}  // namespace baton::collective
