#pragma once

// Where the ranks of one communicator on one node meet for small operations without the daemon
// on the critical path (as MPI's vader and NCCL's shm transport do): shared memory that the
// daemon sets up, with a control block per rank and, per rank, two input slots and two result
// slots (operation k uses set k % 2, so a rank may write operation k + 1's input while slower
// peers still read operation k's). An operation is two rounds of flags at most:
//
//   all_reduce, up to kWholeReduceBytes: each rank writes its input and its signature, raises its
//     `arrived` to k, waits for every peer's, checks the signatures, and reduces all inputs
//     itself (one round);
//   all_reduce, larger: as above, then each rank reduces its 1/L of the elements into its result
//     slot, raises `reduced`, waits for every peer's and copies every rank's part out (a
//     reduce-scatter then all-gather in shared memory: two rounds), a slot at a time: beyond one
//     slot each slot's worth is an operation number of its own;
//   reduce_scatter: each rank writes its input and reduces its own block of everyone's (one
//     round), beyond a slot the same elements of every block a slot at a time;
//   broadcast: the root writes, everyone copies (one round); all_to_all: everyone writes all its
//     blocks, everyone copies its own block of each (one round); barrier: one round, no data.
//
// A collective a rank runs through the daemon instead still takes its number here
// (RecordDaemonCall), so that ranks whose calls differ never wait in different places.
//
// Waiting spins briefly (yielding the core between looks), then blocks on the arena's bell (a
// futex every raise rings when someone sleeps), in slices, so that ranks on a small machine do
// not starve each other. Calls that differ between ranks (the signatures of operation k) fail
// every rank with FailedPrecondition naming both; a rank that waits past its deadline aborts the
// arena naming the ranks it waited for; Abort (the daemon, when a rank dies or the communicator
// is aborted) fails every waiting and later operation with its reason.
//
// Trust: the ranks sharing an arena belong to one communicator (one job); each can spoil the
// others' results, as with any shared buffer, but nothing here reads outside the arena or waits
// past a deadline because of what is in it: sizes and counts come from the caller, the arena's
// shape is read once at Attach and used from the handle's own copy, and every field is read once
// before it is used (collective/node_arena_layout.h). The daemon's view is ArenaOwner
// (collective/arena_owner.h), which reads no size from the arena at all.
//
// The data path is the element-wise kernels (device/kernels.h) and memcpy on host memory;
// for device memory the same rounds would run with the device's kernels reading peers' mapped
// slots in the rank's stream (docs/node-arena.md).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "collective/op_spec.h"

namespace baton::collective {

namespace arena {
struct Header;
struct RankBlock;
}  // namespace arena

class NodeArena {
 public:
  static constexpr int kMaxRanks = 64;
  // all_reduce up to this many bytes: every rank reduces all inputs (one round of flags).
  static constexpr size_t kWholeReduceBytes = 4096;

  // The bytes an arena for `ranks` ranks with slots of `slot_bytes` needs.
  static size_t Bytes(int ranks, size_t slot_bytes);

  // Writes a fresh arena into `memory` (`size` bytes, zeroed by the caller or not): done once,
  // by whoever creates it (the daemon, through ArenaOwner), before any rank attaches.
  // `comm_ranks` (empty, or one per rank) are the local ranks' ranks in the communicator, which
  // errors name (empty: local rank i is rank i). InvalidArgument when the sizes do not fit.
  static absl::Status Initialize(void* memory, size_t size, int ranks, size_t slot_bytes,
                                 std::span<const int> comm_ranks = {});

  // Rank `rank`'s handle on an initialized arena of `size` bytes; InvalidArgument when the header
  // does not describe an arena of that size, or `rank` is not one of its ranks. The memory must
  // outlive the handle. One thread at a time per handle (operations of one rank are sequential).
  static absl::StatusOr<NodeArena> Attach(void* memory, size_t size, int rank);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // The operations. Buffers are host memory of count elements of `type` (send may equal recv);
  // count * size of type must fit a slot (InvalidArgument otherwise, before anything is shared),
  // except for AllReduce and ReduceScatter, which run a slot at a time.
  // Errors: FailedPrecondition when ranks called different operations, DeadlineExceeded (after
  // aborting the arena) at `deadline`, or the arena's abort reason.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         absl::Time deadline);
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         absl::Time deadline);
  // all_gather: `count` elements from each rank, recv holds ranks() * count (rank r's at r *
  // count); send may be recv's own block (in place).
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         absl::Time deadline);
  // reduce: recv (count elements, the root's only) = op over every rank's send.
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, absl::Time deadline);
  // reduce_scatter: send holds ranks() * count elements; recv (count) = op over every rank's
  // block `rank()`. Beyond a slot (ranks() blocks of count elements), a slot's worth of the same
  // elements of every block at a time.
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                             absl::Time deadline);
  // all_to_all: send holds ranks() blocks of `count` elements, block r for rank r; recv's block r
  // is rank r's block rank(). send may be recv (in place).
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        absl::Time deadline);
  absl::Status Barrier(absl::Time deadline);

  // Where a collective that may run either here or through the daemon runs (an all_reduce or
  // reduce_scatter too large for one slot, where the ranks reducing in parallel here race one
  // daemon thread): one
  // round in which every rank offers `spec` and rank 0's `in_arena` is everyone's answer. Takes
  // an operation number; the call then runs here (taking its own) or through the daemon (taking
  // none), and every rank calls FinishedRoute when it succeeded. FailedPrecondition, as for any
  // operation, when ranks' calls differ.
  struct RouteAgreement {
    bool in_arena = true;
    // Rank 0's only: how long the previous agreed call took, from the agreement until the
    // slowest rank finished it (unset unless every rank finished it).
    std::optional<absl::Duration> last_took;
  };
  absl::StatusOr<RouteAgreement> AgreeOnRoute(const OpSpec& spec, bool in_arena,
                                              absl::Time deadline);
  void FinishedRoute();

  // Operations that span nodes: the node's local ranks meet here, local rank 0 runs the
  // inter-node step through the daemon by calling `across` on a buffer in the arena holding the
  // node's part (in place: the result replaces it), and every local rank copies the result out.
  // A failure of `across` aborts the arena with its reason, so the other local ranks fail with
  // it; they wait for rank 0 until their deadline and no longer, whatever rank 0 does, and then
  // fail saying that rank 0 was still in the inter-node step (rank 0's own error says which
  // nodes the daemons waited for). Counted in counters()
  // as local_phases only (the daemon counts the operation). `across` receives null for a
  // barrier, and returns a short note for every local rank (the algorithm that ran between
  // nodes; up to kNoteBytes - 1 characters kept), which the operations return.
  using AcrossNodes = std::function<absl::StatusOr<std::string>(void* buffer)>;
  static constexpr size_t kNoteBytes = 32;
  // all_reduce: `across` gets the reduction of the node's inputs (their sum for kAvg: the
  // inter-node step averages over the world).
  absl::StatusOr<std::string> AllReduceAcross(const void* send, void* recv, size_t count,
                                              DataType type, ReduceOp op, absl::Time deadline,
                                              const AcrossNodes& across);
  // broadcast from global rank `root`, which is this rank when `is_root` (one local rank at most
  // says so; none when the root is on another node): `across` broadcasts the buffer, which holds
  // the root's data when it is on this node.
  absl::StatusOr<std::string> BroadcastAcross(const void* send, void* recv, size_t count,
                                              DataType type, int root, bool is_root,
                                              absl::Time deadline, const AcrossNodes& across);
  // reduce to global rank `root`, which is this rank when `is_root`: `across` gets the reduction
  // of the node's inputs (their sum for kAvg) and reduces it to the root's node.
  absl::StatusOr<std::string> ReduceAcross(const void* send, void* recv, size_t count,
                                           DataType type, ReduceOp op, int root, bool is_root,
                                           absl::Time deadline, const AcrossNodes& across);
  // all_gather of `count` elements from each of `world` ranks, this one `comm_rank`: `across` gets
  // world blocks with each local rank's at its rank and fills in the others; every local rank
  // copies all of them to recv. world * count elements must fit a slot.
  absl::StatusOr<std::string> AllGatherAcross(const void* send, void* recv, size_t count,
                                              DataType type, int comm_rank, int world,
                                              absl::Time deadline, const AcrossNodes& across);
  // reduce_scatter of world blocks of `count` elements, this rank `comm_rank`: `across` gets the
  // reduction of the node's inputs (their sum for kAvg) and leaves each local rank's result in
  // its block. world * count elements must fit a slot.
  absl::StatusOr<std::string> ReduceScatterAcross(const void* send, void* recv, size_t count,
                                                  DataType type, ReduceOp op, int comm_rank,
                                                  int world, absl::Time deadline,
                                                  const AcrossNodes& across);
  absl::StatusOr<std::string> BarrierAcross(absl::Time deadline, const AcrossNodes& across);

  // A collective this rank runs through the daemon instead (too large for a slot, one the arena
  // does not have, an algorithm asked for) still takes its operation number here, without
  // waiting for the peers to reach it: a peer that runs the same operation in the arena, because
  // its call differs, fails at once naming both calls instead of waiting for its deadline. Every
  // rank of the arena must record every collective it does not run here. It waits only, by
  // `deadline`, for the peers to reach the operation before it (Begin). The arena's abort reason
  // if it was aborted.
  absl::Status RecordDaemonCall(const OpSpec& spec, absl::Time deadline);

  // Fails every waiting and later operation of every rank with `reason` (not OK); the first
  // reason stays. Any rank may call it; the daemon calls ArenaOwner::Abort.
  void Abort(const absl::Status& reason);
  // OK, or the reason the arena was aborted.
  absl::Status aborted() const;

  // What rank `rank` has done with one collective, for the daemon's metrics (read without
  // stopping anyone). Kept for the collectives the arena has (those before kCountedKinds).
  struct Counters {
    uint64_t operations = 0;    // completed
    uint64_t failed = 0;        // failed after they began (not refused for their size)
    uint64_t bytes = 0;         // of the completed operations' buffers
    uint64_t busy_ns = 0;       // in operations, completed or failed
    uint64_t wait_ns = 0;       // of busy_ns, waiting for peers
    uint64_t local_phases = 0;  // of operations across nodes (AllReduceAcross...), completed

    Counters& operator+=(const Counters& other);
  };
  static constexpr int kCountedKinds = static_cast<int>(Collective::kBarrier) + 1;
  Counters counters(int rank, Collective collective) const;

 private:
  using Header = arena::Header;
  using RankBlock = arena::RankBlock;
  class OpTally;

  // The implementation, by responsibility: node_arena.cc (setup, attach, abort, counters),
  // collective/arena/rounds.cc (the rounds of flags every operation is made of),
  // collective/arena/collectives.cc (the operations within the node),
  // collective/arena/local_phase.cc (the operations across nodes) and
  // collective/arena/route_agreement.cc (where a call runs).

  NodeArena(std::byte* base, int rank, int ranks, size_t slot_bytes)
      : base_(base), rank_(rank), ranks_(ranks), slot_bytes_(slot_bytes) {}

  Header& header() const;
  RankBlock& block(int rank) const;
  std::byte* input(int rank, uint64_t op) const;
  std::byte* result(int rank, uint64_t op) const;
  // Aborts the arena with `reason` and returns the arena's reason: the first one written, or
  // `reason` itself if the abort word reads live again.
  absl::Status AbortWith(const absl::Status& reason);
  // Local rank `local` as errors name it: "rank 5 (local rank 1)".
  std::string Name(int local) const;

  // Publishes this rank's signature for the next operation and returns its number. Its slots
  // (signature, input, result, note: two of each, by the number's parity) last held the
  // operation before the previous one, which a peer may still be reading until it arrives at the
  // previous one: first waits for that (by `deadline`; at once unless the previous operation was
  // recorded without waiting, RecordDaemonCall). Errors as AwaitAll.
  absl::StatusOr<uint64_t> Begin(const Signature& signature, absl::Time deadline);
  // Raises this rank's `flag` (arrived or reduced) to `op` and rings the bell.
  void Raise(std::atomic<uint64_t> RankBlock::*flag, uint64_t op);
  // Waits until every rank's `flag` (or only rank `only`'s, if not -1) reached `op` (of
  // `signature`, described only in errors), looking for `spin` (default: $BATON_ARENA_SPIN_US)
  // before it blocks.
  absl::Status AwaitAll(std::atomic<uint64_t> RankBlock::*flag, uint64_t op,
                        const Signature& signature, absl::Time deadline, int only = -1,
                        std::optional<absl::Duration> spin = std::nullopt);
  // The local phase of an operation across nodes: one round in which `fill` writes this rank's
  // input slot; then local rank 0 lets `combine` write the node's part (`node_bytes`) into its
  // result slot from the inputs, runs `across` on it (on null when node_bytes is 0) and raises
  // `reduced`; the others wait for that. Every rank then lets `deliver` copy its result out of
  // that slot. An error of `combine` or `across` aborts the arena.
  absl::StatusOr<std::string> LocalPhase(
      const Signature& signature, absl::FunctionRef<void(std::byte* slot)> fill, size_t node_bytes,
      absl::Time deadline, absl::FunctionRef<absl::Status(uint64_t op, std::byte* buffer)> combine,
      const AcrossNodes& across, absl::FunctionRef<void(const std::byte* buffer)> deliver);
  // Rank 0's combine for the reducing collectives: `count` elements of every rank's input of
  // operation `op` reduced into `buffer` (summed for kAvg). Always OK: a combine for LocalPhase.
  absl::Status ReduceInputs(uint64_t op, std::byte* buffer, size_t count, DataType type,
                            ReduceOp reduce) const;
  // InvalidArgument unless `comm_rank` is a rank of a communicator of `world` ranks that has this
  // arena's ranks.
  absl::Status CheckCommRank(int comm_rank, int world) const;
  // One slot's worth of an all_reduce (count elements at most a slot) of `signature`'s type and
  // operation.
  absl::Status AllReduceChunk(const Signature& signature, const void* send, void* recv,
                              size_t count, absl::Time deadline, absl::Duration& waited);
  // FailedPrecondition (after aborting) unless every rank's signature of `op` equals this one's.
  absl::Status CheckSignatures(uint64_t op);
  // How many elements of each of `blocks` blocks one slot holds, for an operation that runs a
  // slot at a time; InvalidArgument when not one, or when the signature's count of `blocks`
  // blocks overflows.
  absl::StatusOr<size_t> SlotChunk(const Signature& signature, size_t blocks) const;
  // InvalidArgument unless `blocks` blocks of the signature's count fit a slot.
  absl::Status Fits(const Signature& signature, size_t blocks) const;
  // The start of every operation (the caller checked the size with Fits): the abort reason if
  // any; else publishes `signature`, copies `bytes` of `send` (if not null) into this
  // rank's input slot, raises `arrived`, waits for every rank and checks the signatures. Sets
  // `op` to the operation's number and adds the wait to `waited`.
  absl::Status OneRound(const Signature& signature, const void* send, size_t bytes,
                        absl::Time deadline, uint64_t& op, absl::Duration& waited);
  // The same, with `fill` writing this rank's input slot.
  absl::Status OneRoundWith(const Signature& signature,
                            absl::FunctionRef<void(std::byte* slot)> fill, absl::Time deadline,
                            uint64_t& op, absl::Duration& waited);

  std::byte* base_;
  int rank_;
  int ranks_;
  size_t slot_bytes_;
  std::array<int32_t, kMaxRanks> comm_ranks_{};  // read once at Attach
  uint64_t next_op_ = 0;                         // this rank's operations so far (the first is 1)
  // AgreeOnRoute's so far, and the last one's operation number and when it ended here (steady
  // clock).
  uint64_t agreements_ = 0;
  uint64_t agreed_op_ = 0;
  int64_t agreed_ns_ = 0;
};

// Aborts the arena in `memory` (`size` bytes) without being one of its ranks (a process that
// lost its daemon, for the local ranks it runs). Reads nothing from the arena.
void AbortArena(void* memory, size_t size, const absl::Status& reason);

}  // namespace baton::collective
