#include "collective/all_to_all_v_schedule.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/registered_memory.h"

namespace baton::collective {
absl::Status AllToAllVSchedule(const Schedule& s) {
  const Layout& layout = *s.layout;
  const OpContext& ctx = s.ctx;
  const device::Kernels& kernels = *ctx.kernels;
  const size_t element = s.element_bytes();
  const std::vector<int>& local = layout.local_ranks();
  const size_t here = s.parts.size();

  // A send that overlaps any local output is read from a copy, taken before anything can land.
  std::vector<const std::byte*> sends(here);
  std::vector<ScratchPool::Buffer> staged(here);
  for (size_t i = 0; i < here; ++i) {
    const OpSpec& spec = *s.parts[i].spec;
    const size_t send_bytes = spec.SendElements(layout.world_size, local[i]) * element;
    sends[i] = s.parts[i].send;
    bool apart = true;
    for (size_t j = 0; j < here; ++j) {
      const size_t recv_bytes =
          s.parts[j].spec->RecvElements(layout.world_size, local[j]) * element;
      const std::byte* a = s.parts[i].send;
      const std::byte* b = s.parts[j].recv;
      apart = apart &&
              (send_bytes == 0 || recv_bytes == 0 || a + send_bytes <= b || b + recv_bytes <= a);
    }
    if (!apart) {
      staged[i] = TakeScratch(s.ctx, send_bytes);
      kernels.Copy(staged[i].data(), s.parts[i].send, send_bytes);
      sends[i] = staged[i].data();
    }
  }

  // Every block from another daemon goes straight into its place.
  struct Incoming {
    std::unique_ptr<transport::PostedRecv> recv;
    int from = 0;
    int to = 0;
  };
  std::vector<Incoming> incoming;
  for (int d = 0; d < layout.daemon_count(); ++d) {
    if (d == layout.self) continue;
    const LayoutDaemon& daemon = layout.daemons[d];
    for (size_t i = 0; i < daemon.ranks.size(); ++i) {
      const int from = daemon.ranks[i];
      for (size_t j = 0; j < here; ++j) {
        const OpSpec& spec = *s.parts[j].spec;
        incoming.push_back(
            Incoming{ctx.endpoint->PostRecv(
                         daemon.address, s.PartTag(i * here + j),
                         transport::ByteSpan(s.parts[j].recv + spec.recv_displs[from] * element,
                                             spec.recv_counts[from] * element),
                         ctx.deadline, nullptr),
                     from, local[j]});
      }
    }
  }
  // Every local rank's blocks for another daemon, in one hand-over per daemon, starting with the
  // next one so that the daemons do not all send to the same one first.
  for (int k = 1; k < layout.daemon_count(); ++k) {
    const LayoutDaemon& daemon = layout.daemons[(layout.self + k) % layout.daemon_count()];
    std::vector<transport::OutMessage> messages;
    for (size_t i = 0; i < here; ++i) {
      const OpSpec& spec = *s.parts[i].spec;
      for (size_t j = 0; j < daemon.ranks.size(); ++j) {
        const int to = daemon.ranks[j];
        messages.push_back({s.PartTag(i * daemon.ranks.size() + j),
                            transport::ConstByteSpan(sends[i] + spec.send_displs[to] * element,
                                                     spec.send_counts[to] * element)});
      }
    }
    BATON_RETURN_IF_ERROR(ctx.endpoint->SendAll(daemon.address, messages, ctx.deadline));
  }
  // Blocks between ranks of this daemon.
  for (size_t i = 0; i < here; ++i) {
    const OpSpec& from = *s.parts[i].spec;
    for (size_t j = 0; j < here; ++j) {
      const OpSpec& to = *s.parts[j].spec;
      const uint64_t sent = from.send_counts[local[j]];
      const uint64_t expected = to.recv_counts[local[i]];
      if (sent != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("all_to_all_v counts disagree: rank ", local[i], " sends ", sent,
                         " elements to rank ", local[j], ", which expects ", expected));
      }
      kernels.Copy(s.parts[j].recv + to.recv_displs[local[i]] * element,
                   sends[i] + from.send_displs[local[j]] * element, sent * element);
    }
  }
  for (Incoming& in : incoming) {
    const absl::Status status = in.recv->Wait();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("all_to_all_v block from rank ", in.from,
                                                      " to rank ", in.to, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
