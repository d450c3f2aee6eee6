#pragma once

// The daemon's hold on a node arena (collective/node_arena.h) it created: it initializes the
// arena, aborts it, and reads the ranks' counters for its metrics, from its own copy of the
// arena's shape. Every rank of the communicator can write every byte of the arena at any time;
// nothing here reads a size, a count or an offset from it, so whatever they write cannot make
// the daemon read or write outside the arena, wait, or fail anything but that communicator.

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/algorithm.h"
#include "collective/node_arena.h"

namespace baton::collective {

class ArenaOwner final {
 public:
  // Initializes an arena in `memory` (`size` bytes, which must outlive the owner and its copies)
  // for local ranks whose ranks in the communicator are `comm_ranks` (local rank i is
  // comm_ranks[i]; 1 to NodeArena::kMaxRanks of them), with slots of `slot_bytes`.
  // InvalidArgument when that does not fit.
  static absl::StatusOr<ArenaOwner> Create(void* memory, size_t size,
                                           std::span<const int> comm_ranks, size_t slot_bytes);

  int ranks() const { return ranks_; }

  // Fails every waiting and later operation of every rank with `reason` (Aborted if OK); the
  // first reason written stays.
  void Abort(const absl::Status& reason) const;

  // Local rank `rank` left the communicator after the operations it arrived at: the local ranks
  // waiting for it at a later one fail at once (FailedPrecondition naming it), while operations
  // it took part in complete. Nothing for a rank out of range.
  void MarkGone(int rank) const;

  // What local rank `rank` counted for `collective` (zero for a rank or collective out of
  // range). The values are whatever the rank wrote.
  NodeArena::Counters counters(int rank, Collective collective) const;

 private:
  ArenaOwner(std::byte* base, int ranks) : base_(base), ranks_(ranks) {}

  std::byte* base_;
  int ranks_;
};

}  // namespace baton::collective
