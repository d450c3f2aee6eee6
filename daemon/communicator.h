#pragma once

// One communicator as this daemon sees it: its plan, the local ranks attached to it, the sequence
// of their collectives (each runs once every local rank has submitted it, in submission order:
// the last local rank to submit runs it in its own thread when no earlier one is pending, else
// the executor thread does), and its abort. What an operation does is collective/'s: the
// OperationRunner runs each (signature check, algorithm choice, the registry's schedule), and
// PointToPoint moves sends and receives, which are not sequenced with the collectives.

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
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/arena_owner.h"
#include "collective/device_staging.h"
#include "collective/node_arena.h"
#include "collective/op_spec.h"
#include "collective/operation_runner.h"
#include "collective/point_to_point.h"
#include "collective/tuner.h"
#include "common/shared_memory.h"
#include "daemon/comm_proof.h"
#include "daemon/plan.h"
#include "device/operation_device.h"
#include "transport/transport.h"

namespace baton::daemon {

// One local rank's part of an operation: its call and its buffers, sized as OpSpec::SendElements
// and RecvElements say (a buffer the operation does not use on this rank may be null). `pins`
// keep the buffers mapped until it completes. `device` is set when the buffers are device memory
// (every local rank of one operation must agree).
struct OpRequest {
  collective::OpSpec spec;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  // The buffers' registrations with the data plane (null where not registered), alive while
  // `pins` are held.
  const transport::MemoryRegion* send_region = nullptr;
  const transport::MemoryRegion* recv_region = nullptr;
  std::vector<std::shared_ptr<void>> pins;
  const device::OperationDevice* device = nullptr;
  // spec.node_part: local rank 0's part of a collective whose local phase the node arena ran; it
  // stands for every local rank (its buffer holds the node's part, in place), and the other
  // local ranks do not submit the operation.
};

// What an operation cost, reported once it completes (successfully or not).
struct OpRecord {
  collective::Collective kind = collective::Collective::kAllReduce;
  std::string algorithm;  // an algorithm's name or "local"; empty if it failed before choosing
  absl::Duration total;   // from the last local rank's submission to completion
  bool ok = false;
  absl::Duration transport;  // of `total`, blocked on sends and receives to other daemons
  absl::Duration reduce;     // of `total`, in reduction kernels
  // Copied between device and host memory to stage device buffers (collective::OpStats).
  uint64_t staged_bytes = 0;
  // Moved from memory not registered with the data plane (collective::OpStats).
  uint64_t unregistered_bytes = 0;
};

// A node arena's counters (collective/node_arena.h), indexed by collective::Collective.
using ArenaCounts =
    std::array<collective::NodeArena::Counters, collective::NodeArena::kCountedKinds>;
ArenaCounts& operator+=(ArenaCounts& sum, const ArenaCounts& more);

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
  // Adds to a failure of this daemon's own (not an abort it was told of) what the daemon can
  // find out about its cause, e.g. which daemon of the plan has stopped answering: most ranks of
  // a ring that waits for a stopped daemon time out waiting for a healthy neighbour. `started`
  // is when the failed operation began. Called without locks held; may take a moment (it may
  // probe). Null: failures are reported as they are.
  std::function<absl::Status(const absl::Status& failure, absl::Time started)> explain_failure;
  // The daemon's scratch memory for the algorithms, registered with the same endpoint; null:
  // the communicator keeps its own.
  collective::ScratchPool* scratch = nullptr;
  // The registrations of the daemon's staging memory (collective::RunnerOptions); may be null.
  const collective::RegionLookup* staging_regions = nullptr;
};

class Communicator {
 public:
  // Called (without locks held) when this daemon aborts the communicator because of its own
  // failure, so the caller can tell the other daemons in the plan (what it says:
  // daemon/comm_proof.h).
  using AbortNotifier = std::function<void(const Plan& plan, const AbortNotice& notice)>;

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
  // True when no rank is attached and every local rank has attached once (or the communicator has
  // failed): then no local rank can use it any more.
  bool Empty() const;
  // Why it failed, when it failed before every local rank had attached once: a local rank whose
  // join is still being answered will attach after it is gone (CommunicatorRegistry keeps this).
  std::optional<absl::Status> FailedBeforeEveryRankAttached() const;
  // OK when `rank` is attached by `session_id`, else PermissionDenied.
  absl::Status CheckAttached(int rank, uint64_t session_id) const;
  int self() const { return self_; }

  // Runs rank's next operation and waits for it until `deadline`. Returns the algorithm that ran.
  // A collective takes the rank's next sequence number; a send or recv runs at once, matched in
  // order per pair of ranks. PermissionDenied when the rank is not attached by `session_id`; the
  // abort reason once the communicator has failed; FailedPrecondition when local ranks disagree
  // on the operation. A failed or timed-out operation aborts the communicator on every daemon.
  // A recv whose count differs from its send's fails with FailedPrecondition naming both counts,
  // and so does the send when its recv was waiting on this daemon; either way the communicator is
  // aborted with that error, which fails the sender's pending and later operations too (an eager
  // send that completed before the recv came returned OK: collective/point_to_point.h).
  absl::StatusOr<std::string> Submit(int rank, uint64_t session_id, OpRequest request,
                                     absl::Time deadline);

  // Fails pending and future operations with `reason`. With notify_peers, the notifier is called
  // so other daemons abort too. Only the first reason is kept.
  void Abort(const absl::Status& reason, bool notify_peers);

  // A rank will take no part in collective `seq` or any later one (it left, or its call was
  // refused): they fail with `reason` on every local rank, at once where they are pending and at
  // submission after, and never run here. Collectives before `seq` are untouched, and so are sends
  // and receives. Only an operation `seq` (or later) already running here, which waits for the
  // rank that will not come, aborts the communicator (its sends and receives with it: the
  // transport has no way to stop one operation alone). The earliest `seq` given stays. With
  // notify_peers the other daemons are told, with `seq`. Within a node arena,
  // the local ranks that wait for the rank there are not woken: their own deadline ends their
  // wait (RankLeft, for a rank that left, does wake them).
  // `departed`: a local rank left, having sent these messages; the other daemons are told even
  // when the communicator fails from an earlier collective already.
  void FailFrom(uint64_t seq, const absl::Status& reason, bool notify_peers,
                const std::optional<collective::Departure>& departed = std::nullopt);
  // FailFrom from local rank `rank`'s next collective: the one it has not submitted yet.
  void FailFromNextOf(int rank, const absl::Status& reason, bool notify_peers,
                      const std::optional<collective::Departure>& departed = std::nullopt);
  // Local rank `rank` left (destroyed its handle): FailFromNextOf, telling the other daemons what
  // it had sent, so that receives from it of messages it never sent fail at once everywhere
  // (PointToPoint::SourceLeft), and its peers in the node arena that wait for it at an operation
  // it never reached fail at once (ArenaOwner::MarkGone).
  void RankLeft(int rank, const absl::Status& reason);
  // Another daemon's rank left (its notice): receives from it of messages it never sent fail at
  // once. Ignored for a rank of this daemon.
  void RemoteRankLeft(const collective::Departure& departed, const absl::Status& reason);

  // The tuner's prediction for `kind` on a buffer of `bytes` across this communicator's daemons,
  // cheapest first (collective/tuner.h); empty when it has a single daemon.
  std::vector<collective::AlgorithmCost> Predict(collective::Collective kind, size_t bytes) const;

  // The node arena of `rank` (which `session_id` must hold; PermissionDenied otherwise): the
  // shared memory where the communicator's ranks meet for small operations without this daemon
  // (collective/node_arena.h), made on first use. FailedPrecondition unless every rank of the
  // communicator is on this node and there are at least two. Abort aborts the arena too.
  struct Arena {
    int fd = -1;  // a copy of the arena's descriptor, the caller's to close
    uint64_t bytes = 0;
    int rank = 0;  // the rank's place among the arena's ranks (its local index)
  };
  // Operations up to a slot run in the arena. 256 KiB: on one node with 4 ranks the arena beat
  // the daemon up to there (docs/node-arena.md, compare_allreduce.sh); 4 slots a rank.
  static constexpr size_t kArenaSlotBytes = size_t{256} << 10;
  absl::StatusOr<Arena> OpenArena(int rank, uint64_t session_id);

  // What the local ranks did in the node arena, by collective (NodeArena::counters; all zero
  // before the arena exists): operations, failures and bytes as the rank that counted most has
  // them (every rank counts every operation), busy and wait time as the mean of the ranks'. Read
  // without stopping the ranks: the daemon sees arena operations without a round trip.
  ArenaCounts ArenaCounters() const;

  // "active" or "aborted: <reason>".
  std::string State() const;
  // Operations completed, those of the node arena included.
  uint64_t ops_completed() const;

 private:
  struct Slot {
    std::vector<std::optional<OpRequest>> parts;  // by local index
    int expected = 0;  // the parts it runs with: every local rank's, or one node part
    int arrived = 0;
    int collected = 0;
    bool done = false;
    absl::Status result;
    std::string algorithm;
    absl::Time deadline = absl::InfiniteFuture();  // the earliest of the parts' call deadlines
    bool cut = false;  // failed by FailFrom before it ran: freed once its arrivals collected
  };

  // Whether every local rank has attached at least once.
  bool AllAttachedOnceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckAttachedLocked(int index, int rank, uint64_t session_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // OK when local rank `index` may submit a node part (OpSpec::node_part) of `spec` as
  // operation `seq`: local rank 0 of two or more, a collective with a local phase, and every
  // local rank at that operation with nothing submitted for it yet.
  absl::Status CheckNodePartLocked(int index, uint64_t seq, const collective::OpSpec& spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A send or receive of device memory, through host memory; adds the bytes it copied between
  // them to `staged_bytes`.
  absl::Status RunPointToPointStaged(int rank, const OpRequest& request, size_t bytes,
                                     absl::Time until, uint64_t& staged_bytes);
  // OK (an empty string) when every local rank passed the same kind of memory to operation
  // `seq`; else FailedPrecondition naming two ranks that differ.
  absl::StatusOr<std::string> MemoryOf(uint64_t seq, const std::vector<OpRequest>& requests) const;
  // A send or recv: it runs at once in the caller's thread, outside the collective sequence.
  absl::StatusOr<std::string> RunPointToPoint(int rank, const OpRequest& request,
                                              absl::Time deadline);
  // `failure` of an operation begun at `started`, explained (options.explain_failure); the
  // abort's reason instead when the communicator was aborted already, since the failure is then
  // that abort's consequence.
  absl::Status Explain(const absl::Status& failure, absl::Time started) ABSL_LOCKS_EXCLUDED(mu_);
  void RunExecutor();
  // True when operation next_to_run_ has all its parts and no operation is running.
  bool NextIsReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs operation next_to_run_ in the calling thread (releasing mu_ meanwhile) and completes its
  // slot. Requires NextIsReady().
  void RunNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int LocalIndex(int rank) const;

  const Plan plan_;
  const int self_;
  transport::Endpoint* const endpoint_;
  const CommunicatorOptions options_;
  const AbortNotifier notify_abort_;
  const std::vector<int> local_ranks_;  // ascending, from the plan
  collective::OperationRunner runner_;  // runs each collective once every local rank submitted it
  collective::PointToPoint point_to_point_;  // sends and receives

  mutable absl::Mutex mu_;
  std::vector<std::optional<uint64_t>> sessions_ ABSL_GUARDED_BY(mu_);  // by local index
  std::vector<bool> attached_once_ ABSL_GUARDED_BY(mu_);                // by local index
  std::vector<uint64_t> next_seq_ ABSL_GUARDED_BY(mu_);                 // by local index
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t next_to_run_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // an operation runs (executor or inline)
  uint64_t ops_completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  // FailFrom's operation and reason: collectives from there on fail without running.
  std::optional<std::pair<uint64_t, absl::Status>> fail_from_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Made by OpenArena. The daemon reads and writes it through arena_owner_ only, whose copy of
  // its shape the ranks cannot change.
  std::unique_ptr<SharedMemory> arena_ ABSL_GUARDED_BY(mu_);
  std::optional<collective::ArenaOwner> arena_owner_ ABSL_GUARDED_BY(mu_);

  std::thread executor_;
};

}  // namespace baton::daemon
