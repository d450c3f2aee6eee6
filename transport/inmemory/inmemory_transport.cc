#include "transport/inmemory/inmemory_transport.h"

#include <algorithm>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"
#include "transport/receive_matcher.h"

namespace baton::transport {
namespace {

class InMemoryFabricImpl;

class InMemoryEndpoint final : public Endpoint {
 public:
  InMemoryEndpoint(InMemoryFabricImpl* fabric, std::string address)
      : fabric_(fabric), address_(std::move(address)) {}
  ~InMemoryEndpoint() override;

  std::string address() const override { return address_; }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override {
    return matcher_.Post(peer, tag, data, deadline, std::move(on_arrival));
  }
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override {
    return matcher_.PostConsume(peer, tag, length, deadline, std::move(consume));
  }
  void Abort(uint64_t comm, const absl::Status& reason) override { matcher_.Abort(comm, reason); }
  void Forget(uint64_t comm) override { matcher_.Forget(comm); }
  void Restrict(uint64_t comm, std::span<const std::string> peers) override {
    matcher_.Restrict(comm, peers);
  }
  std::vector<LinkStats> Stats() const override;

  ReceiveMatcher& matcher() { return matcher_; }
  void CountSent(const std::string& peer, uint64_t length, bool ok);

 private:
  InMemoryFabricImpl* const fabric_;
  const std::string address_;
  ReceiveMatcher matcher_;
  mutable absl::Mutex stats_mu_;
  // Send-side counters; the receive side lives in matcher_.
  absl::flat_hash_map<std::string, LinkStats> tx_links_ ABSL_GUARDED_BY(stats_mu_);
};

class InMemoryFabricImpl final : public InMemoryFabric {
 public:
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
    auto endpoint = std::make_unique<InMemoryEndpoint>(this, address);
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
        entry.endpoint->matcher().Shutdown(
            absl::UnavailableError(absl::StrCat("endpoint ", address, " was killed")));
      } else {
        entry.endpoint->matcher().PeerLost(address, lost);
      }
    }
  }

  void Unregister(const std::string& address) {
    absl::MutexLock lock(&mu_);
    endpoints_.erase(address);
    // A closed endpoint is as gone as a dead process; its peers learn it as TCP peers would.
    const absl::Status lost = absl::UnavailableError(
        absl::StrCat("lost connection from peer ", address, ": endpoint closed"));
    for (auto& [other_address, entry] : endpoints_)
      entry.endpoint->matcher().PeerLost(address, lost);
  }

  absl::Status Deliver(InMemoryEndpoint& sender, const std::string& peer, const Tag& tag,
                       ConstByteSpan data, absl::Time deadline);

 private:
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
  while (true) {
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
        ReceiveMatcher& matcher = target->second.endpoint->matcher();
        matcher.PeerConnected(sender_address);
        ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(sender_address, tag, data.size());
        delivery.Write(data);
        matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
        return absl::OkStatus();
      }
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

InMemoryEndpoint::~InMemoryEndpoint() {
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

std::unique_ptr<InMemoryFabric> NewInMemoryFabric() {
  return std::make_unique<InMemoryFabricImpl>();
}

}  // namespace baton::transport
