#pragma once

// device::Device on CUDA GPUs (device/device.h). Built iff BATON_HAVE_CUDA (target
// baton_device_cuda). Nothing links libcuda: the static CUDA runtime loads the driver when it is
// first used, and the driver API calls (VMM, pointer attributes, stream memory operations) are
// looked up at run time with cudaGetDriverEntryPointByVersion, so binaries start on nodes without
// a GPU and NewCudaDevice says why there is none.
//
// What the calls do on CUDA:
//   - Allocate: cuMemCreate (pinned device memory, exportable as POSIX file descriptors, GPUDirect
//     RDMA capable where the GPU supports that with VMM), rounded up to the allocation
//     granularity, mapped read/write for the owning device and every device that can access it
//     as a peer.
//   - IsDeviceMemory: memory of a GPU, managed memory included (Export refuses that: the caller
//     stages it); host memory, registered or not, is not.
//   - Export: any device pointer. The allocation is found with cuMemGetAddressRange. VMM memory
//     (cuMemCreate, e.g. PyTorch's expandable segments) is exported as one descriptor per physical
//     segment, walking from the segment that holds `ptr` until the range is covered (at most
//     kMaxSegments); it must have been created with the POSIX file descriptor handle type.
//     cudaMalloc memory is exported as a legacy IPC handle of its base. Other device memory
//     (cudaMallocAsync pools, managed memory, VMM memory without descriptors) is
//     FailedPrecondition: the caller stages it.
//   - Import: VMM descriptors are mapped contiguously in one reservation, read/write for the
//     owning device and its peers; legacy handles are opened on the owning device with
//     cudaIpcMemLazyEnablePeerAccess. The GPU is found by UUID, so exporter and importer may see
//     different CUDA_VISIBLE_DEVICES.
//   - Events: cudaEventInterprocess | cudaEventDisableTiming events; EventHandle::bytes is the
//     cudaIpcEventHandle_t, EventHandle::fd is unused (a passed one is closed). CreateIpcEvent and
//     OpenIpcEvent use the calling thread's current CUDA device; Event::Record takes a stream of
//     that device (nullptr: its legacy default stream), else InvalidArgument.
//   - RegisterHost: cudaHostRegister(Portable | Mapped); a range that overlaps one registered
//     before is FailedPrecondition. WaitValue: cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ
//     (the cyclic comparison of device.h) on the word's device address; the word must lie in
//     memory registered through the same Device (InvalidArgument otherwise).
//   - Streams are cudaStream_t. nullptr is the legacy default stream of the calling thread's
//     current device (as in CUDA); another stream's calls run on the stream's own device.
//   - NewKernels: cuda::NewCudaKernels (device/cuda/kernels.h).
//
// Current device: every call makes the device it works on current for itself and restores the
// calling thread's device and context before it returns, because libbaton runs inside the
// user's process. (Restoring a device whose primary context was never used creates it.) Nor do
// Baton's failed runtime calls leave a "last error" for the caller's cudaGetLastError to find.
//
// Requirements, checked by NewCudaDevice: a driver that supports this CUDA runtime, at least one
// GPU, and on every GPU virtual memory management with POSIX file descriptor handles (all Linux
// data-centre GPUs since Volta). A GPU without them makes NewCudaDevice fail with
// FailedPrecondition naming it, rather than serving it with legacy IPC only.

#include <memory>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace baton::device {

// The node's GPUs, or FailedPrecondition saying why they cannot be used: no driver or GPU ("no
// CUDA driver or GPU on this node (cudaGetDeviceCount: cudaErrorInsufficientDriver: ...)"), a
// driver without an entry point Baton needs, a GPU without VMM or POSIX descriptor handles.
absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice();

}  // namespace baton::device
