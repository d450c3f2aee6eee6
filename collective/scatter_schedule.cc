#include "collective/scatter_schedule.h"

#include <memory>
#include <vector>

namespace baton::collective {
absl::Status ScatterSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const OpContext& ctx = s.ctx;
  const size_t block = spec.count * s.element_bytes();
  if (block == 0) return absl::OkStatus();
  const auto [root_daemon, root_local] = layout.Locate(spec.root);
  if (root_daemon != layout.self) {
    std::vector<std::unique_ptr<transport::PostedRecv>> posted;
    for (size_t i = 0; i < s.parts.size(); ++i) {
      posted.push_back(ctx.endpoint->PostRecv(layout.daemons[root_daemon].address, s.PartTag(i),
                                              transport::ByteSpan(s.parts[i].recv, block),
                                              ctx.deadline, nullptr));
    }
    for (auto& recv : posted) BATON_RETURN_IF_ERROR(recv->Wait());
    return absl::OkStatus();
  }
  const std::byte* in = s.parts[root_local].send;
  // Starting with the next daemon, so that the root's daemon's links are not all used in one
  // order by every operation.
  for (int k = 1; k < layout.daemon_count(); ++k) {
    const LayoutDaemon& daemon = layout.daemons[(layout.self + k) % layout.daemon_count()];
    std::vector<transport::OutMessage> messages;
    for (size_t i = 0; i < daemon.ranks.size(); ++i) {
      messages.push_back(
          {s.PartTag(i),
           transport::ConstByteSpan(in + static_cast<size_t>(daemon.ranks[i]) * block, block)});
    }
    BATON_RETURN_IF_ERROR(ctx.endpoint->SendAll(daemon.address, messages, ctx.deadline));
  }
  const std::vector<int>& local = layout.local_ranks();
  for (size_t i = 0; i < s.parts.size(); ++i) {
    if (static_cast<int>(i) == root_local) continue;
    ctx.kernels->Copy(s.parts[i].recv, in + static_cast<size_t>(local[i]) * block, block);
  }
  ctx.kernels->Copy(s.parts[root_local].recv, in + static_cast<size_t>(spec.root) * block, block);
  return absl::OkStatus();
}

}  // namespace baton::collective
