#include "collective/node_arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/kernels.h"
#include "collective/node_arena_layout.h"
#include "collective/op_spec.h"
#include "common/futex.h"
#include "common/spin.h"
#include "common/status_macros.h"

namespace baton::collective {

using arena::BlockOffset;
using arena::Header;
using arena::kMagic;
using arena::kMaxSlotBytes;
using arena::kVersion;
using arena::RankBlock;
using arena::ReadOnce;
using arena::ReadTally;
using arena::Shape;
using arena::SlotOffset;
using arena::TotalBytes;

namespace {

// How long a waiter looks (yielding its core between looks) before it blocks on the bell, unless
// $BATON_ARENA_SPIN_US says otherwise (docs/node-arena.md); for local rank 0's inter-node step,
// which takes a network round trip or more, $BATON_ARENA_ACROSS_SPIN_US.
constexpr absl::Duration kDefaultSpin = absl::Microseconds(20);
constexpr absl::Duration kDefaultAcrossSpin = absl::Microseconds(200);

absl::Duration SpinFromEnv(const char* name, absl::Duration fallback) {
  const char* env = std::getenv(name);
  int64_t us = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &us) || us < 0 || us > 1'000'000) return fallback;
  return absl::Microseconds(us);
}

absl::Duration SpinLimit() {
  static const absl::Duration limit = SpinFromEnv("BATON_ARENA_SPIN_US", kDefaultSpin);
  return limit;
}

absl::Duration AcrossSpinLimit() {
  static const absl::Duration limit = SpinFromEnv("BATON_ARENA_ACROSS_SPIN_US", kDefaultAcrossSpin);
  return limit;
}

// A blocked waiter wakes at least this often to look at the abort word and its deadline.
constexpr absl::Duration kSlice = absl::Milliseconds(50);

// An operation's fill of its input slot: `bytes` of `send` unless it is null.
auto CopyIn(const void* send, size_t bytes) {
  return [send, bytes](std::byte* slot) {
    if (send != nullptr && bytes > 0) std::memcpy(slot, send, bytes);
  };
}

// A local phase's delivery: `bytes` of the node's result from `from` to `recv` unless it is null.
auto CopyOut(void* recv, size_t from, size_t bytes) {
  return [recv, from, bytes](const std::byte* buffer) {
    if (recv != nullptr && bytes > 0) std::memcpy(recv, buffer + from, bytes);
  };
}

}  // namespace

// Counts one operation of the rank in its tally when it goes out of scope: failed unless Done.
class NodeArena::OpTally {
 public:
  OpTally(const NodeArena& arena, Collective collective)
      : tally_(arena.block(arena.rank_).tallies[static_cast<int>(collective)]),
        started_(absl::Now()) {}
  OpTally(const OpTally&) = delete;
  OpTally& operator=(const OpTally&) = delete;
  ~OpTally() {
    (done_ ? tally_.operations : tally_.failed).fetch_add(1, std::memory_order_relaxed);
    tally_.bytes.fetch_add(bytes_, std::memory_order_relaxed);
    tally_.busy_ns.fetch_add(Nanoseconds(absl::Now() - started_), std::memory_order_relaxed);
    tally_.wait_ns.fetch_add(Nanoseconds(waited), std::memory_order_relaxed);
  }

  void Done(size_t bytes) {
    done_ = true;
    bytes_ = bytes;
  }

  absl::Duration waited;  // the operation's waits for peers add up here

 private:
  static uint64_t Nanoseconds(absl::Duration d) {
    return static_cast<uint64_t>(std::max<int64_t>(absl::ToInt64Nanoseconds(d), 0));
  }

  RankBlock::Tally& tally_;
  const absl::Time started_;
  bool done_ = false;
  size_t bytes_ = 0;
};

NodeArena::Counters& NodeArena::Counters::operator+=(const Counters& other) {
  operations += other.operations;
  failed += other.failed;
  bytes += other.bytes;
  busy_ns += other.busy_ns;
  wait_ns += other.wait_ns;
  local_phases += other.local_phases;
  return *this;
}

size_t NodeArena::Bytes(int ranks, size_t slot_bytes) { return TotalBytes(ranks, slot_bytes); }

absl::Status NodeArena::Initialize(void* memory, size_t size, int ranks, size_t slot_bytes,
                                   std::span<const int> comm_ranks) {
  if (memory == nullptr || ranks < 1 || ranks > kMaxRanks || slot_bytes == 0 ||
      slot_bytes > kMaxSlotBytes || size < Bytes(ranks, slot_bytes) ||
      (!comm_ranks.empty() && comm_ranks.size() != static_cast<size_t>(ranks))) {
    return absl::InvalidArgumentError(absl::StrCat("an arena of ", ranks, " ranks with ",
                                                   slot_bytes, "-byte slots does not fit ", size,
                                                   " bytes"));
  }
  std::memset(memory, 0, Bytes(ranks, slot_bytes));
  auto* header = new (memory) Header;
  Shape& shape = header->shape;
  shape.version = kVersion;
  shape.ranks = static_cast<uint32_t>(ranks);
  shape.slot_bytes = slot_bytes;
  shape.total_bytes = Bytes(ranks, slot_bytes);
  for (int r = 0; r < ranks; ++r) {
    shape.comm_ranks[r] = comm_ranks.empty() ? r : comm_ranks[static_cast<size_t>(r)];
  }
  auto* base = static_cast<std::byte*>(memory);
  for (int r = 0; r < ranks; ++r) new (base + BlockOffset(r)) RankBlock;
  // The magic last: an arena is attachable only once it is whole. (Ranks attach after the
  // arena's descriptor reached them, which orders this before their reads.)
  shape.magic = kMagic;
  return absl::OkStatus();
}

absl::StatusOr<NodeArena> NodeArena::Attach(void* memory, size_t size, int rank) {
  const absl::Status not_an_arena = absl::InvalidArgumentError(
      absl::StrCat("the ", size, " bytes given are not an initialized arena"));
  if (memory == nullptr || size < sizeof(Header)) return not_an_arena;
  // The shape is read once, checked, and used from this copy only: a rank rewriting it later
  // changes nothing for this one.
  const Shape& shared = static_cast<const Header*>(memory)->shape;
  const uint64_t magic = ReadOnce(shared.magic);
  const uint32_t version = ReadOnce(shared.version);
  const uint32_t ranks = ReadOnce(shared.ranks);
  const uint64_t slot_bytes = ReadOnce(shared.slot_bytes);
  const uint64_t total_bytes = ReadOnce(shared.total_bytes);
  if (magic != kMagic || version != kVersion || ranks < 1 ||
      ranks > static_cast<uint32_t>(kMaxRanks) || slot_bytes == 0 || slot_bytes > kMaxSlotBytes ||
      total_bytes > size || total_bytes != Bytes(static_cast<int>(ranks), slot_bytes)) {
    return not_an_arena;
  }
  if (rank < 0 || rank >= static_cast<int>(ranks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not one of the arena's ", ranks, " ranks"));
  }
  NodeArena arena(static_cast<std::byte*>(memory), rank, static_cast<int>(ranks), slot_bytes);
  for (uint32_t r = 0; r < ranks; ++r) arena.comm_ranks_[r] = ReadOnce(shared.comm_ranks[r]);
  arena.next_op_ = arena.block(rank).arrived.load(std::memory_order_acquire);
  return arena;
}

void AbortArena(void* memory, size_t size, const absl::Status& reason) {
  // The abort word and the reason sit at fixed offsets of the header: nothing else is read.
  if (memory != nullptr && size >= sizeof(Header)) static_cast<Header*>(memory)->Abort(reason);
}

Header& NodeArena::header() const { return *reinterpret_cast<Header*>(base_); }

RankBlock& NodeArena::block(int rank) const {
  return *reinterpret_cast<RankBlock*>(base_ + BlockOffset(rank));
}

std::byte* NodeArena::input(int rank, uint64_t op) const {
  return base_ + SlotOffset(ranks_, slot_bytes_, rank, op % 2);
}

std::byte* NodeArena::result(int rank, uint64_t op) const {
  return base_ + SlotOffset(ranks_, slot_bytes_, rank, 2 + op % 2);
}

std::string NodeArena::Name(int local) const {
  if (local < 0 || local >= ranks_) return absl::StrCat("local rank ", local);
  return absl::StrCat("rank ", comm_ranks_[static_cast<size_t>(local)], " (local rank ", local,
                      ")");
}

void NodeArena::Abort(const absl::Status& reason) { header().Abort(reason); }

absl::Status NodeArena::AbortWith(const absl::Status& reason) {
  Abort(reason);
  const absl::Status status = aborted();
  return status.ok() ? reason : status;  // a rank set the abort word back to live meanwhile
}

absl::Status NodeArena::aborted() const { return header().Reason(); }

NodeArena::Counters NodeArena::counters(int rank, Collective collective) const {
  const int kind = static_cast<int>(collective);
  if (rank < 0 || rank >= ranks_ || kind < 0 || kind >= kCountedKinds) return {};
  return ReadTally(block(rank).tallies[kind]);
}

uint64_t NodeArena::Begin(const Signature& signature) {
  const uint64_t op = ++next_op_;
  block(rank_).signatures[op % 2] = signature;
  return op;
}

void NodeArena::Raise(std::atomic<uint64_t> RankBlock::*flag, uint64_t op) {
  (block(rank_).*flag).store(op, std::memory_order_seq_cst);
  Header& h = header();
  h.bell.fetch_add(1, std::memory_order_seq_cst);
  if (h.sleepers.load(std::memory_order_seq_cst) != 0) FutexWake(h.bell);
}

absl::Status NodeArena::AwaitAll(std::atomic<uint64_t> RankBlock::*flag, uint64_t op,
                                 const Signature& signature, absl::Time deadline, int only,
                                 std::optional<absl::Duration> spin) {
  Header& h = header();
  const int first = only < 0 ? 0 : only;
  const int last = only < 0 ? ranks_ : only + 1;
  auto all_there = [&] {
    for (int r = first; r < last; ++r) {
      if ((block(r).*flag).load(std::memory_order_acquire) < op) return false;
    }
    return true;
  };
  // A rank the daemon marked gone that has not reached `op` never will.
  auto gone = [&]() -> std::optional<int> {
    for (int r = first; r < last; ++r) {
      if ((block(r).*flag).load(std::memory_order_acquire) < op &&
          block(r).gone.load(std::memory_order_acquire) != 0) {
        return r;
      }
    }
    return std::nullopt;
  };
  auto done = [&] {
    return all_there() || h.abort_state.load(std::memory_order_acquire) != 0 || gone();
  };
  SpinUntil(spin.value_or(SpinLimit()), /*busy=*/absl::ZeroDuration(), done);
  // Whatever the ranks write into the flags, the abort word or the bell, this returns by the
  // deadline: OK only when every flag was seen, else the abort's reason or the deadline's. Every
  // flag seen wins over an abort: a rank that left after its part of this round (the daemon
  // aborts the arena when one leaves) spoils nothing of it for the others.
  while (true) {
    if (all_there()) return absl::OkStatus();
    if (absl::Status status = aborted(); !status.ok()) return status;
    if (const std::optional<int> left = gone()) {
      const absl::Status failure = absl::FailedPreconditionError(absl::StrCat(
          Name(*left), " left the communicator (its handle was destroyed) before operation ", op,
          " (", signature.Describe(),
          ") in the node's shared arena: it takes no part in it or "
          "any later one"));
      return AbortWith(failure);
    }
    const uint32_t seen = h.bell.load(std::memory_order_seq_cst);
    h.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (done()) {
      h.sleepers.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      h.sleepers.fetch_sub(1, std::memory_order_relaxed);
      std::vector<std::string> late;
      for (int r = first; r < last; ++r) {
        if ((block(r).*flag).load(std::memory_order_acquire) < op) late.push_back(Name(r));
      }
      const bool arriving = flag == &RankBlock::arrived;
      // A wait for rank 0 alone on `reduced` is a wait for the node's inter-node step.
      const bool across = !arriving && only == 0 && ranks_ > 1;
      const absl::Status timeout = absl::DeadlineExceededError(absl::StrCat(
          Name(rank_), " waited past its deadline for ", absl::StrJoin(late, ", "),
          late.size() == 1 ? ", which has not " : ", which have not ",
          arriving ? "called"
          : across ? "finished the node's step between nodes of"
                   : "finished its part of",
          " operation ", op, " (", signature.Describe(), ") in the node's shared arena",
          across ? " (its own error names the nodes the daemons waited for)" : ""));
      return AbortWith(timeout);
    }
    FutexWait(h.bell, seen, std::min(kSlice, deadline - now));
    h.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

absl::Status NodeArena::CheckSignatures(uint64_t op) {
  const Signature mine = Signature::Read(block(rank_).signatures[op % 2]);
  for (int r = 0; r < ranks_; ++r) {
    const Signature theirs = Signature::Read(block(r).signatures[op % 2]);
    if (theirs == mine) continue;
    const int a = std::min(r, rank_);
    const Signature& sa = a == rank_ ? mine : theirs;
    const Signature& sb = a == rank_ ? theirs : mine;
    const absl::Status differ = absl::FailedPreconditionError(
        absl::StrCat("ranks called different collectives as operation ", op,
                     " in the node's shared arena: ", Name(a), " called ", sa.Describe(), ", ",
                     Name(std::max(r, rank_)), " called ", sb.Describe()));
    return AbortWith(differ);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NodeArena::LocalPhase(
    const Signature& signature, absl::FunctionRef<void(std::byte* slot)> fill, size_t node_bytes,
    absl::Time deadline, absl::FunctionRef<absl::Status(uint64_t op, std::byte* buffer)> combine,
    const AcrossNodes& across, absl::FunctionRef<void(const std::byte* buffer)> deliver) {
  uint64_t n = 0;
  absl::Duration waited;
  BATON_RETURN_IF_ERROR(OneRoundWith(signature, fill, deadline, n, waited));
  std::byte* buffer = result(0, n);
  char* note = block(0).notes[n % 2];
  if (rank_ == 0) {
    const absl::Status combined = combine(n, buffer);
    absl::StatusOr<std::string> done =
        combined.ok() ? across(node_bytes > 0 ? buffer : nullptr) : combined;
    if (!done.ok()) {
      Abort(done.status());
      return aborted();  // the first reason, if something else aborted the arena meanwhile
    }
    const size_t length = std::min(done->size(), kNoteBytes - 1);
    std::memcpy(note, done->data(), length);
    note[length] = '\0';
    Raise(&RankBlock::reduced, n);
  } else {
    // Rank 0's inter-node step takes a network round trip at least: looking longer before
    // blocking saves the wake-up that would follow rank 0's (measured in docs/node-arena.md). No
    // longer than the deadline, whatever rank 0 does: then this rank fails saying rank 0 was
    // still in the step, and rank 0's own error names the nodes the daemons waited for.
    BATON_RETURN_IF_ERROR(
        AwaitAll(&RankBlock::reduced, n, signature, deadline, /*only=*/0, AcrossSpinLimit()));
  }
  deliver(buffer);
  block(rank_).tallies[static_cast<int>(signature.collective)].local_phases.fetch_add(
      1, std::memory_order_relaxed);
  char copy[kNoteBytes];
  for (size_t i = 0; i < kNoteBytes; ++i) copy[i] = ReadOnce(note[i]);
  return std::string(copy, strnlen(copy, kNoteBytes));
}

// The node's inputs of `count` elements reduced into `buffer`, summed for an average (the
// daemons divide by the world).
absl::Status NodeArena::ReduceInputs(uint64_t op, std::byte* buffer, size_t count, DataType type,
                                     ReduceOp reduce) const {
  if (count == 0) return absl::OkStatus();
  std::vector<const void*> sources(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) sources[r] = input(r, op);
  HostKernels().ReduceMany(type, reduce == ReduceOp::kAvg ? ReduceOp::kSum : reduce, buffer,
                           sources, count);
  return absl::OkStatus();
}

absl::StatusOr<std::string> NodeArena::AllReduceAcross(const void* send, void* recv, size_t count,
                                                       DataType type, ReduceOp op,
                                                       absl::Time deadline,
                                                       const AcrossNodes& across) {
  const Signature signature = Signature::Of(Collective::kAllReduce, type, count, op);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  return LocalPhase(
      signature, CopyIn(send, bytes), bytes, deadline,
      [&](uint64_t n, std::byte* buffer) { return ReduceInputs(n, buffer, count, type, op); },
      across, CopyOut(recv, 0, bytes));
}

absl::StatusOr<std::string> NodeArena::ReduceAcross(const void* send, void* recv, size_t count,
                                                    DataType type, ReduceOp op, int root,
                                                    bool is_root, absl::Time deadline,
                                                    const AcrossNodes& across) {
  const Signature signature = Signature::Of(Collective::kReduce, type, count, op, root);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  return LocalPhase(
      signature, CopyIn(send, bytes), bytes, deadline,
      [&](uint64_t n, std::byte* buffer) { return ReduceInputs(n, buffer, count, type, op); },
      across, CopyOut(is_root ? recv : nullptr, 0, bytes));
}

absl::StatusOr<std::string> NodeArena::BroadcastAcross(const void* send, void* recv, size_t count,
                                                       DataType type, int root, bool is_root,
                                                       absl::Time deadline,
                                                       const AcrossNodes& across) {
  const Signature signature =
      Signature::Of(Collective::kBroadcast, type, count, std::nullopt, root);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  // Marked before OneRound raises `arrived`, which publishes it.
  if (is_root) block(rank_).rooted.store(next_op_ + 1, std::memory_order_relaxed);
  auto from_root = [&](uint64_t n, std::byte* buffer) {
    for (int r = 0; r < ranks_ && bytes > 0; ++r) {
      if (block(r).rooted.load(std::memory_order_relaxed) == n) {
        std::memcpy(buffer, input(r, n), bytes);
      }
    }
    return absl::OkStatus();
  };
  return LocalPhase(signature, CopyIn(is_root ? send : nullptr, bytes), bytes, deadline, from_root,
                    across, CopyOut(recv, 0, bytes));
}

absl::StatusOr<std::string> NodeArena::AllGatherAcross(const void* send, void* recv, size_t count,
                                                       DataType type, int comm_rank, int world,
                                                       absl::Time deadline,
                                                       const AcrossNodes& across) {
  const Signature signature = Signature::Of(Collective::kAllGather, type, count);
  BATON_RETURN_IF_ERROR(CheckCommRank(comm_rank, world));
  BATON_RETURN_IF_ERROR(Fits(signature, static_cast<size_t>(world)));
  const size_t bytes = count * DataTypeSize(type);
  const size_t total = bytes * static_cast<size_t>(world);
  // Published by OneRound's raise of `arrived`.
  block(rank_).comm_rank.store(comm_rank, std::memory_order_relaxed);
  auto place = [&](uint64_t n, std::byte* buffer) -> absl::Status {
    for (int r = 0; r < ranks_; ++r) {
      const int64_t at = block(r).comm_rank.load(std::memory_order_relaxed);
      if (at < 0 || at >= world) {
        return absl::FailedPreconditionError(
            absl::StrCat("local rank ", r, " gave rank ", at, " in a communicator of ", world,
                         " ranks for an all_gather in the node's shared arena"));
      }
      if (bytes > 0) std::memcpy(buffer + static_cast<size_t>(at) * bytes, input(r, n), bytes);
    }
    return absl::OkStatus();
  };
  return LocalPhase(signature, CopyIn(send, bytes), total, deadline, place, across,
                    CopyOut(recv, 0, total));
}

absl::StatusOr<std::string> NodeArena::ReduceScatterAcross(const void* send, void* recv,
                                                           size_t count, DataType type, ReduceOp op,
                                                           int comm_rank, int world,
                                                           absl::Time deadline,
                                                           const AcrossNodes& across) {
  const Signature signature = Signature::Of(Collective::kReduceScatter, type, count, op);
  BATON_RETURN_IF_ERROR(CheckCommRank(comm_rank, world));
  BATON_RETURN_IF_ERROR(Fits(signature, static_cast<size_t>(world)));
  const size_t bytes = count * DataTypeSize(type);
  const size_t total = bytes * static_cast<size_t>(world);
  return LocalPhase(
      signature, CopyIn(send, total), total, deadline,
      [&](uint64_t n, std::byte* buffer) {
        return ReduceInputs(n, buffer, count * static_cast<size_t>(world), type, op);
      },
      across, CopyOut(recv, static_cast<size_t>(comm_rank) * bytes, bytes));
}

absl::StatusOr<std::string> NodeArena::BarrierAcross(absl::Time deadline,
                                                     const AcrossNodes& across) {
  Signature signature;
  signature.collective = static_cast<uint32_t>(Collective::kBarrier);
  return LocalPhase(
      signature, CopyIn(nullptr, 0), 0, deadline,
      [](uint64_t, std::byte*) { return absl::OkStatus(); }, across, CopyOut(nullptr, 0, 0));
}

absl::Status NodeArena::CheckCommRank(int comm_rank, int world) const {
  if (world >= ranks_ && comm_rank >= 0 && comm_rank < world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", comm_rank, " of ", world, " cannot be one of the arena's ", ranks_, " local ranks"));
}

absl::Status NodeArena::RecordDaemonCall(const OpSpec& spec) {
  if (absl::Status status = aborted(); !status.ok()) return status;
  Signature signature = Signature::Of(spec.collective, spec.type, spec.count, spec.op, spec.root);
  signature.through_daemon = 1;
  Raise(&RankBlock::arrived, Begin(signature));
  return absl::OkStatus();
}

namespace {

// The steady clock every process of the node shares.
int64_t SteadyNanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

absl::StatusOr<NodeArena::RouteAgreement> NodeArena::AgreeOnRoute(const OpSpec& spec, bool in_arena,
                                                                  absl::Time deadline) {
  Signature signature = Signature::Of(spec.collective, spec.type, spec.count, spec.op, spec.root);
  signature.agreeing = 1;
  // Rank 0's answer, published by the `arrived` that OneRound raises.
  if (rank_ == 0) block(0).in_arena[(next_op_ + 1) % 2].store(in_arena ? 1 : 0);
  uint64_t n = 0;
  absl::Duration waited;
  BATON_RETURN_IF_ERROR(OneRound(signature, nullptr, 0, deadline, n, waited));
  RouteAgreement agreement;
  agreement.in_arena = block(0).in_arena[n % 2].load() != 0;
  // Every rank marked the previous agreed call finished before it arrived here, if it did.
  if (rank_ == 0 && agreed_op_ != 0) {
    const uint64_t last = agreements_ % 2;
    int64_t slowest = agreed_ns_;
    bool all = true;
    for (int r = 0; r < ranks_ && all; ++r) {
      all = block(r).finished_op[last].load(std::memory_order_acquire) == agreed_op_;
      slowest = std::max(slowest, block(r).finished_ns[last].load(std::memory_order_relaxed));
    }
    if (all) agreement.last_took = absl::Nanoseconds(slowest - agreed_ns_);
  }
  ++agreements_;
  agreed_op_ = n;
  agreed_ns_ = SteadyNanoseconds();
  return agreement;
}

void NodeArena::FinishedRoute() {
  RankBlock& mine = block(rank_);
  mine.finished_ns[agreements_ % 2].store(SteadyNanoseconds(), std::memory_order_relaxed);
  mine.finished_op[agreements_ % 2].store(agreed_op_, std::memory_order_release);
}

absl::Status NodeArena::AllReduce(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, absl::Time deadline) {
  const size_t element = DataTypeSize(type);
  const Signature signature = Signature::Of(Collective::kAllReduce, type, count, op);
  BATON_ASSIGN_OR_RETURN(const size_t chunk, SlotChunk(signature, 1));
  OpTally tally(*this, Collective::kAllReduce);
  // A slot at a time, each an operation number of its own with the whole call's signature.
  size_t done = 0;
  do {
    const size_t part = std::min(chunk, count - done);
    BATON_RETURN_IF_ERROR(AllReduceChunk(
        signature, static_cast<const std::byte*>(send) + done * element,
        static_cast<std::byte*>(recv) + done * element, part, deadline, tally.waited));
    done += part;
  } while (done < count);
  tally.Done(count * element);
  return absl::OkStatus();
}

absl::Status NodeArena::AllReduceChunk(const Signature& signature, const void* send, void* recv,
                                       size_t count, absl::Time deadline, absl::Duration& waited) {
  const auto type = static_cast<DataType>(signature.type);
  const auto op = static_cast<ReduceOp>(signature.op);
  const size_t element = DataTypeSize(type);
  const size_t bytes = count * element;
  uint64_t n = 0;
  BATON_RETURN_IF_ERROR(OneRound(signature, send, bytes, deadline, n, waited));
  std::vector<const void*> sources(static_cast<size_t>(ranks_));
  const Kernels& kernels = HostKernels();
  if (bytes <= kWholeReduceBytes || ranks_ == 1) {
    for (int r = 0; r < ranks_; ++r) sources[r] = input(r, n);
    if (bytes > 0) kernels.ReduceMany(type, op, recv, sources, count);
    if (op == ReduceOp::kAvg && count > 0) kernels.Divide(type, recv, count, ranks_);
    return absl::OkStatus();
  }
  // Rank r reduces elements [first(r), first(r + 1)) into its result slot.
  auto first = [&](int r) { return count * static_cast<size_t>(r) / static_cast<size_t>(ranks_); };
  const size_t from = first(rank_);
  const size_t length = first(rank_ + 1) - from;
  for (int r = 0; r < ranks_; ++r) sources[r] = input(r, n) + from * element;
  std::byte* part = result(rank_, n) + from * element;
  if (length > 0) {
    kernels.ReduceMany(type, op, part, sources, length);
    if (op == ReduceOp::kAvg) kernels.Divide(type, part, length, ranks_);
  }
  Raise(&RankBlock::reduced, n);
  const absl::Time started = absl::Now();
  BATON_RETURN_IF_ERROR(AwaitAll(&RankBlock::reduced, n, signature, deadline));
  waited += absl::Now() - started;
  for (int r = 0; r < ranks_; ++r) {
    const size_t at = first(r) * element;
    const size_t part_bytes = (first(r + 1) - first(r)) * element;
    if (part_bytes > 0)
      std::memcpy(static_cast<std::byte*>(recv) + at, result(r, n) + at, part_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> NodeArena::SlotChunk(const Signature& signature, size_t blocks) const {
  const size_t element = DataTypeSize(static_cast<DataType>(signature.type));
  const size_t chunk = element == 0 ? 0 : slot_bytes_ / element / blocks;
  if (chunk == 0 || signature.count > SIZE_MAX / element / blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        signature.Describe(), " cannot run in the arena's ", slot_bytes_, "-byte slots"));
  }
  return chunk;
}

absl::Status NodeArena::Fits(const Signature& signature, size_t blocks) const {
  const size_t element = DataTypeSize(static_cast<DataType>(signature.type));
  if (element > 0 && signature.count <= slot_bytes_ / element / blocks) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(signature.Describe(), " does not fit the arena's ", slot_bytes_, "-byte slots"));
}

absl::Status NodeArena::OneRound(const Signature& signature, const void* send, size_t bytes,
                                 absl::Time deadline, uint64_t& op, absl::Duration& waited) {
  return OneRoundWith(signature, CopyIn(send, bytes), deadline, op, waited);
}

absl::Status NodeArena::OneRoundWith(const Signature& signature,
                                     absl::FunctionRef<void(std::byte* slot)> fill,
                                     absl::Time deadline, uint64_t& op, absl::Duration& waited) {
  if (absl::Status status = aborted(); !status.ok()) return status;
  op = Begin(signature);
  fill(input(rank_, op));
  Raise(&RankBlock::arrived, op);
  const absl::Time started = absl::Now();
  BATON_RETURN_IF_ERROR(AwaitAll(&RankBlock::arrived, op, signature, deadline));
  waited += absl::Now() - started;
  return CheckSignatures(op);
}

absl::Status NodeArena::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                  int root, absl::Time deadline) {
  if (root < 0 || root >= ranks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not one of the arena's ", ranks_, " ranks"));
  }
  const Signature signature =
      Signature::Of(Collective::kBroadcast, type, count, std::nullopt, root);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kBroadcast);
  BATON_RETURN_IF_ERROR(
      OneRound(signature, rank_ == root ? send : nullptr, bytes, deadline, n, tally.waited));
  if (bytes > 0 && (rank_ != root || recv != send)) std::memcpy(recv, input(root, n), bytes);
  tally.Done(bytes);
  return absl::OkStatus();
}

absl::Status NodeArena::AllGather(const void* send, void* recv, size_t count, DataType type,
                                  absl::Time deadline) {
  const Signature signature = Signature::Of(Collective::kAllGather, type, count);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kAllGather);
  BATON_RETURN_IF_ERROR(OneRound(signature, send, bytes, deadline, n, tally.waited));
  for (int r = 0; r < ranks_ && bytes > 0; ++r) {
    std::memcpy(static_cast<std::byte*>(recv) + static_cast<size_t>(r) * bytes, input(r, n), bytes);
  }
  tally.Done(bytes);
  return absl::OkStatus();
}

absl::Status NodeArena::Reduce(const void* send, void* recv, size_t count, DataType type,
                               ReduceOp op, int root, absl::Time deadline) {
  if (root < 0 || root >= ranks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not one of the arena's ", ranks_, " ranks"));
  }
  const Signature signature = Signature::Of(Collective::kReduce, type, count, op, root);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kReduce);
  BATON_RETURN_IF_ERROR(OneRound(signature, send, bytes, deadline, n, tally.waited));
  if (rank_ == root && count > 0) {
    std::vector<const void*> sources(static_cast<size_t>(ranks_));
    for (int r = 0; r < ranks_; ++r) sources[r] = input(r, n);
    HostKernels().ReduceMany(type, op, recv, sources, count);
    if (op == ReduceOp::kAvg) HostKernels().Divide(type, recv, count, ranks_);
  }
  tally.Done(bytes);
  return absl::OkStatus();
}

absl::Status NodeArena::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, absl::Time deadline) {
  const Signature signature = Signature::Of(Collective::kReduceScatter, type, count, op);
  const size_t element = DataTypeSize(type);
  const auto ranks = static_cast<size_t>(ranks_);
  BATON_ASSIGN_OR_RETURN(const size_t chunk, SlotChunk(signature, ranks));
  OpTally tally(*this, Collective::kReduceScatter);
  // Each round takes the same elements of every rank's block: chunk c of block r sits at
  // r * part in the slot, so that with one chunk the slot holds the whole input as it is.
  std::vector<const void*> sources(ranks);
  const auto* input_bytes = static_cast<const std::byte*>(send);
  size_t done = 0;
  do {
    const size_t part = std::min(chunk, count - done);
    const size_t part_bytes = part * element;
    auto fill = [&](std::byte* slot) {
      for (size_t r = 0; r < ranks && part_bytes > 0; ++r) {
        std::memcpy(slot + r * part_bytes, input_bytes + (r * count + done) * element, part_bytes);
      }
    };
    uint64_t n = 0;
    BATON_RETURN_IF_ERROR(OneRoundWith(signature, fill, deadline, n, tally.waited));
    if (part > 0) {
      for (size_t r = 0; r < ranks; ++r) {
        sources[r] = input(static_cast<int>(r), n) + static_cast<size_t>(rank_) * part_bytes;
      }
      void* out = static_cast<std::byte*>(recv) + done * element;
      HostKernels().ReduceMany(type, op, out, sources, part);
      if (op == ReduceOp::kAvg) HostKernels().Divide(type, out, part, ranks_);
    }
    done += part;
  } while (done < count);
  tally.Done(count * element * ranks);
  return absl::OkStatus();
}

absl::Status NodeArena::AllToAll(const void* send, void* recv, size_t count, DataType type,
                                 absl::Time deadline) {
  const Signature signature = Signature::Of(Collective::kAllToAll, type, count);
  const auto ranks = static_cast<size_t>(ranks_);
  BATON_RETURN_IF_ERROR(Fits(signature, ranks));
  const size_t bytes = count * DataTypeSize(type);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kAllToAll);
  BATON_RETURN_IF_ERROR(OneRound(signature, send, ranks * bytes, deadline, n, tally.waited));
  for (size_t r = 0; r < ranks && bytes > 0; ++r) {
    std::memcpy(static_cast<std::byte*>(recv) + r * bytes,
                input(static_cast<int>(r), n) + static_cast<size_t>(rank_) * bytes, bytes);
  }
  tally.Done(ranks * bytes);
  return absl::OkStatus();
}

absl::Status NodeArena::Barrier(absl::Time deadline) {
  Signature signature;
  signature.collective = static_cast<uint32_t>(Collective::kBarrier);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kBarrier);
  BATON_RETURN_IF_ERROR(OneRound(signature, nullptr, 0, deadline, n, tally.waited));
  tally.Done(0);
  return absl::OkStatus();
}

}  // namespace baton::collective
