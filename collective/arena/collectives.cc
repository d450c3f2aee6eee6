// The operations within the node: each is one round of flags (two for a large all_reduce), a
// slot at a time where a call is larger than a slot.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/node_arena.h"
#include "collective/node_arena_layout.h"
#include "common/status_macros.h"
#include "device/kernels.h"

namespace baton::collective {

using arena::RankBlock;

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

absl::Status NodeArena::AllReduce(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, absl::Time deadline) {
  const size_t element = DataTypeSize(type);
  const Signature signature = arena::SignatureOf(Collective::kAllReduce, type, count, op);
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
  const device::Kernels& kernels = device::HostKernels();
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

absl::Status NodeArena::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                  int root, absl::Time deadline) {
  if (root < 0 || root >= ranks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not one of the arena's ", ranks_, " ranks"));
  }
  const Signature signature =
      arena::SignatureOf(Collective::kBroadcast, type, count, std::nullopt, root);
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
  const Signature signature = arena::SignatureOf(Collective::kAllGather, type, count);
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
  const Signature signature = arena::SignatureOf(Collective::kReduce, type, count, op, root);
  BATON_RETURN_IF_ERROR(Fits(signature, 1));
  const size_t bytes = count * DataTypeSize(type);
  uint64_t n = 0;
  OpTally tally(*this, Collective::kReduce);
  BATON_RETURN_IF_ERROR(OneRound(signature, send, bytes, deadline, n, tally.waited));
  if (rank_ == root && count > 0) {
    std::vector<const void*> sources(static_cast<size_t>(ranks_));
    for (int r = 0; r < ranks_; ++r) sources[r] = input(r, n);
    device::HostKernels().ReduceMany(type, op, recv, sources, count);
    if (op == ReduceOp::kAvg) device::HostKernels().Divide(type, recv, count, ranks_);
  }
  tally.Done(bytes);
  return absl::OkStatus();
}

absl::Status NodeArena::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, absl::Time deadline) {
  const Signature signature = arena::SignatureOf(Collective::kReduceScatter, type, count, op);
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
      device::HostKernels().ReduceMany(type, op, out, sources, part);
      if (op == ReduceOp::kAvg) device::HostKernels().Divide(type, out, part, ranks_);
    }
    done += part;
  } while (done < count);
  tally.Done(count * element * ranks);
  return absl::OkStatus();
}

absl::Status NodeArena::AllToAll(const void* send, void* recv, size_t count, DataType type,
                                 absl::Time deadline) {
  const Signature signature = arena::SignatureOf(Collective::kAllToAll, type, count);
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
