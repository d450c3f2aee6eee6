#include "collective/gather_schedule.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace baton::collective {
absl::Status GatherSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const OpContext& ctx = s.ctx;
  const size_t block = spec.count * s.element_bytes();
  if (block == 0) return absl::OkStatus();
  const auto [root_daemon, root_local] = layout.Locate(spec.root);
  if (root_daemon != layout.self) {
    std::vector<transport::OutMessage> messages;
    for (size_t i = 0; i < s.parts.size(); ++i) {
      messages.push_back({s.PartTag(i), transport::ConstByteSpan(s.parts[i].send, block)});
    }
    return ctx.endpoint->SendAll(layout.daemons[root_daemon].address, messages, ctx.deadline);
  }
  std::byte* out = s.parts[root_local].recv;
  std::vector<std::unique_ptr<transport::PostedRecv>> posted;
  for (int d = 0; d < layout.daemon_count(); ++d) {
    if (d == layout.self) continue;
    const LayoutDaemon& daemon = layout.daemons[d];
    for (size_t i = 0; i < daemon.ranks.size(); ++i) {
      posted.push_back(ctx.endpoint->PostRecv(
          daemon.address, s.PartTag(i),
          transport::ByteSpan(out + static_cast<size_t>(daemon.ranks[i]) * block, block),
          ctx.deadline, nullptr));
    }
  }
  const std::vector<int>& local = layout.local_ranks();
  for (size_t i = 0; i < s.parts.size(); ++i) {
    ctx.kernels->Copy(out + static_cast<size_t>(local[i]) * block, s.parts[i].send, block);
  }
  for (auto& recv : posted) BATON_RETURN_IF_ERROR(recv->Wait());
  return absl::OkStatus();
}

}  // namespace baton::collective
