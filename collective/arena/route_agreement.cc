// Where a call that may run in the arena or through the daemon runs: one round in which rank 0's
// answer is everyone's, timed to the slowest rank for the route tuner; and the operation number a
// call run through the daemon takes here.

#include <algorithm>
#include <cstdint>
#include <ctime>

#include "collective/node_arena.h"
#include "collective/node_arena_layout.h"
#include "common/status_macros.h"

namespace baton::collective {

using arena::RankBlock;

namespace {

// The steady clock every process of the node shares.
int64_t SteadyNanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

absl::Status NodeArena::RecordDaemonCall(const OpSpec& spec, absl::Time deadline) {
  if (absl::Status status = aborted(); !status.ok()) return status;
  const Signature signature = arena::SignatureOf(spec.collective, spec.type, spec.count, spec.op,
                                                 spec.root, arena::kThroughDaemon);
  BATON_ASSIGN_OR_RETURN(const uint64_t op, Begin(signature, deadline));
  Raise(&RankBlock::arrived, op);
  return absl::OkStatus();
}

absl::StatusOr<NodeArena::RouteAgreement> NodeArena::AgreeOnRoute(const OpSpec& spec, bool in_arena,
                                                                  absl::Time deadline) {
  const Signature signature = arena::SignatureOf(spec.collective, spec.type, spec.count, spec.op,
                                                 spec.root, arena::kAgreeing);
  // Rank 0's answer, written once the operation's slots are free (Begin) and published by the
  // `arrived` that the round raises.
  auto answer = [this, in_arena](std::byte* /*slot*/) {
    if (rank_ == 0) block(0).in_arena[next_op_ % 2].store(in_arena ? 1 : 0);
  };
  uint64_t n = 0;
  absl::Duration waited;
  BATON_RETURN_IF_ERROR(OneRoundWith(signature, answer, deadline, n, waited));
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

}  // namespace baton::collective
