#include "transport/inmemory/inmemory_transport.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/flow_control.h"
#include "transport/receive_matcher.h"

namespace baton::transport {
namespace {

class InMemoryFabricImpl;

class InMemoryEndpoint final : public Endpoint {
 public:
  InMemoryEndpoint(InMemoryFabricImpl* fabric, std::string address, const InMemoryOptions& options)
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
  void Abort(uint64_t comm, const absl::Status& reason) override {
    send_credits_.Abort(comm, reason);
    matcher_.Abort(comm, reason);
    FlushCredits();
  }
  void Forget(uint64_t comm) override {
    send_credits_.Forget(comm);
    matcher_.Forget(comm);
    FlushCredits();
  }
  void Restrict(uint64_t comm, std::span<const std::string> peers) override {
    matcher_.Restrict(comm, peers);
    FlushCredits();
  }
  std::vector<LinkStats> Stats() const override;

  ReceiveMatcher& matcher() { return matcher_; }
  ReceiveCredits& receive_credits() { return receive_credits_; }
  SendCredits& send_credits() { return send_credits_; }
  void CountSent(const std::string& peer, uint64_t length, bool ok);
  // Hands what receive_credits_ has queued (grants, clear-to-sends) to the senders' SendCredits.
  // Called, with no lock held, after every call that may release credit or post a receive.
  void FlushCredits();

 private:
  InMemoryFabricImpl* const fabric_;
  const std::string address_;
  ReceiveCredits receive_credits_;
  SendCredits send_credits_;
  ReceiveMatcher matcher_;
  mutable absl::Mutex stats_mu_;
  // Send-side counters; the receive side lives in matcher_.
  absl::flat_hash_map<std::string, LinkStats> tx_links_ ABSL_GUARDED_BY(stats_mu_);
};

class InMemoryFabricImpl final : public InMemoryFabric {
 public:
  explicit InMemoryFabricImpl(const InMemoryOptions& options) : options_(options) {}
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
      } else {
        entry.endpoint->matcher().PeerLost(address, lost);
        entry.endpoint->send_credits().Retire(address);
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
    }
  }

  absl::Status Deliver(InMemoryEndpoint& sender, const std::string& peer, const Tag& tag,
                       ConstByteSpan data, absl::Time deadline);

  // Runs `f` on the live endpoint at `address`, if there is one, under the directory's lock.
  void WithEndpoint(const std::string& address, absl::FunctionRef<void(InMemoryEndpoint&)> f) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = endpoints_.find(address);
    if (it != endpoints_.end() && !it->second.killed) f(*it->second.endpoint);
  }

 private:
  const InMemoryOptions options_;
  struct Entry {
    InMemoryEndpoint* endpoint;
    bool killed;
  };

  // Guards the directory; held shared while a message is being delivered, so that an endpoint is
  // neither unregistered nor killed in the middle of a delivery to or from it.
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> endpoints_ ABSL_GUARDED_BY(mu_);
};

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
      auto self = endpoints_.find(sender_address);
      if (self == endpoints_.end() || self->second.killed) {
        return absl::UnavailableError(
            absl::StrCat("endpoint ", sender_address, " was killed; cannot send to ", peer));
      }
      auto target = endpoints_.find(peer);
      if (target != endpoints_.end()) {
        if (target->second.killed) {
          return absl::UnavailableError(
              absl::StrCat("lost connection to peer ", peer, " (", TagToString(tag), "): killed"));
        }
        InMemoryEndpoint& receiver = *target->second.endpoint;
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
    // Like a TCP connect that is retried until the deadline: the peer may not exist yet.
    absl::MutexLock lock(&mu_);
    auto peer_exists = [this, &peer]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return endpoints_.contains(peer); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&peer_exists), deadline)) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach peer ", peer, " (", TagToString(tag),
                       "): no endpoint with that address by the deadline"));
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

InMemoryEndpoint::~InMemoryEndpoint() {
  send_credits_.Shutdown(absl::UnavailableError("endpoint shut down"));
  fabric_->Unregister(address_);
  matcher_.Shutdown(absl::UnavailableError("endpoint shut down"));
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
  std::vector<LinkStats> result;
  result.reserve(links.size());
  for (auto& [peer, link] : links) result.push_back(std::move(link));
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
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(ByteSpan bytes,
                                                               MemoryKind kind) override {
    if (kind != MemoryKind::kHost) {
      return absl::InvalidArgumentError(
          absl::StrCat("the inmemory transport cannot register ", MemoryKindName(kind), " memory"));
    }
    return HostMemoryRegion(bytes);
  }

 private:
  InMemoryFabric* const fabric_;
  const std::string address_;
};

std::unique_ptr<Transport> InMemoryFabricImpl::NewTransport(const std::string& address) {
  return std::make_unique<InMemoryTransport>(this, address);
}

}  // namespace

std::unique_ptr<InMemoryFabric> NewInMemoryFabric(const InMemoryOptions& options) {
  return std::make_unique<InMemoryFabricImpl>(options);
}

}  // namespace baton::transport
