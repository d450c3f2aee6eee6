// The rounds every arena operation is made of: a rank publishes its signature and raises a flag,
// waits (spinning, then on the bell) until every rank raised it, and compares the signatures.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/arena/internal.h"
#include "collective/node_arena.h"
#include "collective/node_arena_layout.h"
#include "common/futex.h"
#include "common/spin.h"
#include "common/status_macros.h"

namespace baton::collective {
namespace arena {
namespace {

// The spins' defaults (docs/node-arena.md measures them).
constexpr absl::Duration kDefaultSpin = absl::Microseconds(20);
constexpr absl::Duration kDefaultAcrossSpin = absl::Microseconds(200);

absl::Duration SpinFromEnv(const char* name, absl::Duration fallback) {
  const char* env = std::getenv(name);
  int64_t us = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &us) || us < 0 || us > 1'000'000) return fallback;
  return absl::Microseconds(us);
}

}  // namespace

absl::Duration SpinLimit() {
  static const absl::Duration limit = SpinFromEnv("BATON_ARENA_SPIN_US", kDefaultSpin);
  return limit;
}

absl::Duration AcrossSpinLimit() {
  static const absl::Duration limit = SpinFromEnv("BATON_ARENA_ACROSS_SPIN_US", kDefaultAcrossSpin);
  return limit;
}

}  // namespace arena

namespace {

// A blocked waiter wakes at least this often to look at the abort word and its deadline.
constexpr absl::Duration kSlice = absl::Milliseconds(50);

}  // namespace

using arena::Header;
using arena::RankBlock;

absl::StatusOr<uint64_t> NodeArena::Begin(const Signature& signature, absl::Time deadline) {
  const uint64_t op = next_op_ + 1;
  if (op > 2) {
    // A rank that recorded the previous operation without waiting (RecordDaemonCall) may be here
    // while a peer still checks the signatures of, or copies out, the one before: that peer is
    // done with it once it arrives at the previous one. Without this wait the peer read this
    // operation's signature as the older one's and failed on a mismatch that was not there.
    const Signature previous = arena::ReadSignature(block(rank_).signatures[(op - 1) % 2]);
    BATON_RETURN_IF_ERROR(AwaitAll(&RankBlock::arrived, op - 1, previous, deadline));
  }
  next_op_ = op;
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
  SpinUntil(spin.value_or(arena::SpinLimit()), /*busy=*/absl::ZeroDuration(), done);
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
          " (", arena::Describe(signature),
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
          " operation ", op, " (", arena::Describe(signature), ") in the node's shared arena",
          across ? " (its own error names the nodes the daemons waited for)" : ""));
      return AbortWith(timeout);
    }
    FutexWait(h.bell, seen, std::min(kSlice, deadline - now));
    h.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

absl::Status NodeArena::CheckSignatures(uint64_t op) {
  const Signature mine = arena::ReadSignature(block(rank_).signatures[op % 2]);
  for (int r = 0; r < ranks_; ++r) {
    const Signature theirs = arena::ReadSignature(block(r).signatures[op % 2]);
    if (theirs == mine) continue;
    const int a = std::min(r, rank_);
    const Signature& sa = a == rank_ ? mine : theirs;
    const Signature& sb = a == rank_ ? theirs : mine;
    const absl::Status differ = absl::FailedPreconditionError(
        absl::StrCat("ranks called different collectives as operation ", op,
                     " in the node's shared arena: ", Name(a), " called ", arena::Describe(sa),
                     ", ", Name(std::max(r, rank_)), " called ", arena::Describe(sb)));
    return AbortWith(differ);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> NodeArena::SlotChunk(const Signature& signature, size_t blocks) const {
  const size_t element = DataTypeSize(static_cast<DataType>(signature.type));
  const size_t chunk = element == 0 ? 0 : slot_bytes_ / element / blocks;
  if (chunk == 0 || signature.count > SIZE_MAX / element / blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        arena::Describe(signature), " cannot run in the arena's ", slot_bytes_, "-byte slots"));
  }
  return chunk;
}

absl::Status NodeArena::Fits(const Signature& signature, size_t blocks) const {
  const size_t element = DataTypeSize(static_cast<DataType>(signature.type));
  if (element > 0 && signature.count <= slot_bytes_ / element / blocks) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      arena::Describe(signature), " does not fit the arena's ", slot_bytes_, "-byte slots"));
}

absl::Status NodeArena::OneRound(const Signature& signature, const void* send, size_t bytes,
                                 absl::Time deadline, uint64_t& op, absl::Duration& waited) {
  return OneRoundWith(signature, arena::CopyIn(send, bytes), deadline, op, waited);
}

absl::Status NodeArena::OneRoundWith(const Signature& signature,
                                     absl::FunctionRef<void(std::byte* slot)> fill,
                                     absl::Time deadline, uint64_t& op, absl::Duration& waited) {
  if (absl::Status status = aborted(); !status.ok()) return status;
  BATON_ASSIGN_OR_RETURN(op, Begin(signature, deadline));
  fill(input(rank_, op));
  Raise(&RankBlock::arrived, op);
  const absl::Time started = absl::Now();
  BATON_RETURN_IF_ERROR(AwaitAll(&RankBlock::arrived, op, signature, deadline));
  waited += absl::Now() - started;
  return CheckSignatures(op);
}

}  // namespace baton::collective
