// Operations across nodes: the node's local ranks meet in the arena, local rank 0 runs the step
// between nodes through the daemon on the node's part, and every local rank copies its result.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/arena/internal.h"
#include "collective/node_arena.h"
#include "collective/node_arena_layout.h"
#include "common/status_macros.h"
#include "device/kernels.h"

namespace baton::collective {

using arena::CopyIn;
using arena::CopyOut;
using arena::RankBlock;
using arena::ReadOnce;

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
    BATON_RETURN_IF_ERROR(AwaitAll(&RankBlock::reduced, n, signature, deadline, /*only=*/0,
                                   arena::AcrossSpinLimit()));
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
  device::HostKernels().ReduceMany(type, reduce == ReduceOp::kAvg ? ReduceOp::kSum : reduce, buffer,
                                   sources, count);
  return absl::OkStatus();
}

absl::StatusOr<std::string> NodeArena::AllReduceAcross(const void* send, void* recv, size_t count,
                                                       DataType type, ReduceOp op,
                                                       absl::Time deadline,
                                                       const AcrossNodes& across) {
  const Signature signature = arena::SignatureOf(Collective::kAllReduce, type, count, op);
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
  const Signature signature = arena::SignatureOf(Collective::kReduce, type, count, op, root);
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
      arena::SignatureOf(Collective::kBroadcast, type, count, std::nullopt, root);
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
  const Signature signature = arena::SignatureOf(Collective::kAllGather, type, count);
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
  const Signature signature = arena::SignatureOf(Collective::kReduceScatter, type, count, op);
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

}  // namespace baton::collective
