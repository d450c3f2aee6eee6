#pragma once

// The daemon's endpoint over the endpoints of its transports: each peer goes to the endpoint of
// the transport selected for it (transport/selector.h). Peers keep the name collective/ and the
// plan give them (their data address); a route says which endpoint carries a peer and the
// peer's address on that transport, and received messages and LinkStats are named back. A peer
// without a route goes to the primary endpoint by its own name, which is how TCP, the only
// transport today, carries every peer: then each call costs one atomic load and one call
// through a pointer more than the primary's. Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/selector.h"
#include "transport/transport.h"

namespace baton::transport {

class RoutingEndpoint final : public Endpoint {
 public:
  // `endpoints` (not null; the first is the primary, whose address() this endpoint reports) must
  // outlive it.
  explicit RoutingEndpoint(std::vector<Endpoint*> endpoints);

  // Routes `peer` to `endpoint` (one of those given), where the peer's address is `address`.
  // InvalidArgument for an endpoint not given, or a peer routed elsewhere already (a route does
  // not change while messages may be in flight).
  absl::Status AddRoute(const std::string& peer, Endpoint* endpoint, const std::string& address);
  // SelectTransport among `transports` (transports[i]'s endpoint is the i-th given to the
  // constructor), then AddRoute(peer_name, ...) unless the choice is the primary endpoint at
  // peer_name itself (the default route). Errors: SelectTransport's and AddRoute's.
  absl::Status Select(std::span<Transport* const> transports, const PeerInfo& self,
                      const PeerInfo& peer, const std::string& peer_name);

  std::string address() const override { return endpoints_.front()->address(); }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                       absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override;
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override;
  absl::StatusOr<absl::Duration> RoundTrip(const std::string& peer, absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecvRegion(const std::string& peer, const Tag& tag,
                                             const RegionSlice& slice, absl::Time deadline,
                                             ArrivalCallback on_arrival) override;
  // Registers the memory with every endpoint that moves its kind, and returns one region that
  // stands for all of those registrations: a send or receive naming it goes to the peer's
  // endpoint with that endpoint's registration (InvalidArgument when the peer's transport
  // cannot move the kind). InvalidArgument when no endpoint moves the kind; the first endpoint's
  // error when one that does fails.
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(ByteSpan bytes,
                                                               MemoryKind kind) override;
  // As the peer's endpoint answers for its address there.
  bool MovesDirectly(const std::string& peer, MemoryKind kind) const override;
  // Each to the endpoint of the peer's route, under its address there.
  std::unique_ptr<PostedSend> PostSend(const std::string& peer, const Tag& tag,
                                       const RegionSlice& slice, absl::Time deadline) override;
  std::unique_ptr<ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                              const RegionSlice& slice,
                                              absl::Time deadline) override;
  std::unique_ptr<PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                        const RegionSlice& source, const RemoteRegion& target,
                                        size_t target_offset, std::optional<uint32_t> notify,
                                        absl::Time deadline) override;
  absl::StatusOr<std::string> ConnectionData(const std::string& peer) override;
  absl::Status Connect(const std::string& peer, std::string_view remote_data) override;
  // On every endpoint.
  void Abort(uint64_t comm, const absl::Status& reason) override;
  void Forget(uint64_t comm) override;
  // On every endpoint, each told the addresses its routes give the peers (the primary: also the
  // peers routed nowhere else). The peers' routes must be added first: a peer routed later has
  // its messages refused on its new endpoint.
  void Restrict(uint64_t comm, std::span<const std::string> peers) override;
  // Every endpoint's links, named as the peers are named here.
  std::vector<LinkStats> Stats() const override;

 private:
  struct Route {
    Endpoint* endpoint = nullptr;
    std::string address;  // the peer's, on endpoint's transport
  };
  // The route of `peer`: the primary by the same name unless AddRoute said otherwise.
  Route RouteOf(const std::string& peer) const ABSL_LOCKS_EXCLUDED(mu_);
  // `slice` as `endpoint` must be given it: its region's registration there. InvalidArgument
  // (naming `peer`) when the memory is not registered with that endpoint.
  static absl::StatusOr<RegionSlice> SliceFor(const Endpoint* endpoint, const std::string& peer,
                                              const RegionSlice& slice);

  const std::vector<Endpoint*> endpoints_;
  // False until the first AddRoute: until then every call goes to the primary without a lookup.
  std::atomic<bool> routed_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Route> routes_ ABSL_GUARDED_BY(mu_);
  // Per endpoint index: the peer's address on it -> its name here.
  std::vector<absl::flat_hash_map<std::string, std::string>> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::transport
