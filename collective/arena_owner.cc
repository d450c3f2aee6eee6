#include "collective/arena_owner.h"

#include "collective/node_arena_layout.h"
#include "common/status_macros.h"

namespace baton::collective {

absl::StatusOr<ArenaOwner> ArenaOwner::Create(void* memory, size_t size,
                                              std::span<const int> comm_ranks, size_t slot_bytes) {
  const int ranks = static_cast<int>(comm_ranks.size());
  BATON_RETURN_IF_ERROR(NodeArena::Initialize(memory, size, ranks, slot_bytes, comm_ranks));
  return ArenaOwner(static_cast<std::byte*>(memory), ranks);
}

void ArenaOwner::Abort(const absl::Status& reason) const {
  // The abort word, the reason and the bell are at fixed offsets: only written here.
  reinterpret_cast<arena::Header*>(base_)->Abort(reason);
}

void ArenaOwner::MarkGone(int rank) const {
  if (rank < 0 || rank >= ranks_) return;
  auto* block = reinterpret_cast<arena::RankBlock*>(base_ + arena::BlockOffset(rank));
  block->gone.store(1, std::memory_order_seq_cst);
  reinterpret_cast<arena::Header*>(base_)->RingAll();
}

NodeArena::Counters ArenaOwner::counters(int rank, Collective collective) const {
  const int kind = static_cast<int>(collective);
  if (rank < 0 || rank >= ranks_ || kind < 0 || kind >= NodeArena::kCountedKinds) return {};
  const auto* block = reinterpret_cast<const arena::RankBlock*>(base_ + arena::BlockOffset(rank));
  return arena::ReadTally(block->tallies[kind]);
}

}  // namespace baton::collective
