#include "collective/all_to_all_schedule.h"

#include <algorithm>
#include <vector>

#include "collective/direct_all_to_all.h"
#include "collective/registered_memory.h"

namespace baton::collective {

absl::Status AllToAllSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const device::Kernels& kernels = *s.ctx.kernels;
  const size_t block = spec.count * s.element_bytes();  // bytes from one rank to one rank
  if (block == 0) return absl::OkStatus();
  // Straight between the ranks' buffers where no send overlaps a receive buffer: nothing is
  // packed, and the links never wait for a copy.
  const size_t buffer_bytes = block * static_cast<size_t>(layout.world_size);
  bool apart = true;
  for (const LocalPart& a : s.parts) {
    for (const LocalPart& b : s.parts) apart = apart && Apart(a.send, b.recv, buffer_bytes);
  }
  if (apart) {
    std::vector<std::vector<int>> ranks_of;
    for (const LayoutDaemon& daemon : layout.daemons) ranks_of.push_back(daemon.ranks);
    std::vector<const std::byte*> sends;
    std::vector<std::byte*> recvs;
    for (const LocalPart& part : s.parts) {
      sends.push_back(part.send);
      recvs.push_back(part.recv);
    }
    return DirectAllToAllOfRanks(s.ctx, layout.DaemonParticipants(), ranks_of, sends, recvs, block);
  }
  // In place (a rank's output overlaps an input): daemon a sends daemon b one slab: for each of a's
  // local ranks (padded to the most ranks any daemon hosts), the blocks for each of b's local
  // ranks. One direct all-to-all of slabs between daemons then moves every block, the ones within
  // this daemon included.
  size_t most = 0;
  for (const LayoutDaemon& daemon : layout.daemons) most = std::max(most, daemon.ranks.size());
  const size_t daemons = layout.daemons.size();
  // A slab of every block at a time, so that the packed and unpacked copies stay bounded.
  const size_t slab = s.SlabLength(block, 2 * daemons * most * most);
  const size_t most_slab_bytes = most * most * std::min(slab, block);
  const ScratchPool::Buffer packed = TakeScratch(s.ctx, daemons * most_slab_bytes);
  const ScratchPool::Buffer unpacked = TakeScratch(s.ctx, daemons * most_slab_bytes);
  for (size_t begin = 0, k = 0; begin < block; begin += slab, ++k) {
    const size_t length = std::min(slab, block - begin);
    const size_t slab_bytes = most * most * length;  // what one daemon sends another
    for (size_t b = 0; b < daemons; ++b) {
      const std::vector<int>& targets = layout.daemons[b].ranks;
      for (size_t i = 0; i < s.parts.size(); ++i) {
        for (size_t j = 0; j < targets.size(); ++j) {
          kernels.Copy(packed.data() + b * slab_bytes + (i * most + j) * length,
                       s.parts[i].send + static_cast<size_t>(targets[j]) * block + begin, length);
        }
      }
    }
    BATON_RETURN_IF_ERROR(DirectAllToAll(s.SlabContext(k), layout.DaemonParticipants(),
                                         packed.data(), unpacked.data(), slab_bytes,
                                         DataType::kUint8));
    for (size_t a = 0; a < daemons; ++a) {
      const std::vector<int>& sources = layout.daemons[a].ranks;
      for (size_t i = 0; i < sources.size(); ++i) {
        for (size_t j = 0; j < s.parts.size(); ++j) {
          kernels.Copy(s.parts[j].recv + static_cast<size_t>(sources[i]) * block + begin,
                       unpacked.data() + a * slab_bytes + (i * most + j) * length, length);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
