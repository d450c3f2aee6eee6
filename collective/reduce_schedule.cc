#include "collective/reduce_schedule.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "collective/registered_memory.h"
#include "collective/ring_reduce.h"

namespace baton::collective {

absl::Status ReduceSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const device::Kernels& kernels = *s.ctx.kernels;
  const size_t element = s.element_bytes();
  const size_t count = spec.count;
  const auto [root_daemon, root_local] = layout.Locate(spec.root);
  const bool at_root = root_daemon == layout.self;
  // The root's daemon reduces straight into the root's output; the others into scratch, a slab
  // at a time, so that the scratch stays bounded whatever the operation's size.
  const size_t slab = s.SlabLength(count, element);
  ScratchPool::Buffer scratch;
  if (!at_root && count > 0) scratch = TakeScratch(s.ctx, std::min(slab, count) * element);
  std::vector<const void*> sources;
  for (size_t begin = 0, k = 0; begin < count; begin += slab, ++k) {
    const size_t length = std::min(slab, count - begin);
    std::byte* data = at_root ? s.parts[root_local].recv + begin * element : scratch.data();
    s.InputsAt(begin * element, sources);
    {
      PhaseTimer timer(ReduceSlot(s.ctx));
      kernels.ReduceMany(spec.type, spec.op, data, sources, length);
    }
    if (s.across()) {
      BATON_RETURN_IF_ERROR(RingReduce(s.SlabContext(k), layout.RingOfDaemons(), root_daemon, data,
                                       length, spec.type, spec.op));
    }
    if (at_root && spec.op == ReduceOp::kAvg) {
      PhaseTimer timer(ReduceSlot(s.ctx));
      kernels.Divide(spec.type, data, length, layout.world_size);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
