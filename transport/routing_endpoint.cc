#include "transport/routing_endpoint.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton::transport {
namespace {

// A buffer registered with each endpoint of a RoutingEndpoint that moves its kind.
class RoutedRegion final : public MemoryRegion {
 public:
  RoutedRegion(ByteSpan bytes, MemoryKind kind, std::vector<const Endpoint*> endpoints,
               std::vector<std::unique_ptr<MemoryRegion>> registrations)
      : MemoryRegion(bytes, kind),
        endpoints_(std::move(endpoints)),
        registrations_(std::move(registrations)) {}

  const MemoryRegion* RegistrationWith(const Endpoint* endpoint) const override {
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      if (endpoints_[i] == endpoint) return registrations_[i].get();
    }
    return nullptr;
  }

 private:
  const std::vector<const Endpoint*> endpoints_;
  // By endpoint; null where the endpoint does not move the kind.
  const std::vector<std::unique_ptr<MemoryRegion>> registrations_;
};

}  // namespace

RoutingEndpoint::RoutingEndpoint(std::vector<Endpoint*> endpoints)
    : endpoints_(std::move(endpoints)), names_(endpoints_.size()) {}

absl::Status RoutingEndpoint::AddRoute(const std::string& peer, Endpoint* endpoint,
                                       const std::string& address) {
  auto it = std::find(endpoints_.begin(), endpoints_.end(), endpoint);
  if (it == endpoints_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("route to peer ", peer, " names an endpoint this one does not hold"));
  }
  absl::MutexLock lock(&mu_);
  if (auto existing = routes_.find(peer); existing != routes_.end()) {
    if (existing->second.endpoint == endpoint && existing->second.address == address) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is routed to another transport address already"));
  }
  routes_.emplace(peer, Route{endpoint, address});
  names_[static_cast<size_t>(std::distance(endpoints_.begin(), it))][address] = peer;
  routed_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status RoutingEndpoint::Select(std::span<Transport* const> transports, const PeerInfo& self,
                                     const PeerInfo& peer, const std::string& peer_name) {
  if (transports.size() != endpoints_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("routing over ", endpoints_.size(),
                                                   " endpoints was given ", transports.size(),
                                                   " transports"));
  }
  BATON_ASSIGN_OR_RETURN(const SelectedTransport selected, SelectTransport(transports, self, peer));
  const size_t index = static_cast<size_t>(std::distance(
      transports.begin(), std::find(transports.begin(), transports.end(), selected.transport)));
  // The primary endpoint under the peer's own name is where an unrouted peer goes anyway: no
  // route, so that a daemon with only its primary transport never looks one up per message.
  if (index == 0 && selected.address == peer_name) return absl::OkStatus();
  return AddRoute(peer_name, endpoints_[index], selected.address);
}

RoutingEndpoint::Route RoutingEndpoint::RouteOf(const std::string& peer) const {
  if (routed_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&mu_);
    if (auto it = routes_.find(peer); it != routes_.end()) return it->second;
  }
  return Route{endpoints_.front(), peer};
}

// Each call: straight to the primary while nothing is routed, else through the peer's route.
absl::Status RoutingEndpoint::Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                                   absl::Time deadline) {
  if (!routed_.load(std::memory_order_acquire)) {
    return endpoints_.front()->Send(peer, tag, data, deadline);
  }
  const Route route = RouteOf(peer);
  return route.endpoint->Send(route.address, tag, data, deadline);
}

absl::Status RoutingEndpoint::SendAll(const std::string& peer, std::span<const OutMessage> messages,
                                      absl::Time deadline) {
  const Route route = RouteOf(peer);
  bool registered = false;
  for (const OutMessage& message : messages) {
    registered = registered || (message.region != nullptr &&
                                message.region->RegistrationWith(route.endpoint) != message.region);
  }
  if (!registered) return route.endpoint->SendAll(route.address, messages, deadline);
  // Regions registered here stand for their registration with the peer's endpoint.
  std::vector<OutMessage> translated(messages.begin(), messages.end());
  for (OutMessage& message : translated) {
    if (message.region != nullptr) {
      message.region = message.region->RegistrationWith(route.endpoint);
    }
  }
  return route.endpoint->SendAll(route.address, translated, deadline);
}

std::unique_ptr<PostedRecv> RoutingEndpoint::PostRecv(const std::string& peer, const Tag& tag,
                                                      ByteSpan data, absl::Time deadline,
                                                      ArrivalCallback on_arrival) {
  if (!routed_.load(std::memory_order_acquire)) {
    return endpoints_.front()->PostRecv(peer, tag, data, deadline, std::move(on_arrival));
  }
  const Route route = RouteOf(peer);
  return route.endpoint->PostRecv(route.address, tag, data, deadline, std::move(on_arrival));
}

std::unique_ptr<PostedRecv> RoutingEndpoint::PostConsume(const std::string& peer, const Tag& tag,
                                                         size_t length, absl::Time deadline,
                                                         PieceConsumer consume) {
  if (!routed_.load(std::memory_order_acquire)) {
    return endpoints_.front()->PostConsume(peer, tag, length, deadline, std::move(consume));
  }
  const Route route = RouteOf(peer);
  return route.endpoint->PostConsume(route.address, tag, length, deadline, std::move(consume));
}

absl::StatusOr<absl::Duration> RoutingEndpoint::RoundTrip(const std::string& peer,
                                                          absl::Time deadline) {
  const Route route = RouteOf(peer);
  return route.endpoint->RoundTrip(route.address, deadline);
}

std::unique_ptr<PostedSend> RoutingEndpoint::PostSend(const std::string& peer, const Tag& tag,
                                                      const RegionSlice& slice,
                                                      absl::Time deadline) {
  const Route route = RouteOf(peer);
  absl::StatusOr<RegionSlice> routed = SliceFor(route.endpoint, peer, slice);
  if (!routed.ok()) return CompletedSend(routed.status());
  return route.endpoint->PostSend(route.address, tag, *routed, deadline);
}

std::unique_ptr<ExposedRegion> RoutingEndpoint::ExposeRegion(const std::string& peer, uint64_t comm,
                                                             const RegionSlice& slice,
                                                             absl::Time deadline) {
  const Route route = RouteOf(peer);
  absl::StatusOr<RegionSlice> routed = SliceFor(route.endpoint, peer, slice);
  if (!routed.ok()) return FailedExposure(routed.status());
  return route.endpoint->ExposeRegion(route.address, comm, *routed, deadline);
}

std::unique_ptr<PostedSend> RoutingEndpoint::PostWrite(
    const std::string& peer, uint64_t comm, const RegionSlice& source, const RemoteRegion& target,
    size_t target_offset, std::optional<uint32_t> notify, absl::Time deadline) {
  const Route route = RouteOf(peer);
  absl::StatusOr<RegionSlice> routed = SliceFor(route.endpoint, peer, source);
  if (!routed.ok()) return CompletedSend(routed.status());
  return route.endpoint->PostWrite(route.address, comm, *routed, target, target_offset, notify,
                                   deadline);
}

absl::StatusOr<std::string> RoutingEndpoint::ConnectionData(const std::string& peer) {
  const Route route = RouteOf(peer);
  return route.endpoint->ConnectionData(route.address);
}

absl::Status RoutingEndpoint::Connect(const std::string& peer, std::string_view remote_data) {
  const Route route = RouteOf(peer);
  return route.endpoint->Connect(route.address, remote_data);
}

std::unique_ptr<PostedRecv> RoutingEndpoint::PostRecvRegion(const std::string& peer, const Tag& tag,
                                                            const RegionSlice& slice,
                                                            absl::Time deadline,
                                                            ArrivalCallback on_arrival) {
  const Route route = RouteOf(peer);
  absl::StatusOr<RegionSlice> routed = SliceFor(route.endpoint, peer, slice);
  if (!routed.ok()) return FailedRecv(routed.status());
  return route.endpoint->PostRecvRegion(route.address, tag, *routed, deadline,
                                        std::move(on_arrival));
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> RoutingEndpoint::RegisterMemory(ByteSpan bytes,
                                                                              MemoryKind kind) {
  if (endpoints_.size() == 1) return endpoints_.front()->RegisterMemory(bytes, kind);
  std::vector<const Endpoint*> endpoints(endpoints_.begin(), endpoints_.end());
  std::vector<std::unique_ptr<MemoryRegion>> registrations(endpoints_.size());
  bool any = false;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    absl::StatusOr<std::unique_ptr<MemoryRegion>> registered =
        endpoints_[i]->RegisterMemory(bytes, kind);
    if (registered.ok()) {
      registrations[i] = *std::move(registered);
      any = true;
    } else if (registered.status().code() != absl::StatusCode::kInvalidArgument) {
      return registered.status();  // it moves the kind, and failed to register it
    }
  }
  if (!any) {
    return absl::InvalidArgumentError(
        absl::StrCat("no transport of this daemon moves ", MemoryKindName(kind), " memory"));
  }
  return std::make_unique<RoutedRegion>(bytes, kind, std::move(endpoints),
                                        std::move(registrations));
}

bool RoutingEndpoint::MovesDirectly(const std::string& peer, MemoryKind kind) const {
  const Route route = RouteOf(peer);
  return route.endpoint->MovesDirectly(route.address, kind);
}

absl::StatusOr<RegionSlice> RoutingEndpoint::SliceFor(const Endpoint* endpoint,
                                                      const std::string& peer,
                                                      const RegionSlice& slice) {
  if (slice.region == nullptr) return slice;  // the endpoint says what is wrong with it
  const MemoryRegion* registration = slice.region->RegistrationWith(endpoint);
  if (registration == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the transport that carries peer ", peer, " cannot move ",
                     MemoryKindName(slice.region->kind()), " memory"));
  }
  return RegionSlice{registration, slice.offset, slice.length};
}

void RoutingEndpoint::Abort(uint64_t comm, const absl::Status& reason) {
  for (Endpoint* endpoint : endpoints_) endpoint->Abort(comm, reason);
}

void RoutingEndpoint::Forget(uint64_t comm) {
  for (Endpoint* endpoint : endpoints_) endpoint->Forget(comm);
}

void RoutingEndpoint::Restrict(uint64_t comm, std::span<const std::string> peers) {
  std::vector<std::vector<std::string>> addresses(endpoints_.size());
  for (const std::string& peer : peers) {
    const Route route = RouteOf(peer);
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      if (endpoints_[i] == route.endpoint) addresses[i].push_back(route.address);
    }
  }
  for (size_t i = 0; i < endpoints_.size(); ++i) endpoints_[i]->Restrict(comm, addresses[i]);
}

std::vector<LinkStats> RoutingEndpoint::Stats() const {
  std::vector<LinkStats> all;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    std::vector<LinkStats> links = endpoints_[i]->Stats();
    if (routed_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&mu_);
      for (LinkStats& link : links) {
        if (auto it = names_[i].find(link.peer); it != names_[i].end()) link.peer = it->second;
      }
    }
    std::move(links.begin(), links.end(), std::back_inserter(all));
  }
  std::sort(all.begin(), all.end(),
            [](const LinkStats& a, const LinkStats& b) { return a.peer < b.peer; });
  return all;
}

}  // namespace baton::transport
