#include "collective/broadcast_schedule.h"

#include "collective/ring_broadcast.h"

namespace baton::collective {

absl::Status BroadcastSchedule(const Schedule& s) {
  const OpSpec& spec = *s.spec;
  const Layout& layout = *s.layout;
  const device::Kernels& kernels = *s.ctx.kernels;
  const size_t bytes = spec.count * s.element_bytes();
  if (bytes == 0) return absl::OkStatus();
  const auto [root_daemon, root_local] = layout.Locate(spec.root);
  std::byte* data = s.parts[root_daemon == layout.self ? root_local : 0].recv;
  if (root_daemon == layout.self) kernels.Copy(data, s.parts[root_local].send, bytes);
  if (s.across()) {
    BATON_RETURN_IF_ERROR(
        RingBroadcast(s.ctx, layout.RingOfDaemons(), root_daemon, data, spec.count, spec.type));
  }
  for (const LocalPart& part : s.parts) {
    if (part.recv != data) kernels.Copy(part.recv, data, bytes);
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
