#include "transport/inmemory/inmemory_transport.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/secure_random.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/exposure_table.h"
#include "transport/flow_control.h"
#include "transport/receive_matcher.h"

namespace baton::transport {
namespace {

class InMemoryFabricImpl;

class InMemoryEndpoint final : public Endpoint {
 public:
  InMemoryEndpoint(InMemoryFabricImpl* fabric, std::string address,
                   const InMemoryFabricOptions& options)
      : fabric_(fabric),
        address_(std::move(address)),
        receive_credits_(options.max_unexpected_bytes_per_peer, options.max_unexpected_bytes_total),
        matcher_(/*message_overhead_bytes=*/0,
                 options.max_unexpected_bytes_per_peer > 0 ? &receive_credits_ : nullptr) {}
  ~InMemoryEndpoint() override;

  std::string address() const override { return address_; }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override {
    std::unique_ptr<PostedRecv> posted =
        matcher_.Post(peer, tag, data, deadline, std::move(on_arrival));
    FlushCredits();
    return posted;
  }
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override {
    std::unique_ptr<PostedRecv> posted =
        matcher_.PostConsume(peer, tag, length, deadline, std::move(consume));
    FlushCredits();
    return posted;
  }
  std::unique_ptr<ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                              const RegionSlice& slice,
                                              absl::Time deadline) override;
  std::unique_ptr<PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                        const RegionSlice& source, const RemoteRegion& target,
                                        size_t target_offset, std::optional<uint32_t> notify,
                                        absl::Time deadline) override;
  absl::StatusOr<std::string> ConnectionData(const std::string& peer) override;
  absl::Status Connect(const std::string& peer, std::string_view remote_data) override;
  void Abort(uint64_t comm, const absl::Status& reason) override {
    send_credits_.Abort(comm, reason);
    matcher_.Abort(comm, reason);
    exposures_.Abort(comm, reason);
    FlushCredits();
  }
  void Forget(uint64_t comm) override {
    send_credits_.Forget(comm);
    matcher_.Forget(comm);
    exposures_.Forget(comm);
    tally_.Forget(comm);
    FlushCredits();
  }
  void Restrict(uint64_t comm, std::span<const std::string> peers) override {
    matcher_.Restrict(comm, peers);
    FlushCredits();
  }
  std::vector<LinkStats> Stats() const override;

  ReceiveMatcher& matcher() { return matcher_; }
  ExposureTable& exposures() { return exposures_; }
  ReceiveCredits& receive_credits() { return receive_credits_; }
  SendCredits& send_credits() { return send_credits_; }
  void CountSent(const std::string& peer, uint64_t length, bool ok);
  // Hands what receive_credits_ has queued (grants, clear-to-sends) to the senders' SendCredits.
  // Called, with no lock held, after every call that may release credit or post a receive.
  void FlushCredits();
  // The connection data this endpoint makes for `peer` (made on first use), and whether it has
  // taken `token` from `peer` in Connect.
  std::string TokenFor(const std::string& peer) ABSL_LOCKS_EXCLUDED(links_mu_);
  bool ConnectedWith(const std::string& peer, const std::string& token) const
      ABSL_LOCKS_EXCLUDED(links_mu_);

 private:
  InMemoryFabricImpl* const fabric_;
  const std::string address_;
  ReceiveCredits receive_credits_;
  SendCredits send_credits_;
  ReceiveMatcher matcher_;
  ExposureTable exposures_;
  WriteTally tally_;
  // Connection data (InMemoryFabricOptions::require_connection_data): the token made for each
  // peer, and the one each peer's Connect gave.
  mutable absl::Mutex links_mu_;
  absl::flat_hash_map<std::string, std::string> tokens_ ABSL_GUARDED_BY(links_mu_);
  absl::flat_hash_map<std::string, std::string> connected_ ABSL_GUARDED_BY(links_mu_);
  mutable absl::Mutex stats_mu_;
  // Send-side counters; the receive side lives in matcher_.
  absl::flat_hash_map<std::string, LinkStats> tx_links_ ABSL_GUARDED_BY(stats_mu_);
};

class InMemoryFabricImpl final : public InMemoryFabric {
 public:
  explicit InMemoryFabricImpl(const InMemoryFabricOptions& options) : options_(options) {}
  ~InMemoryFabricImpl() override {
    absl::MutexLock lock(&mu_);
    if (!endpoints_.empty()) {
      spdlog::error("in-memory fabric destroyed with {} endpoints still alive", endpoints_.size());
    }
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(const std::string& address) override {
    absl::MutexLock lock(&mu_);
    if (endpoints_.contains(address)) {
      return absl::AlreadyExistsError(
          absl::StrCat("an in-memory endpoint with address ", address, " already exists"));
    }
    auto endpoint = std::make_unique<InMemoryEndpoint>(this, address, options_);
    endpoints_.emplace(address, Entry{endpoint.get(), false});
    return endpoint;
  }

  std::unique_ptr<Transport> NewTransport(const std::string& address) override;

  void Kill(const std::string& address) override {
    // The writer lock waits for deliveries in progress, so no message from `address` can arrive
    // after its peers have been told it is lost (and revive it: a delivery means "connected").
    absl::MutexLock lock(&mu_);
    const absl::Status lost =
        absl::UnavailableError(absl::StrCat("lost connection from peer ", address, ": killed"));
    for (auto& [other_address, entry] : endpoints_) {
      if (other_address == address) {
        entry.killed = true;
        const absl::Status killed =
            absl::UnavailableError(absl::StrCat("endpoint ", address, " was killed"));
        entry.endpoint->send_credits().Shutdown(killed);
        entry.endpoint->matcher().Shutdown(killed);
        entry.endpoint->exposures().Shutdown(killed);
      } else {
        entry.endpoint->matcher().PeerLost(address, lost);
        entry.endpoint->send_credits().Retire(address);
        entry.endpoint->exposures().PeerLost(address, lost);
      }
    }
  }

  void Unregister(const std::string& address) {
    absl::MutexLock lock(&mu_);
    endpoints_.erase(address);
    // A closed endpoint is as gone as a dead process; its peers learn it as TCP peers would.
    const absl::Status lost = absl::UnavailableError(
        absl::StrCat("lost connection from peer ", address, ": endpoint closed"));
    for (auto& [other_address, entry] : endpoints_) {
      entry.endpoint->matcher().PeerLost(address, lost);
      entry.endpoint->send_credits().Retire(address);
      entry.endpoint->exposures().PeerLost(address, lost);
    }
  }

  absl::Status Deliver(InMemoryEndpoint& sender, const std::string& peer, const Tag& tag,
                       ConstByteSpan data, absl::Time deadline);
  // PostWrite's copy into the region `key` that `peer` exposed to `sender` for `comm`.
  absl::Status DeliverWrite(InMemoryEndpoint& sender, const std::string& peer, uint64_t comm,
                            uint64_t key, uint64_t offset, ConstByteSpan data,
                            std::optional<ExposureTable::Notify> notify, absl::Time deadline);

  // Runs `f` on the live endpoint at `address`, if there is one, under the directory's lock.
  void WithEndpoint(const std::string& address, absl::FunctionRef<void(InMemoryEndpoint&)> f) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = endpoints_.find(address);
    if (it != endpoints_.end() && !it->second.killed) f(*it->second.endpoint);
  }

  bool require_connection_data() const { return options_.require_connection_data; }
  // The connection data the endpoint `peer` made for `address`; Unavailable without such a peer.
  absl::StatusOr<std::string> TokenOf(const std::string& peer, const std::string& address);

 private:
  struct Entry {
    InMemoryEndpoint* endpoint;
    bool killed;
  };

  // The endpoint `peer` for a delivery from `sender` (mu_ held shared): null (and `*error` set)
  // if it is killed, or not connected both ways when the fabric requires it; null without error
  // if there is no such endpoint yet.
  InMemoryEndpoint* TargetLocked(InMemoryEndpoint& sender, const std::string& peer,
                                 const std::string& what, absl::Status* error)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits (until `deadline`) for an endpoint `peer` to exist, as a TCP connect is retried.
  absl::Status AwaitPeer(const std::string& peer, const std::string& what, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  const InMemoryFabricOptions options_;

  // Guards the directory; held shared while a message is being delivered, so that an endpoint is
  // neither unregistered nor killed in the middle of a delivery to or from it.
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> endpoints_ ABSL_GUARDED_BY(mu_);
};

InMemoryEndpoint* InMemoryFabricImpl::TargetLocked(InMemoryEndpoint& sender,
                                                   const std::string& peer, const std::string& what,
                                                   absl::Status* error) {
  const std::string sender_address = sender.address();
  auto self = endpoints_.find(sender_address);
  if (self == endpoints_.end() || self->second.killed) {
    *error = absl::UnavailableError(
        absl::StrCat("endpoint ", sender_address, " was killed; cannot send to ", peer));
    return nullptr;
  }
  auto target = endpoints_.find(peer);
  if (target == endpoints_.end()) return nullptr;
  if (target->second.killed) {
    *error = absl::UnavailableError(
        absl::StrCat("lost connection to peer ", peer, " (", what, "): killed"));
    return nullptr;
  }
  InMemoryEndpoint* endpoint = target->second.endpoint;
  // An endpoint's messages to itself need no link.
  if (options_.require_connection_data && peer != sender_address &&
      (!sender.ConnectedWith(peer, endpoint->TokenFor(sender_address)) ||
       !endpoint->ConnectedWith(sender_address, sender.TokenFor(peer)))) {
    *error = absl::FailedPreconditionError(
        absl::StrCat("no link with peer ", peer, " (", what,
                     "): the two endpoints have not exchanged connection data "
                     "(Endpoint::ConnectionData, then Endpoint::Connect on both)"));
    return nullptr;
  }
  return endpoint;
}

absl::Status InMemoryFabricImpl::AwaitPeer(const std::string& peer, const std::string& what,
                                           absl::Time deadline) {
  // Like a TCP connect that is retried until the deadline: the peer may not exist yet.
  absl::MutexLock lock(&mu_);
  auto peer_exists = [this, &peer]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return endpoints_.contains(peer); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&peer_exists), deadline)) {
    return absl::UnavailableError(absl::StrCat("cannot reach peer ", peer, " (", what,
                                               "): no endpoint with that address by the deadline"));
  }
  return absl::OkStatus();
}

absl::Status InMemoryFabricImpl::Deliver(InMemoryEndpoint& sender, const std::string& peer,
                                         const Tag& tag, ConstByteSpan data, absl::Time deadline) {
  const std::string sender_address = sender.address();
  SendCredits& credits = sender.send_credits();
  const uint64_t charge = CreditCharge(data.size());
  bool paid = false;  // credit was waited for and taken, in paid_epoch
  uint64_t paid_epoch = 0;
  bool cleared = false;  // the clear-to-send is taken
  while (true) {
    // What to wait for, outside the directory's lock (a Kill must not wait for a send).
    enum class Wait { kPeer, kCredit, kClearToSend } wait = Wait::kPeer;
    uint64_t epoch = 0;
    InMemoryEndpoint* delivered_to = nullptr;
    InMemoryEndpoint* linked = nullptr;  // linked now: may have clear-to-sends for the sender
    {
      absl::ReaderMutexLock lock(&mu_);
      absl::Status error;
      if (InMemoryEndpoint* target = TargetLocked(sender, peer, TagToString(tag), &error)) {
        InMemoryEndpoint& receiver = *target;
        // The link's one epoch, granted when the sender first sends (TCP: first connects).
        if (!credits.Latest(peer).has_value()) {
          credits.Grant(peer, receiver.receive_credits().Attach(sender_address));
          linked = &receiver;
        }
        epoch = credits.Latest(peer).value_or(0);
        const uint64_t eager_max = credits.EagerMax(peer, epoch).value_or(0);
        const bool unbounded = options_.max_unexpected_bytes_per_peer == 0;
        bool go = false;
        if (unbounded || (paid && paid_epoch == epoch && charge <= eager_max)) {
          go = true;
        } else if (charge > eager_max) {
          go = cleared;
          wait = Wait::kClearToSend;
        } else {
          if (paid) credits.Refund(peer, paid_epoch, charge);
          paid = false;
          go = credits.TryTake(peer, epoch, charge);
          wait = Wait::kCredit;
        }
        if (go) {
          ReceiveMatcher& matcher = receiver.matcher();
          matcher.PeerConnected(sender_address);
          ReceiveMatcher::Delivery delivery =
              matcher.BeginDelivery(sender_address, tag, data.size());
          delivery.Write(data);
          matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
          delivered_to = &receiver;
        }
      } else if (!error.ok()) {
        return error;
      }
    }
    // Endpoints are unregistered only when destroyed, and a sender's peer may not be destroyed
    // while it sends to it.
    if (linked != nullptr && linked != delivered_to) linked->FlushCredits();
    if (delivered_to != nullptr) {
      delivered_to->FlushCredits();
      return absl::OkStatus();
    }
    bool retry = false;
    if (wait == Wait::kCredit) {
      BATON_RETURN_IF_ERROR(credits.Take(peer, epoch, tag, charge, deadline, &retry));
      paid = !retry;
      paid_epoch = epoch;
      continue;
    }
    if (wait == Wait::kClearToSend) {
      BATON_RETURN_IF_ERROR(credits.AwaitClearToSend(peer, tag, deadline, &retry));
      cleared = !retry;
      continue;
    }
    if (absl::Status found = AwaitPeer(peer, TagToString(tag), deadline); !found.ok()) {
      return found;
    }
  }
}

void InMemoryEndpoint::FlushCredits() {
  ReceiveCredits::Outgoing outgoing = receive_credits_.TakeOutgoing(absl::InfinitePast());
  for (const std::string& peer : outgoing.grants) {
    const std::optional<CreditGrant> grant = receive_credits_.Current(peer);
    if (!grant.has_value()) continue;
    fabric_->WithEndpoint(
        peer, [&](InMemoryEndpoint& sender) { sender.send_credits().Grant(address_, *grant); });
  }
  for (const auto& entry : outgoing.clear_to_send) {
    fabric_->WithEndpoint(entry.first, [&](InMemoryEndpoint& sender) {
      sender.send_credits().ClearToSend(address_, entry.second);
    });
  }
}

absl::Status InMemoryFabricImpl::DeliverWrite(InMemoryEndpoint& sender, const std::string& peer,
                                              uint64_t comm, uint64_t key, uint64_t offset,
                                              ConstByteSpan data,
                                              std::optional<ExposureTable::Notify> notify,
                                              absl::Time deadline) {
  const std::string what = absl::StrCat("a write for comm ", absl::Hex(comm, absl::kZeroPad8));
  while (true) {
    {
      // Held shared for the copy: the target can be neither closed nor killed meanwhile, and
      // its exposure's owner, revoking it, waits for the write to finish.
      absl::ReaderMutexLock lock(&mu_);
      absl::Status error;
      if (InMemoryEndpoint* target = TargetLocked(sender, peer, what, &error)) {
        absl::StatusOr<ExposureTable::Write> write =
            target->exposures().BeginWrite(sender.address(), comm, key, offset, data.size());
        if (!write.ok()) {
          return WriteRefusedError(peer, comm, offset, data.size(),
                                   absl::IsInvalidArgument(write.status())
                                       ? WriteRefusal::kOutOfBounds
                                       : WriteRefusal::kNoRegion);
        }
        if (!data.empty()) std::memcpy(write->target().data(), data.data(), data.size());
        target->exposures().FinishWrite(*std::move(write), absl::OkStatus(), notify);
        return absl::OkStatus();
      }
      if (!error.ok()) return error;
    }
    if (absl::Status found = AwaitPeer(peer, what, deadline); !found.ok()) return found;
  }
}

absl::StatusOr<std::string> InMemoryFabricImpl::TokenOf(const std::string& peer,
                                                        const std::string& address) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = endpoints_.find(peer);
  if (it == endpoints_.end() || it->second.killed) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect with peer ", peer, ": no endpoint with that address"));
  }
  return it->second.endpoint->TokenFor(address);
}

InMemoryEndpoint::~InMemoryEndpoint() {
  send_credits_.Shutdown(absl::UnavailableError("endpoint shut down"));
  fabric_->Unregister(address_);
  matcher_.Shutdown(absl::UnavailableError("endpoint shut down"));
  exposures_.Shutdown(absl::UnavailableError("endpoint shut down"));
}

std::unique_ptr<ExposedRegion> InMemoryEndpoint::ExposeRegion(const std::string& peer,
                                                              uint64_t comm,
                                                              const RegionSlice& slice,
                                                              absl::Time deadline) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, slice);
  if (!bytes.ok()) return FailedExposure(bytes.status());
  return exposures_.Expose(peer, comm, *bytes, deadline);
}

std::unique_ptr<PostedSend> InMemoryEndpoint::PostWrite(
    const std::string& peer, uint64_t comm, const RegionSlice& source, const RemoteRegion& target,
    size_t target_offset, std::optional<uint32_t> notify, absl::Time deadline) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, source);
  if (!bytes.ok()) return CompletedSend(bytes.status());
  if (absl::Status aborted = matcher_.AbortReason(comm); !aborted.ok()) {
    return CompletedSend(aborted);
  }
  if (target_offset > target.length || bytes->size() > target.length - target_offset) {
    return CompletedSend(absl::InvalidArgumentError(
        absl::StrCat("a write of ", bytes->size(), " bytes at offset ", target_offset, " to peer ",
                     peer, " leaves the region of ", target.length, " bytes it describes")));
  }
  std::optional<ExposureTable::Notify> notice;
  const uint64_t total =
      tally_.Add(peer, comm, target.key, bytes->size(), /*last=*/notify.has_value());
  if (notify.has_value()) notice = ExposureTable::Notify{*notify, total};
  absl::Status status =
      fabric_->DeliverWrite(*this, peer, comm, target.key, target_offset, *bytes, notice, deadline);
  CountSent(peer, bytes->size(), status.ok());
  return CompletedSend(std::move(status));
}

std::string InMemoryEndpoint::TokenFor(const std::string& peer) {
  absl::MutexLock lock(&links_mu_);
  std::string& token = tokens_[peer];
  if (token.empty()) token = SecureRandomHex(16);
  return token;
}

bool InMemoryEndpoint::ConnectedWith(const std::string& peer, const std::string& token) const {
  absl::MutexLock lock(&links_mu_);
  auto it = connected_.find(peer);
  return it != connected_.end() && it->second == token;
}

absl::StatusOr<std::string> InMemoryEndpoint::ConnectionData(const std::string& peer) {
  if (!fabric_->require_connection_data()) return Endpoint::ConnectionData(peer);
  return TokenFor(peer);
}

absl::Status InMemoryEndpoint::Connect(const std::string& peer, std::string_view remote_data) {
  if (!fabric_->require_connection_data()) return Endpoint::Connect(peer, remote_data);
  absl::StatusOr<std::string> expected = fabric_->TokenOf(peer, address_);
  if (!expected.ok()) return expected.status();
  if (remote_data != *expected) {
    return absl::InvalidArgumentError(absl::StrCat("connection data for peer ", peer,
                                                   " is not what it made for this endpoint (",
                                                   remote_data.size(), " bytes)"));
  }
  absl::MutexLock lock(&links_mu_);
  connected_[peer] = std::string(remote_data);
  return absl::OkStatus();
}

absl::Status InMemoryEndpoint::Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                                    absl::Time deadline) {
  if (absl::Status aborted = matcher_.AbortReason(tag.comm); !aborted.ok()) return aborted;
  absl::Status status = fabric_->Deliver(*this, peer, tag, data, deadline);
  CountSent(peer, data.size(), status.ok());
  return status;
}

void InMemoryEndpoint::CountSent(const std::string& peer, uint64_t length, bool ok) {
  absl::MutexLock lock(&stats_mu_);
  LinkStats& link = tx_links_[peer];
  link.peer = peer;
  if (ok) {
    link.tx_bytes += length;
    ++link.tx_messages;
  } else {
    ++link.errors;
  }
}

std::vector<LinkStats> InMemoryEndpoint::Stats() const {
  absl::flat_hash_map<std::string, LinkStats> links = matcher_.RecvLinkStats();
  for (const auto& [peer, counts] : exposures_.Counts()) {
    LinkStats& link = links[peer];
    link.peer = peer;
    link.rx_bytes += counts.rx_bytes;
    link.rx_messages += counts.rx_writes;
  }
  {
    absl::MutexLock lock(&stats_mu_);
    for (const auto& [peer, tx] : tx_links_) {
      LinkStats& link = links[peer];
      link.peer = peer;
      link.tx_bytes = tx.tx_bytes;
      link.tx_messages = tx.tx_messages;
      link.errors += tx.errors;
    }
  }
  const absl::flat_hash_map<std::string, ExposureTable::PeerCounts> writes = exposures_.Counts();
  std::vector<LinkStats> result;
  result.reserve(links.size());
  for (auto& [peer, link] : links) {
    auto it = writes.find(peer);
    link.counters.push_back(LinkCounter{std::string(kRefusedWritesCounter),
                                        it == writes.end() ? 0 : it->second.refused});
    std::sort(link.counters.begin(), link.counters.end(),
              [](const LinkCounter& a, const LinkCounter& b) { return a.name < b.name; });
    result.push_back(std::move(link));
  }
  std::sort(result.begin(), result.end(),
            [](const LinkStats& a, const LinkStats& b) { return a.peer < b.peer; });
  return result;
}

class InMemoryTransport final : public Transport {
 public:
  InMemoryTransport(InMemoryFabric* fabric, std::string address)
      : fabric_(fabric), address_(std::move(address)) {}

  std::string_view name() const override { return kInMemoryTransportName; }
  absl::StatusOr<std::unique_ptr<Endpoint>> Listen() override {
    return fabric_->CreateEndpoint(address_);
  }
  bool CanReach(const PeerInfo& self, const PeerInfo& peer) const override {
    return peer.Find(kInMemoryTransportName) != nullptr;
  }

 private:
  InMemoryFabric* const fabric_;
  const std::string address_;
};

std::unique_ptr<Transport> InMemoryFabricImpl::NewTransport(const std::string& address) {
  return std::make_unique<InMemoryTransport>(this, address);
}

}  // namespace

std::unique_ptr<InMemoryFabric> NewInMemoryFabric(const InMemoryFabricOptions& options) {
  return std::make_unique<InMemoryFabricImpl>(options);
}

}  // namespace baton::transport
