#pragma once

// The daemon's core, apart from gRPC: sessions, communicator formation, and operations. The gRPC
// services translate requests into calls here and statuses back.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/comm_id.h"
#include "daemon/channel_server.h"
#include "daemon/collective_call.h"
#include "daemon/communicator_registry.h"
#include "daemon/config.h"
#include "daemon/link_monitor.h"
#include "daemon/peer_client.h"
#include "daemon/peer_directory.h"
#include "daemon/plan.h"
#include "daemon/rendezvous.h"
#include "daemon/session_registry.h"
#include "daemon/stall_watch.h"
#include "device/device.h"
#include "device/operation_device.h"
#include "topology/graph.h"
#include "transport/auth/handshake.h"
#include "transport/transport.h"

namespace baton::daemon {

// A parsed communicator id: "<root peer address>/<32 hex digit secret>".
struct CommId {
  std::string root_address;
  std::string secret;
};
// The longest abort reason sent to or accepted from other daemons.
inline constexpr size_t kMaxAbortMessage = 1024;

// InvalidArgument unless `text` is an id (common/comm_id.h: printable ASCII, at most
// kMaxCommIdBytes, a secret of 32 hex digits); the secret comes back in canonical form.
absl::StatusOr<CommId> ParseCommId(const std::string& text);

// InvalidArgument unless 1 <= world_size <= max_world_size and rank is one of its ranks.
absl::Status CheckWorld(int world_size, int rank, int64_t max_world_size);

// This node's hardware, as discovered at start or loaded from a recorded file.
struct NodeTopology {
  topology::Graph graph;
  std::string source;  // "discovered" or "file:<path>"
  std::string note;    // e.g. why no GPU was found; empty if nothing to say
};

struct JoinResult {
  uint64_t comm_tag = 0;
  int daemon_count = 0;
  int local_ranks = 0;
};

// One link to a peer daemon as operators see it: data-plane counters and probe results.
struct LinkView {
  Member peer;                       // node_name and data_address are empty until learnt
  LinkTraffic traffic;               // zeros until data flowed
  std::optional<LinkHealth> health;  // absent until the peer is probed
};

class Node {
 public:
  // Picks the transport that carries this daemon's traffic to `peer` (the daemon's
  // RoutingEndpoint::Select among its transports); an error names the peer and what it offers.
  using TransportSelector = std::function<absl::Status(const Member& peer)>;

  // `self` is how other daemons reach this one. `endpoint` must outlive the node.
  // `observer` (may be null) is told about every completed operation and must outlive the node.
  // `select` (may be empty: every peer on `endpoint` as it is) runs for every other daemon of a
  // communicator's plan before the communicator forms; its error fails the join.
  // `credentials` are those of the peer API, which the node dials other daemons with.
  // `device` (null: this node has no GPU) maps the sessions' device memory and runs the
  // kernels of operations on it.
  Node(const Config& config, Member self, transport::Endpoint* endpoint, OpObserver* observer,
       NodeTopology topology, const PeerTlsCredentials& credentials,
       TransportSelector select = nullptr, std::unique_ptr<device::Device> device = nullptr);
  // The node's GPU device, or null.
  device::Device* device() const { return device_.get(); }

  const NodeTopology& topology() const { return topology_; }

  const Member& self() const { return self_; }
  SessionRegistry& sessions() { return sessions_; }
  CommunicatorRegistry& communicators() { return communicators_; }
  transport::Endpoint* endpoint() const { return endpoint_; }

  // For the data connections' handshake (daemon/data_keys.h): the key the daemon whose data
  // endpoint is `data_address` issues to this one, and which node holds that address (empty if
  // no plan or probe named it).
  absl::StatusOr<transport::HandshakeKey> FetchDataKey(const std::string& data_address,
                                                       absl::Time deadline);
  std::string HolderOf(const std::string& data_address) const;

  // Client API.
  // A new communicator id rooted here, for session `session_id` (NotFound if unknown), counted
  // against its uid until the communicator forms (Rendezvous::CreateSecret's limits).
  absl::StatusOr<std::string> CreateCommId(uint64_t session_id);
  // Joins rank `rank` of the communicator `comm_id` for the session, which holds the rank until
  // Destroy or its end: ResourceExhausted past SessionLimits' max_ranks limits.
  absl::StatusOr<JoinResult> Join(uint64_t session_id, const std::string& comm_id, int world_size,
                                  int rank, absl::Time deadline);
  // Detaches the session's ranks from the communicator. The other ranks' collectives from each
  // such rank's next one on fail at once on every daemon with FailedPrecondition naming the rank
  // (Communicator::FailFrom): it will never take part in them. Earlier ones, and sends and
  // receives, go on.
  absl::Status Destroy(uint64_t session_id, uint64_t comm_tag, int rank);
  // Runs a rank's operation. A collective refused here (its arguments, its buffers, its stream's
  // event not reached by the deadline) fails with its own error and, unless the rank is alone in
  // its communicator, fails that collective and every later one on every daemon with Aborted
  // naming the rank and that error (Communicator::FailFrom), so that the other ranks, which would
  // wait for its part, fail at once; the collectives before it go on.
  absl::StatusOr<std::string> RunCollective(const CollectiveCall& call);
  // Serves the submission channel in the session's buffer `buffer_id` for rank `rank` of a
  // communicator, which the session must have attached (PermissionDenied otherwise), replacing
  // any earlier channel of that rank.
  absl::Status OpenChannel(uint64_t session_id, uint64_t comm_tag, int rank, uint64_t buffer_id);
  // Tears down everything a session owned (its process went away or closed it).
  void EndSession(uint64_t session_id);
  // The tuner's prediction for a collective of `count` elements of `data_type` (counted as
  // CollectiveCall::count) on a communicator the session has a rank in.
  absl::StatusOr<std::vector<collective::AlgorithmCost>> Explain(uint64_t session_id,
                                                                 uint64_t comm_tag,
                                                                 collective::Collective kind,
                                                                 const std::string& data_type,
                                                                 uint64_t count);

  // The node arena of communicator `comm_tag` for `rank`, which `session_id` must hold
  // (Communicator::OpenArena).
  absl::StatusOr<Communicator::Arena> OpenArena(uint64_t session_id, uint64_t comm_tag, int rank);
  // A rank's Abort(reason): fails the communicator's pending and future operations on every
  // daemon with Status(code, "communicator aborted by rank R: reason"). PermissionDenied unless
  // the session has `rank` attached; NotFound for an unknown communicator. Idempotent: only the
  // first reason is kept. With `from_next_operation` the communicator fails only from the rank's
  // next collective on (Communicator::FailFrom): its call was refused before it reached here.
  absl::Status AbortCommunicator(uint64_t session_id, uint64_t comm_tag, int rank,
                                 const std::string& reason,
                                 absl::StatusCode code = absl::StatusCode::kAborted,
                                 bool from_next_operation = false);

  // Peer API.
  absl::StatusOr<Plan> JoinRank(const std::string& secret, int world_size, int rank,
                                const Member& member, absl::Time deadline);
  // Another daemon's abort notice: applied only from a daemon of the communicator's plan that
  // proves it holds the communicator's secret (daemon/comm_proof.h), PermissionDenied otherwise.
  // OK for a communicator this daemon does not have (any more). With `from_operation` the
  // communicator fails only from that collective on (Communicator::FailFrom); with `departed`,
  // receives from that rank of messages it never sent fail at once.
  absl::Status AbortFromPeer(uint64_t comm_tag, const AbortNotice& notice,
                             const std::string& from_node, const std::string& proof);
  // Another daemon's connection data for this one (Peer.ConnectPair; see ConnectPeers): taken
  // only from the daemon of the communicator's plan at `from_data_address`, on node `from_node`,
  // with the proof that it holds the communicator's secret and made `data` for this daemon
  // (PermissionDenied otherwise). Waits until `deadline` (at most kMaxConnectPairWait) for the
  // communicator to form here. Connects this daemon's endpoint for that peer with `data` and
  // returns its own data for the peer, with its proof.
  struct PairData {
    std::string data;
    std::string proof;
  };
  static constexpr size_t kMaxConnectionDataBytes = 4096;
  static constexpr absl::Duration kMaxConnectPairWait = absl::Seconds(60);
  absl::StatusOr<PairData> ConnectPairFromPeer(uint64_t comm_tag, const std::string& from_node,
                                               const std::string& from_data_address,
                                               const std::string& data, const std::string& proof,
                                               absl::Time deadline);

  // The peer daemons known now (communicator plans, probe_peers, and those still lingering;
  // daemon/peer_directory.h), by peer address.
  std::vector<Member> Peers();
  // Every known peer's link, by peer address.
  std::vector<LinkView> Links();
  // Starts the background link probes (config probe_interval); call once the peer API serves.
  // Data-plane messages refused because their sender is not in their communicator's plan
  // (transport::Endpoint::Restrict), over every link.
  uint64_t RefusedMessages() const;
  void StartLinkMonitor() { monitor_.Start(); }
  // Runs one probe round now (tests and `baton links --probe`).
  void ProbeLinksNow() { monitor_.ProbeOnce(); }
  // Ends link probing at once, probes in flight included (shutdown).
  void StopLinkMonitor() {
    monitor_.Stop();
    peers_.Stop();
  }
  // Ranks of local processes in this daemon's communicators.
  int LocalRanks() const;
  // Ranks that submit through a shared-memory channel (the others use the Collective RPC).
  int SubmissionChannels();

  // Collectives completed on this daemon since it started.
  // Through the daemon and in node arenas.
  uint64_t collectives_completed() const;

  // Fails every communicator (shutdown), telling peers, and every join waiting here: those of
  // communicators rooted here and those forwarded to other roots.
  void AbortAll(const absl::Status& reason);
  // Stops serving every submission channel, after the operation each is running (failed by
  // AbortAll) has published its result (shutdown).
  void CloseAllChannels();

 private:
  // Join, once the session holds the rank.
  absl::StatusOr<JoinResult> JoinHeld(uint64_t session_id, const CommId& id, int world_size,
                                      int rank, absl::Time deadline);
  // Stops the channels that match (outside the lock: stopping joins their threads).
  void CloseChannels(const std::function<bool(const ChannelServer&)>& match);

  // The root's finishing touches to a complete plan (Rendezvous::PlanFinisher): a ring order
  // that follows the daemons' locality labels, and the measured link model for the tuner.
  void FinishPlan(Plan& plan);

  // CommunicatorOptions::explain_failure for `plan`: a timeout or lost link is prefixed with the
  // daemons that are not responding: this one, when it did not run during the operation
  // (StallWatch), and each other daemon of the plan that does not answer a probe within
  // kSuspectProbeTimeout (probed at once, in parallel, at most kMaxSuspectProbes of them).
  static constexpr absl::Duration kSuspectProbeTimeout = absl::Seconds(1);
  static constexpr size_t kMaxSuspectProbes = 64;
  absl::Status ExplainFailure(const Plan& plan, const absl::Status& failure, absl::Time started);

  const Config config_;
  const Member self_;
  transport::Endpoint* const endpoint_;
  const TransportSelector select_;
  OpObserver* const observer_;
  const NodeTopology topology_;
  Rendezvous rendezvous_;
  const std::unique_ptr<device::Device> device_;  // before sessions_, which maps through it
  SessionRegistry sessions_;
  // The algorithms' scratch, registered with the data plane once per buffer and shared by every
  // communicator (before communicators_, whose operations take from it); idle buffers are kept
  // up to this many bytes.
  static constexpr size_t kScratchKeepBytes = size_t{64} << 20;
  collective::ScratchPool scratch_;
  // The staging buffers' registrations with the data plane, made by operation_devices_'s pinned
  // pool when it makes a buffer (before it, which releases them).
  collective::RegionSet staging_regions_;
  // Pinned host memory that staged operations copy through, kept for reuse up to this many bytes
  // (registering costs about a copy of the bytes; every device of the node shares it).
  static constexpr size_t kStagingKeepBytes = size_t{1} << 30;
  // How operations reach each GPU's memory (kernels, copies, staging memory), made on first use;
  // null without a device.
  const std::unique_ptr<device::OperationDevices> operation_devices_;
  // The OperationDevice of GPU `ordinal`; FailedPrecondition without a device.
  absl::StatusOr<const device::OperationDevice*> OperationDeviceFor(int ordinal);
  // The operation `call` asks for on a communicator of `world` ranks, with its buffers resolved
  // and pinned; InvalidArgument (or the session's error) for a call that cannot run.
  absl::StatusOr<OpRequest> RequestOf(const CollectiveCall& call, int world);
  // Waits until `event` (recorded by rank `rank`'s stream) is done; DeadlineExceeded naming the
  // rank at `deadline`.
  static absl::Status WaitForEvent(device::Event& event, absl::Time deadline, int rank);
  PeerClient peers_;
  std::atomic<uint64_t> collectives_completed_{0};
  PeerDirectory directory_;
  // The agreed measured times of the last communicator per Plan::TunerKey, at most
  // kRememberedTunerTables keys (the least recently updated goes): a new communicator whose
  // root finds its key starts from them. Before communicators_, whose exchanges write here.
  static constexpr size_t kRememberedTunerTables = 64;
  struct TunerTable {
    uint64_t updated = 0;  // tuner_updates_ when last written
    std::vector<int64_t> agreed;
  };
  void RememberMeasured(const std::string& key, std::vector<int64_t> agreed)
      ABSL_LOCKS_EXCLUDED(tuner_mu_);
  absl::Mutex tuner_mu_;
  uint64_t tuner_updates_ ABSL_GUARDED_BY(tuner_mu_) = 0;
  absl::flat_hash_map<std::string, TunerTable> tuner_tables_ ABSL_GUARDED_BY(tuner_mu_);
  StallWatch stalls_;  // before communicators_, whose failures it explains
  CommunicatorRegistry communicators_;
  // Abort notices for communicators this daemon has not formed yet (its ranks' joins are still
  // being answered), checked against the plan once it forms; bounded and short-lived.
  struct EarlyAbort {
    uint64_t comm_tag = 0;
    absl::Status reason;
    std::string from_node;
    std::string proof;
    absl::Time received;
  };
  static constexpr size_t kMaxEarlyAborts = 256;
  static constexpr absl::Duration kEarlyTtl = absl::Seconds(60);
  absl::Status CheckAbortProof(const Plan& plan, const AbortNotice& notice,
                               const std::string& from_node, const std::string& proof) const;
  void ApplyEarlyAborts(Communicator& comm);
  absl::Mutex early_mu_;
  std::vector<EarlyAbort> early_aborts_ ABSL_GUARDED_BY(early_mu_);
  // Connection data (transport::Endpoint::ConnectionData) for the data-plane links of a
  // communicator that just formed here: for every other daemon of its plan whose link has data
  // to exchange, once per communicator (the first local rank's join does it, the others wait
  // for it until their deadline), a ConnectPair call that hands the peer ours and connects our
  // endpoint with its answer. Each daemon of a pair calls the other, so that when its own call
  // returns, both ends are connected. Errors name the peer's node.
  absl::Status ConnectPeers(const Communicator& comm, absl::Time deadline);
  absl::Status ConnectPeer(const Plan& plan, const Member& peer, absl::Time deadline);
  // Tells ConnectPairFromPeer calls waiting for a communicator that one formed.
  void NoteFormed();
  struct PairExchange {
    bool done = false;
    absl::Status status;
  };
  absl::Mutex connect_mu_;
  uint64_t formed_ ABSL_GUARDED_BY(connect_mu_) = 0;  // communicators formed so far
  // Per communicator: its exchange, once begun; forgotten with the communicator.
  absl::flat_hash_map<uint64_t, std::shared_ptr<PairExchange>> exchanges_
      ABSL_GUARDED_BY(connect_mu_);
  absl::Mutex channels_mu_;
  // Destroyed before the communicators and sessions their threads use.
  std::vector<std::unique_ptr<ChannelServer>> channels_ ABSL_GUARDED_BY(channels_mu_);
  LinkMonitor monitor_;  // last: its thread uses everything above
};

}  // namespace baton::daemon
