#include "collective/device_staging.h"

#include <memory>
#include <vector>

#include "collective/staged_input.h"
#include "common/status_macros.h"

namespace baton::collective {

bool RunsOnDevice(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kAllGather:
    case Collective::kBarrier:
      return true;
    default:
      return false;
  }
}

bool RunsOnDeviceAcrossDaemons(Collective collective) {
  switch (collective) {
    case Collective::kBroadcast:
    case Collective::kAllGather:
    case Collective::kBarrier:
      return true;
    default:
      return false;
  }
}

namespace {

// Whether an all_reduce's local inputs can be reduced on the device into the first rank's
// output first: every input is that output (in place) or apart from it, and every other output
// is apart from it.
bool ReducesOnDeviceFirst(std::span<const LocalPart> parts) {
  const OpSpec& spec = *parts.front().spec;
  if (spec.collective != Collective::kAllReduce || spec.count == 0) return false;
  const size_t bytes = spec.count * DataTypeSize(spec.type);
  const std::byte* result = parts.front().recv;
  if (result == nullptr) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LocalPart& part = parts[i];
    if (part.send == nullptr || part.recv == nullptr) return false;
    if (part.send != result && !Apart(part.send, result, bytes)) return false;
    if (i > 0 && !Apart(part.recv, result, bytes)) return false;
  }
  return true;
}

// all_reduce staged as one buffer: the local inputs reduced on the device into the first local
// rank's output, that one buffer copied to the host while the schedule already runs on it alone
// (in place; what crosses daemons is one daemon's worth of data whatever the number of local
// ranks), its result copied back as it becomes final (collective/staged_input.h), and from there
// to every other local output on the device. PCIe carries about 2 x bytes instead of 2 x bytes
// per local rank.
absl::Status RunAllReduceStaged(std::span<const LocalPart> parts,
                                const device::OperationDevice& device,
                                transport::Endpoint* endpoint, size_t chunk_bytes,
                                absl::Time deadline, const StagedRun& run) {
  const LocalPart& first = parts.front();
  const OpSpec& spec = *first.spec;
  const size_t bytes = spec.count * DataTypeSize(spec.type);
  const std::byte* input = first.send;
  if (parts.size() > 1) {
    std::vector<const void*> sources;
    sources.reserve(parts.size());
    for (const LocalPart& part : parts) sources.push_back(part.send);
    device.kernels().ReduceMany(spec.type, spec.op, first.recv, sources, spec.count);
    BATON_RETURN_IF_ERROR(device.kernels().last_error());
    input = first.recv;
  }
  BATON_ASSIGN_OR_RETURN(device::PinnedBuffer host, device.StagingMemory(bytes));
  {
    // Both are destroyed (their copying stopped) before `host` is freed.
    const auto copy = [&device](void* dst, const void* src, size_t bytes) {
      return device.Copy(dst, src, bytes);
    };
    StagedInput staged_in(host.get(), input, bytes, chunk_bytes, copy, deadline);
    StagedOutput staged_out(host.get(), first.recv, bytes, chunk_bytes, copy);
    StagingEndpoint staging_endpoint(endpoint, &staged_in, &staged_out);
    StagingKernels staging_kernels(&device::HostKernels(), &staged_in, &staged_out);
    const LocalPart one{first.spec, host.get(), host.get()};
    BATON_RETURN_IF_ERROR(
        run(std::span<const LocalPart>(&one, 1), &staging_endpoint, &staging_kernels));
    BATON_RETURN_IF_ERROR(staging_kernels.error());
    BATON_RETURN_IF_ERROR(staged_in.AwaitAll());
    BATON_RETURN_IF_ERROR(staged_out.Finish());
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    device.kernels().Copy(parts[i].recv, first.recv, bytes);
  }
  return device.kernels().last_error();
}

}  // namespace

absl::Status RunStaged(std::span<const LocalPart> parts, const Layout& layout,
                       const device::OperationDevice& device, transport::Endpoint* endpoint,
                       size_t chunk_bytes, absl::Time deadline, const StagedRun& run) {
  if (ReducesOnDeviceFirst(parts)) {
    return RunAllReduceStaged(parts, device, endpoint, chunk_bytes, deadline, run);
  }
  const std::vector<int>& local = layout.local_ranks();
  std::vector<device::PinnedBuffer> memory;
  std::vector<LocalPart> staged(parts.begin(), parts.end());
  for (size_t i = 0; i < parts.size(); ++i) {
    const LocalPart& part = parts[i];
    const OpSpec& spec = *part.spec;
    const size_t element = DataTypeSize(spec.type);
    const size_t send_bytes = spec.SendElements(layout.world_size, local[i]) * element;
    const size_t recv_bytes = spec.RecvElements(layout.world_size, local[i]) * element;
    staged[i].send = nullptr;
    staged[i].recv = nullptr;
    if (recv_bytes > 0 && part.recv != nullptr) {
      BATON_ASSIGN_OR_RETURN(device::PinnedBuffer recv, device.StagingMemory(recv_bytes));
      memory.push_back(std::move(recv));
      staged[i].recv = memory.back().get();
    }
    // The output is copied back whole, but all_to_all_v writes only its blocks: the bytes between
    // them must go back as they were.
    const bool keep_gaps = staged[i].recv != nullptr && spec.collective == Collective::kAllToAllV;
    if (keep_gaps) BATON_RETURN_IF_ERROR(device.Copy(staged[i].recv, part.recv, recv_bytes));
    if (send_bytes == 0 || part.send == nullptr) continue;
    const bool inside_recv = staged[i].recv != nullptr && part.send >= part.recv &&
                             part.send - part.recv <= static_cast<ptrdiff_t>(recv_bytes) &&
                             send_bytes <= recv_bytes - static_cast<size_t>(part.send - part.recv);
    if (inside_recv) {
      // In place: the input is part of the output buffer, which is copied whole.
      if (!keep_gaps) BATON_RETURN_IF_ERROR(device.Copy(staged[i].recv, part.recv, recv_bytes));
      staged[i].send = staged[i].recv + (part.send - part.recv);
    } else {
      BATON_ASSIGN_OR_RETURN(device::PinnedBuffer send, device.StagingMemory(send_bytes));
      memory.push_back(std::move(send));
      BATON_RETURN_IF_ERROR(device.Copy(memory.back().get(), part.send, send_bytes));
      staged[i].send = memory.back().get();
    }
  }
  BATON_RETURN_IF_ERROR(run(staged, endpoint, &device::HostKernels()));
  for (size_t i = 0; i < parts.size(); ++i) {
    if (staged[i].recv == nullptr) continue;
    const OpSpec& spec = *parts[i].spec;
    const size_t recv_bytes =
        spec.RecvElements(layout.world_size, local[i]) * DataTypeSize(spec.type);
    BATON_RETURN_IF_ERROR(device.Copy(parts[i].recv, staged[i].recv, recv_bytes));
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
