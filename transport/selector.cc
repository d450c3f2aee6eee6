#include "transport/selector.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace baton::transport {

absl::StatusOr<SelectedTransport> SelectTransport(std::span<Transport* const> transports,
                                                  const PeerInfo& self, const PeerInfo& peer) {
  for (Transport* transport : transports) {
    const TransportAddress* advertised = peer.Find(transport->name());
    if (advertised == nullptr || !transport->CanReach(self, peer)) continue;
    return SelectedTransport{transport, advertised->address};
  }
  std::vector<std::string> ours;
  ours.reserve(transports.size());
  for (Transport* transport : transports) ours.emplace_back(transport->name());
  return absl::FailedPreconditionError(absl::StrCat(
      "no transport of this daemon (", ours.empty() ? "none" : absl::StrJoin(ours, ", "),
      ") reaches peer ", peer.node_name.empty() ? "(unnamed)" : peer.node_name, ", which offers ",
      DescribeTransports(peer)));
}

std::string DescribeTransports(const PeerInfo& info) {
  if (info.transports.empty()) return "no transport";
  return absl::StrJoin(info.transports, ", ", [](std::string* out, const TransportAddress& t) {
    absl::StrAppend(out, t.transport, " at ", t.address);
  });
}

}  // namespace baton::transport
