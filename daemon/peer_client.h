#pragma once

// Calls other daemons' peer API. Channels are cached per address.

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/baton.grpc.pb.h"
#include "daemon/comm_proof.h"
#include "daemon/peer_credentials.h"
#include "daemon/plan.h"

namespace baton::daemon {

class PeerClient {
 public:
  // Dials peers with `credentials`; with TLS, a probe's answer must come from a daemon certified
  // as the node it names.
  explicit PeerClient(const PeerTlsCredentials& credentials)
      : channel_credentials_(credentials.channel()), certified_peers_(credentials.secure()) {}

  // Forwards a rank's join to the root daemon at `root_address`; returns the plan. Returns by
  // `deadline` whatever the root does: the root's own error (DeadlineExceeded naming the missing
  // ranks: it is asked to give up a little earlier), or DeadlineExceeded naming the root when it
  // never answered (down, unreachable, stopped).
  absl::StatusOr<Plan> JoinRank(const std::string& root_address, const std::string& secret,
                                int world_size, int rank, const Member& member,
                                absl::Time deadline);

  // Tells the daemon at `address` that communicator `comm_tag` is aborted or fails from an
  // operation on (`notice`, daemon/comm_proof.h). Fire and forget: the notice waits for a
  // connection that is not ready yet and gives up after kAbortNoticeTimeout; a failure is logged.
  static constexpr absl::Duration kAbortNoticeTimeout = absl::Seconds(30);
  void AbortAsync(const std::string& address, uint64_t comm_tag, const AbortNotice& notice,
                  const std::string& from_node, const std::string& proof);

  // One link probe round trip carrying `send_bytes` to the daemon at `address`; returns who
  // answered.
  absl::StatusOr<Member> Probe(const std::string& address, size_t send_bytes, absl::Time deadline);

  // The data-connection key the daemon at `address`, which must be certified as `node`, issues to
  // this daemon for its data endpoint `own_data_address` (DataKey RPC).
  absl::StatusOr<std::string> DataKey(const std::string& address, const std::string& node,
                                      const std::string& own_data_address, absl::Time deadline);

  // Exchanges connection data with the daemon at `address`, which must be certified as `node`
  // (ConnectPair RPC): sends `data` (this daemon's, at `own_data_address`, for it) with `proof`,
  // and returns the peer's data for this daemon and its proof, which the caller checks. Waits for
  // a connection that is not ready yet, until `deadline`.
  struct PairData {
    std::string data;
    std::string proof;
  };
  absl::StatusOr<PairData> ConnectPair(const std::string& address, const std::string& node,
                                       uint64_t comm_tag, const std::string& own_node,
                                       const std::string& own_data_address, const std::string& data,
                                       const std::string& proof, absl::Time deadline);

  // Cancels the probes and forwarded joins in flight and fails later ones at once: a daemon that
  // shuts down waits neither for probes of peers that may be gone nor for ranks that may never
  // join. A join stopped this way fails with Unavailable.
  void Stop();

 private:
  // The cached stub of the peer at `address`, or with `fresh` a new one (a new channel, which
  // dials at once) that replaces it; calls in flight keep theirs.
  std::shared_ptr<v1::Peer::Stub> StubFor(const std::string& address, bool fresh = false);

  const std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  const bool certified_peers_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<v1::Peer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  // Registers a call's context so that Stop can cancel it; false once stopped.
  bool Track(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  void Untrack(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);

  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);  // probes, joins
};

// Conversions between the plan and its wire form.
v1::Plan PlanToProto(const Plan& plan);
Plan PlanFromProto(const v1::Plan& proto);
v1::Member MemberToProto(const Member& member);
Member MemberFromProto(const v1::Member& proto);
// The notice's fields of an abort request (comm_tag, from_node and proof aside); the code is
// taken as it is (the service refuses OK).
void AbortNoticeToProto(const AbortNotice& notice, v1::AbortRequest& request);
AbortNotice AbortNoticeFromProto(const v1::AbortRequest& request);

}  // namespace baton::daemon
