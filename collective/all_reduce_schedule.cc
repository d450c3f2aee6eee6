#include "collective/all_reduce_schedule.h"

#include <vector>

#include "collective/doubling_all_reduce.h"
#include "collective/halving_doubling_all_reduce.h"
#include "collective/ring_all_reduce.h"
#include "collective/tree_all_reduce.h"

namespace baton::collective {

absl::Status AllReduceSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const OpContext& ctx = s.ctx;
  const Layout& layout = *s.layout;
  const size_t count = spec.count;
  const size_t bytes = count * s.element_bytes();
  std::byte* result = s.parts.front().recv;
  std::vector<const void*> sources;
  bool inputs_apart = true;
  for (const LocalPart& part : s.parts) {
    if (part.send == nullptr) continue;  // a node part's other local ranks
    sources.push_back(part.send);
    inputs_apart = inputs_apart && (part.send == result || Apart(part.send, result, bytes));
  }
  // The ring reads the local inputs itself, with no pass over them first, unless an input partly
  // overlaps the output (then the ring would overwrite input it has yet to read).
  const bool ring_reads_input = s.across() && s.algorithm == Algorithm::kRing && inputs_apart;
  if (bytes > 0 && !ring_reads_input) {
    PhaseTimer timer(ReduceSlot(ctx));
    ctx.kernels->ReduceMany(spec.type, spec.op, result, sources, count);
  }
  absl::Status status;
  if (ring_reads_input) {
    status = RingAllReduce(ctx, layout.RingOfDaemons(), sources, result, count, spec.type, spec.op);
  } else if (s.across()) {
    switch (s.algorithm) {
      case Algorithm::kTree:
        status = TreeAllReduce(ctx, layout.DaemonParticipants(), result, count, spec.type, spec.op);
        break;
      case Algorithm::kDoubling:
        status =
            DoublingAllReduce(ctx, layout.DaemonParticipants(), result, count, spec.type, spec.op);
        break;
      case Algorithm::kHalvingDoubling:
        status = HalvingDoublingAllReduce(ctx, layout.DaemonParticipants(), result, count,
                                          spec.type, spec.op);
        break;
      default:
        status = RingAllReduce(ctx, layout.RingOfDaemons(), result, count, spec.type, spec.op);
        break;
    }
  }
  if (!status.ok()) return status;
  if (spec.op == ReduceOp::kAvg) {
    PhaseTimer timer(ReduceSlot(ctx));
    ctx.kernels->Divide(spec.type, result, count, layout.world_size);
  }
  for (size_t i = 1; i < s.parts.size() && bytes > 0; ++i) {
    if (s.parts[i].recv != result) ctx.kernels->Copy(s.parts[i].recv, result, bytes);
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
