#include "collective/all_gather_schedule.h"

#include <vector>

#include "collective/ring_all_gather.h"
#include "collective/ring_all_reduce.h"

namespace baton::collective {

absl::Status AllGatherSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const device::Kernels& kernels = *s.ctx.kernels;
  const std::vector<int>& local = layout.local_ranks();
  const size_t block_bytes = spec.count * s.element_bytes();
  const size_t total_bytes = block_bytes * static_cast<size_t>(layout.world_size);
  if (total_bytes == 0) return absl::OkStatus();
  // Gather into the first local rank's output. Inputs may alias their place in an output
  // (in-place all-gather), hence Copy's memmove, and all inputs are placed before any output is
  // copied.
  std::byte* out = s.parts.front().recv;
  auto place = [&](size_t i) {
    std::byte* at = out + static_cast<size_t>(local[i]) * block_bytes;
    if (s.parts[i].send != at) kernels.Copy(at, s.parts[i].send, block_bytes);
  };
  absl::Status status;
  if (!layout.BlockRegular() && s.across()) {
    // Irregular placement: place our blocks, zero the others, and sum bytes across daemons:
    // every byte has exactly one non-zero contributor, so the sum is bitwise that contribution.
    // Only the first local rank's input may overlap `out` (its own output, in place), so it is
    // placed first; no scratch is needed.
    place(0);
    for (int rank = 0; rank < layout.world_size; ++rank) {
      if (layout.LocalIndex(rank) < 0) {
        kernels.Zero(out + static_cast<size_t>(rank) * block_bytes, block_bytes);
      }
    }
    for (size_t i = 1; i < s.parts.size(); ++i) place(i);
    status = RingAllReduce(s.ctx, layout.RingOfDaemons(), out, total_bytes, DataType::kUint8,
                           ReduceOp::kSum);
  } else {
    for (size_t i = 0; i < s.parts.size(); ++i) place(i);
    if (s.across()) {
      status = RingAllGather(s.ctx, layout.RingOfDaemons(), out,
                             spec.count * static_cast<size_t>(layout.world_size), spec.type);
    }
  }
  if (!status.ok()) return status;
  for (size_t i = 1; i < s.parts.size(); ++i) {
    if (s.parts[i].recv != out) kernels.Copy(s.parts[i].recv, out, total_bytes);
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
