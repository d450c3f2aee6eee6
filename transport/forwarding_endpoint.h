#pragma once

// An endpoint that forwards every call to another, as leveldb's EnvWrapper does for Env: a
// wrapper derives from it and overrides only what it changes (PiggybackEndpoint holds a message
// back, collective::TimingEndpoint times the calls, the fault-injecting endpoint of the tests
// fails some). Every virtual of Endpoint is forwarded, so a method added to Endpoint is added
// here too, and no wrapper falls back on Endpoint's defaults by accident. Thread-safe as the
// inner endpoint is.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace baton::transport {

class ForwardingEndpoint : public Endpoint {
 public:
  // `inner` must outlive this endpoint.
  explicit ForwardingEndpoint(Endpoint* inner) : inner_(inner) {}

  Endpoint* inner() const { return inner_; }

  std::string address() const override { return inner_->address(); }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override {
    return inner_->Send(peer, tag, data, deadline);
  }
  absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                       absl::Time deadline) override {
    return inner_->SendAll(peer, messages, deadline);
  }
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override {
    return inner_->PostRecv(peer, tag, data, deadline, std::move(on_arrival));
  }
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override {
    return inner_->PostConsume(peer, tag, length, deadline, std::move(consume));
  }
  absl::StatusOr<absl::Duration> RoundTrip(const std::string& peer, absl::Time deadline) override {
    return inner_->RoundTrip(peer, deadline);
  }
  std::unique_ptr<PostedRecv> PostRecvRegion(const std::string& peer, const Tag& tag,
                                             const RegionSlice& slice, absl::Time deadline,
                                             ArrivalCallback on_arrival) override {
    return inner_->PostRecvRegion(peer, tag, slice, deadline, std::move(on_arrival));
  }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(ByteSpan bytes,
                                                               MemoryKind kind) override {
    return inner_->RegisterMemory(bytes, kind);
  }
  bool MovesDirectly(const std::string& peer, MemoryKind kind) const override {
    return inner_->MovesDirectly(peer, kind);
  }
  std::unique_ptr<PostedSend> PostSend(const std::string& peer, const Tag& tag,
                                       const RegionSlice& slice, absl::Time deadline) override {
    return inner_->PostSend(peer, tag, slice, deadline);
  }
  std::unique_ptr<ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                              const RegionSlice& slice,
                                              absl::Time deadline) override {
    return inner_->ExposeRegion(peer, comm, slice, deadline);
  }
  std::unique_ptr<PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                        const RegionSlice& source, const RemoteRegion& target,
                                        size_t target_offset, std::optional<uint32_t> notify,
                                        absl::Time deadline) override {
    return inner_->PostWrite(peer, comm, source, target, target_offset, notify, deadline);
  }
  absl::StatusOr<std::string> ConnectionData(const std::string& peer) override {
    return inner_->ConnectionData(peer);
  }
  absl::Status Connect(const std::string& peer, std::string_view remote_data) override {
    return inner_->Connect(peer, remote_data);
  }
  void Abort(uint64_t comm, const absl::Status& reason) override { inner_->Abort(comm, reason); }
  void Forget(uint64_t comm) override { inner_->Forget(comm); }
  void Restrict(uint64_t comm, std::span<const std::string> peers) override {
    inner_->Restrict(comm, peers);
  }
  std::vector<LinkStats> Stats() const override { return inner_->Stats(); }

 private:
  Endpoint* const inner_;
};

}  // namespace baton::transport
