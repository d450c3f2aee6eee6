#pragma once

// One communicator as this daemon sees it: its plan, the local ranks attached to it, and the
// executor that runs their operations in submission order (the last local rank to submit an
// operation runs it in its own thread when no earlier one is pending). Each operation is
// hierarchical: the local ranks' buffers are reduced in memory, one node's worth of data crosses
// the network, and the result is written back to every local rank.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "collective/double_binary_tree.h"
#include "collective/op_context.h"
#include "collective/tuner.h"
#include "daemon/plan.h"
#include "transport/piggyback_endpoint.h"
#include "transport/transport.h"

namespace baton::daemon {

// One local rank's part of an operation. `pins` keep its buffers mapped until it completes.
// Buffer sizes follow the client API (<baton/baton.h>): `count` elements of send and recv for
// all_reduce, broadcast and reduce; count * world_size of send and count of recv for
// reduce_scatter; the reverse for all_gather; count * world_size of both for all_to_all. A buffer
// the operation does not use on this rank may be null (broadcast's send off the root, reduce's
// recv off the root, both for barrier).
struct OpRequest {
  collective::Collective kind = collective::Collective::kAllReduce;
  collective::DataType type = collective::DataType::kFloat32;
  collective::ReduceOp op = collective::ReduceOp::kSum;
  size_t count = 0;
  int root = 0;
  std::optional<collective::Algorithm> algorithm;  // the caller's choice, if any
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  std::vector<std::shared_ptr<void>> pins;
};

// What an operation cost, reported once it completes (successfully or not).
struct OpRecord {
  collective::Collective kind = collective::Collective::kAllReduce;
  std::string algorithm;  // an algorithm's name or "local"; empty if it failed before choosing
  absl::Duration total;   // from the last local rank's submission to completion
  bool ok = false;
  absl::Duration transport;  // of `total`, blocked on sends and receives to other daemons
  absl::Duration reduce;     // of `total`, in reduction kernels
};

// Receives every completed operation; must be thread-safe (executors of different communicators
// call it concurrently).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void OnOperation(const OpRecord& record) = 0;
};

struct CommunicatorOptions {
  absl::Duration op_timeout = absl::Seconds(60);
  size_t chunk_bytes = size_t{1} << 20;
  // Incremented for every completed operation (daemon-wide counter); may be null.
  std::atomic<uint64_t>* completed_total = nullptr;
  // Told about every operation; may be null.
  OpObserver* observer = nullptr;
  // Let the all_reduce algorithm follow the times the daemons measured, not only the model
  // (collective::MeasuredTimes); every daemon of a communicator must use the same setting.
  bool learn_algorithms = true;
  // Told the agreed measured times (collective::MeasuredTimes::Agreed) after every exchange, so
  // that a later communicator of the same daemons can start from them; may be empty.
  std::function<void(std::vector<int64_t>)> on_measured;
};

// The daemons (plan positions) that daemon `self` of `size` sends its operations' signatures to
// and receives them from: one cycle through all daemons, so that if any two disagree, some
// neighbouring pair does. With a power-of-two number of daemons (4 or more) it is the reflected
// Gray code order, in which neighbours differ in one bit of their position: each daemon's next is
// a partner of the pairwise all-reduces (doubling, halving-doubling), so the signature rides with
// the operation's first message for half of the daemons, and the others' arrives on a connection
// the operation reads anyway. Otherwise the ring order.
struct CheckNeighbours {
  int next = 0;
  int prev = 0;
};
CheckNeighbours SignatureCheckNeighbours(int self, int size);

class Communicator {
 public:
  // Called (without locks held) when this daemon aborts the communicator because of its own
  // failure, so the caller can tell the other daemons in the plan.
  using AbortNotifier = std::function<void(const Plan& plan, const absl::Status& reason)>;

  // `self` is this daemon's index in plan.daemons. `endpoint` must outlive the communicator.
  Communicator(Plan plan, int self, transport::Endpoint* endpoint, CommunicatorOptions options,
               AbortNotifier notify_abort);
  ~Communicator();  // aborts pending operations and joins the executor
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Plan& plan() const { return plan_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }

  // Binds local rank `rank` to a client session. InvalidArgument if the plan does not host the
  // rank here; AlreadyExists if it is attached.
  absl::Status AttachRank(int rank, uint64_t session_id);
  // Unbinds a rank; returns true when no rank remains attached.
  bool DetachRank(int rank);
  // Unbinds every rank of a session; returns the ranks it held.
  std::vector<int> DetachSession(uint64_t session_id);
  // True when no rank is attached.
  bool Empty() const;
  // OK when `rank` is attached by `session_id`, else PermissionDenied.
  absl::Status CheckAttached(int rank, uint64_t session_id) const;
  int self() const { return self_; }

  // Runs rank's next operation and waits for it until `deadline`. Returns the algorithm that ran.
  // PermissionDenied when the rank is not attached by `session_id`; the abort reason once the
  // communicator has failed; FailedPrecondition when local ranks disagree on the operation. A
  // failed or timed-out operation aborts the communicator on every daemon.
  absl::StatusOr<std::string> Submit(int rank, uint64_t session_id, OpRequest request,
                                     absl::Time deadline);

  // Fails pending and future operations with `reason`. With notify_peers, the notifier is called
  // so other daemons abort too. Only the first reason is kept.
  void Abort(const absl::Status& reason, bool notify_peers);

  // The tuner's prediction for `kind` on a buffer of `bytes` across this communicator's daemons,
  // cheapest first (collective/tuner.h); empty when it has a single daemon.
  std::vector<collective::AlgorithmCost> Predict(collective::Collective kind, size_t bytes) const;

  // "active" or "aborted: <reason>".
  std::string State() const;
  uint64_t ops_completed() const;

 private:
  struct Slot {
    std::vector<std::optional<OpRequest>> parts;  // by local index
    int arrived = 0;
    int collected = 0;
    bool done = false;
    absl::Status result;
    std::string algorithm;
  };

  absl::Status CheckAttachedLocked(int index, int rank, uint64_t session_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RunExecutor();
  // True when operation next_to_run_ has all its parts and no operation is running.
  bool NextIsReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs operation next_to_run_ in the calling thread (releasing mu_ meanwhile) and completes its
  // slot. Requires NextIsReady().
  void RunNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one operation; sets `algorithm_name` once chosen (so failures report it too).
  absl::StatusOr<std::string> Execute(uint64_t seq, std::vector<OpRequest>& parts,
                                      collective::OpStats& stats, std::string& algorithm_name);
  // The algorithm across daemons: the caller's choice, else the tuner's.
  collective::Algorithm ChooseAlgorithm(const OpRequest& request);
  // Every kMeasurementExchangeEvery-th operation, before it runs, the daemons sum the all_reduce
  // times each measured since the last exchange and add them to the table every choice reads.
  static constexpr uint64_t kMeasurementExchangeEvery = 64;
  absl::Status ExchangeMeasurements(uint64_t seq);
  // Inter-daemon steps of each collective on the already locally combined buffers.
  absl::Status AllReduceAcross(const collective::OpContext& ctx, collective::Algorithm algorithm,
                               std::byte* data, size_t count, collective::DataType type,
                               collective::ReduceOp op) const;
  absl::Status ReduceScatterAcross(const collective::OpContext& ctx, std::vector<OpRequest>& parts);
  absl::Status AllGatherAcross(const collective::OpContext& ctx, std::vector<OpRequest>& parts);
  absl::Status AllToAllAcross(const collective::OpContext& ctx, std::vector<OpRequest>& parts);
  collective::Ring RingOfDaemons() const;
  collective::Participants DaemonParticipants() const;
  // The daemon index and local index hosting `rank`.
  std::pair<int, int> Locate(int rank) const;
  // True when every daemon hosts the same number of ranks, daemon i ranks [i*k, (i+1)*k): then a
  // daemon's ranks' blocks form exactly its segment of an even split.
  bool BlockRegular() const;
  // Operations whose daemon-side scratch would grow with their size (reduce-scatter, reduce off
  // the root's daemon, all-to-all) run in slabs: pieces of `length` units of their sliced
  // dimension, each needing `unit_bytes` of scratch per unit, at most kSlabChunks chunks of
  // scratch per slab. Every daemon computes the same slabs (the chunk size comes from the plan).
  static constexpr size_t kSlabChunks = 8;
  static constexpr size_t kMaxSlabs = 65000;
  size_t SlabLength(size_t length, size_t unit_bytes) const;
  // Slab k's context: its own range of tag steps (collective::OpContext::first_step).
  static collective::OpContext SlabContext(const collective::OpContext& ctx, size_t slab);
  // The operation's signature exchange with the ring neighbours, overlapped with the operation:
  // StartPeerCheck posts the receive of the previous daemon's signature and gives this daemon's
  // to `piggyback`, the operation's endpoint, which sends it with the operation's first message
  // to the next daemon, or alone before the operation first waits; FinishPeerCheck, after the
  // operation (whose outcome it is given), makes sure it went, waits for the previous one's and
  // returns FailedPrecondition describing both sides if they differ. A disagreement also aborts
  // the communicator's transport the moment it arrives, so a running operation stops.
  struct PeerCheck;
  absl::Status StartPeerCheck(uint64_t seq, const OpRequest& mine,
                              transport::PiggybackEndpoint& piggyback, PeerCheck& check) const;
  absl::Status FinishPeerCheck(uint64_t seq, transport::PiggybackEndpoint& piggyback,
                               PeerCheck& check, const absl::Status& outcome) const;
  // Runs an operation whose local ranks agree (Execute's work after the checks) over `endpoint`.
  absl::StatusOr<std::string> RunOperation(uint64_t seq, std::vector<OpRequest>& parts,
                                           transport::Endpoint* endpoint,
                                           collective::OpStats& stats, std::string& algorithm_name);
  // A transport error of the signature exchange, annotated with the operation and this node.
  absl::Status PeerCheckError(uint64_t seq, const absl::Status& status) const;
  // Rewrites data addresses in a transport error into "node (address)" for operators.
  absl::Status NamePeers(const absl::Status& status) const;
  int LocalIndex(int rank) const;

  const Plan plan_;
  const int self_;
  transport::Endpoint* const endpoint_;
  const CommunicatorOptions options_;
  const AbortNotifier notify_abort_;
  std::vector<int> local_ranks_;                    // ascending, from the plan
  std::array<collective::TreeNode, 2> tree_links_;  // this daemon's links in the two trees
  const CheckNeighbours check_neighbours_;          // where the signatures go and come from
  // The running operation updates it; Explain reads it.
  mutable absl::Mutex measured_mu_;
  collective::MeasuredTimes measured_ ABSL_GUARDED_BY(measured_mu_);

  mutable absl::Mutex mu_;
  std::vector<std::optional<uint64_t>> sessions_ ABSL_GUARDED_BY(mu_);  // by local index
  std::vector<uint64_t> next_seq_ ABSL_GUARDED_BY(mu_);                 // by local index
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t next_to_run_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // an operation runs (executor or inline)
  uint64_t ops_completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread executor_;
};

}  // namespace baton::daemon
