#include "collective/reduce_scatter_schedule.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "collective/registered_memory.h"
#include "collective/ring_all_reduce.h"
#include "collective/ring_reduce_scatter.h"

namespace baton::collective {

absl::Status ReduceScatterSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const device::Kernels& kernels = *s.ctx.kernels;
  const size_t element = s.element_bytes();
  const size_t block = spec.count;  // elements each rank receives
  if (block == 0) return absl::OkStatus();
  const size_t world = static_cast<size_t>(layout.world_size);
  // A slab of every rank's block at a time: the local inputs reduced into scratch (block r's
  // slab at r * length), then across daemons, then each local rank's slab copied out.
  const size_t slab = s.SlabLength(block, world * element);
  const ScratchPool::Buffer scratch = TakeScratch(s.ctx, world * std::min(slab, block) * element);
  for (size_t begin = 0, k = 0; begin < block; begin += slab, ++k) {
    const size_t length = std::min(slab, block - begin);
    {
      PhaseTimer timer(ReduceSlot(s.ctx));
      std::vector<const void*> sources;
      for (size_t r = 0; r < world; ++r) {
        s.InputsAt((r * block + begin) * element, sources);
        kernels.ReduceMany(spec.type, spec.op, scratch.data() + r * length * element, sources,
                           length);
      }
    }
    if (s.across()) {
      // With block placement a daemon's ranks own exactly its segment of the even split, so a
      // reduce-scatter moves (D-1)/D of the data; otherwise every daemon needs the whole result.
      const OpContext slab_ctx = s.SlabContext(k);
      absl::Status status =
          layout.BlockRegular()
              ? RingReduceScatter(slab_ctx, layout.RingOfDaemons(), scratch.data(), world * length,
                                  spec.type, spec.op)
              : RingAllReduce(slab_ctx, layout.RingOfDaemons(), scratch.data(), world * length,
                              spec.type, spec.op);
      if (!status.ok()) return status;
    }
    const std::vector<int>& local = layout.local_ranks();
    for (size_t i = 0; i < s.parts.size(); ++i) {
      std::byte* own = scratch.data() + static_cast<size_t>(local[i]) * length * element;
      if (spec.op == ReduceOp::kAvg) {
        PhaseTimer timer(ReduceSlot(s.ctx));
        kernels.Divide(spec.type, own, length, layout.world_size);
      }
      kernels.Copy(s.parts[i].recv + begin * element, own, length * element);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
