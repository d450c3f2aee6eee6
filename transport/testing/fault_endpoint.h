#pragma once

// An endpoint for tests that injects failures into another: fail the Nth send to a peer (Send,
// SendAll, PostSend and PostWrite are sends), the Nth ExposeRegion or Connect with it, drop a
// peer (every send to it, receive or exposure for it and Connect with it fails with Unavailable,
// also receives and exposures already made), or delay sends to a peer. Faults are set while the
// endpoint is in use, from any thread. The real transports' own faults (InMemoryFabric::Kill, a
// closed TCP socket) still apply underneath. Only tests link it (target baton_transport_testing).

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/forwarding_endpoint.h"
#include "transport/transport.h"

namespace baton::transport::testing {

class FaultInjectingEndpoint final : public ForwardingEndpoint {
 public:
  // `inner` must outlive this endpoint.
  explicit FaultInjectingEndpoint(Endpoint* inner) : ForwardingEndpoint(inner) {}
  ~FaultInjectingEndpoint() override;

  // The `n`th send to `peer` from now on (n >= 1; a SendAll is one send, and so are PostSend and
  // PostWrite, whose handles complete with the error) fails with `status` without reaching it;
  // the sends before and after it go through. An OK `status` means Unavailable naming the peer,
  // as a lost link would.
  void FailNthSend(const std::string& peer, int n, absl::Status status = absl::OkStatus());
  // The same for the `n`th ExposeRegion for `peer` (its exposure fails at once, nothing is
  // exposed) and the `n`th Connect with it (nothing is connected).
  void FailNthExpose(const std::string& peer, int n, absl::Status status = absl::OkStatus());
  void FailNthConnect(const std::string& peer, int n, absl::Status status = absl::OkStatus());
  // From now on every send to `peer` and every receive from it fails with Unavailable naming it,
  // receives already posted included (within a millisecond), as if its daemon died.
  void DropPeer(const std::string& peer);
  // Sends to `peer` wait `delay` first (no longer than their deadline, which then fails them).
  void DelaySends(const std::string& peer, absl::Duration delay);

  // Sends to `peer` that reached the inner endpoint.
  int sends_to(const std::string& peer) const;

  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                       absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override;
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override;
  std::unique_ptr<PostedRecv> PostRecvRegion(const std::string& peer, const Tag& tag,
                                             const RegionSlice& slice, absl::Time deadline,
                                             ArrivalCallback on_arrival) override;
  absl::StatusOr<absl::Duration> RoundTrip(const std::string& peer, absl::Time deadline) override;
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

 private:
  class DroppableRecv;
  class DroppableExposure;
  // Which calls of one kind to a peer fail.
  struct Failures {
    int seen = 0;                                  // calls counted
    std::vector<std::pair<int, absl::Status>> at;  // 1-based call numbers (of seen), their error
    void Add(const std::string& peer, int n, absl::Status status, const char* what);
    // Counts a call: its injected error, or OK.
    absl::Status Next();
  };
  // What the next send to `peer` meets: OK to go on (after any delay, which fails it at
  // `deadline`), or the injected error. `what` names the send in a delay's error.
  absl::Status BeforeSend(const std::string& peer, const std::string& what, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CountSent(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // The error of a dropped peer, or OK.
  absl::Status DroppedError(const std::string& peer) const ABSL_LOCKS_EXCLUDED(mu_);
  std::unique_ptr<PostedRecv> Droppable(const std::string& peer, std::unique_ptr<PostedRecv> inner);

  struct PeerFaults {
    Failures sends;
    Failures exposes;
    Failures connects;
    absl::Duration delay;
    int sends_done = 0;  // reached the inner endpoint
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, PeerFaults> faults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton::transport::testing
