#pragma once

// The node arena's shared memory (collective/node_arena.h says how ranks use it): a header, a
// block per rank, then four slots per rank. Private to the arena's two views: the ranks'
// (NodeArena) and the daemon's (ArenaOwner).
//
// Every rank of the communicator maps this memory writable, so every byte of it may change at
// any time. The rules that follow from that:
//   - the shape (rank count, slot size, the ranks' places in the communicator) is written once by
//     the daemon before any rank attaches; a view reads it once, checks it, and from then on
//     uses its own copy (the daemon never reads it back at all);
//   - every other field is read with ReadOnce into a local before it is used, and a value read
//     may be anything: it may make an operation of this communicator fail or compute garbage,
//     never make anyone read outside the arena or wait past a deadline.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/node_arena.h"
#include "collective/op_spec.h"

namespace baton::collective::arena {

inline constexpr uint64_t kMagic = 0x616e6572616e7462ULL;  // "btnarena" read little-endian
// 2: counters by collective; 3: routes agreed; 4: comm ranks; 5: the shape's comm ranks table,
// the gone flag; 6: the rank blocks' signatures are collective::Signature (the round's kind in
// its flags word, not in two words of its own).
inline constexpr uint32_t kVersion = 6;
inline constexpr size_t kAlign = 64;
inline constexpr size_t kReasonBytes = 512;
inline constexpr size_t kMaxSlotBytes = size_t{1} << 30;

inline constexpr size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One load of a plain field that another process may be writing (an atomic load, so that the
// compiler reads it exactly once and sanitizers see no race).
template <typename T>
T ReadOnce(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

// What a rank called as one operation, as the arena keeps it: the signature the daemons compare
// (collective::Signature, collective/op_spec.h), equal between ranks whose calls match. Its
// algorithm stays 0 (a call that asks for one runs through the daemon, which checks it), and
// its `flags` say what kind of round it is.
//
// The rank ran the call through the daemon (RecordDaemonCall).
inline constexpr uint32_t kThroughDaemon = 1;
// The round that agrees where the call runs (AgreeOnRoute).
inline constexpr uint32_t kAgreeing = 2;

// The fields a call fills; the others stay 0, so that ranks compare equal.
Signature SignatureOf(Collective collective, DataType type, uint64_t count,
                      std::optional<ReduceOp> op = std::nullopt, int root = 0, uint32_t flags = 0);
// Each field of `shared` read once.
Signature ReadSignature(const Signature& shared);
// For errors: every field as it is, names only for values that have one, and the flags.
std::string Describe(const Signature& signature);

// Written once by the daemon, before any rank attaches.
struct Shape {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t ranks = 0;
  uint64_t slot_bytes = 0;
  uint64_t total_bytes = 0;
  // Local rank i's rank in the communicator (for errors: they name ranks as the user knows them).
  int32_t comm_ranks[NodeArena::kMaxRanks] = {};
};

enum AbortState : uint32_t { kLive = 0, kWriting = 1, kAborted = 2 };

struct Header {
  Shape shape;
  alignas(kAlign) std::atomic<uint32_t> abort_state{kLive};
  int32_t abort_code = 0;
  char abort_reason[kReasonBytes] = {};
  alignas(kAlign) std::atomic<uint32_t> bell{0};  // rung by every raise
  std::atomic<uint32_t> sleepers{0};              // waiters blocked on the bell

  // Marks the arena aborted with `reason` (Aborted if it is OK) and wakes every waiter; the
  // first reason wins, later ones are dropped.
  void Abort(const absl::Status& reason);
  // OK while live, else why not: never OK once the abort word left kLive, whatever the memory
  // holds, and never waits more than a moment for a writer.
  absl::Status Reason() const;
  // Wakes every waiter to look at its flags again (after a change no raise announced).
  void RingAll();
};

struct RankBlock {
  alignas(kAlign) std::atomic<uint64_t> arrived{0};  // the last operation whose input is in
  std::atomic<uint64_t> reduced{0};                  // the last whose part of the result is in
  Signature signatures[2];                           // of operations with odd and even numbers
  std::atomic<uint64_t> rooted{0};  // the last operation across nodes whose root this rank is
  // Set by the daemon when the rank left the communicator (ArenaOwner::MarkGone): it takes no
  // operation after the last it arrived at.
  std::atomic<uint32_t> gone{0};
  // The rank's rank in the communicator, published with its input to an all_gather across nodes
  // (-1 before).
  std::atomic<int64_t> comm_rank{-1};
  char notes[2][NodeArena::kNoteBytes] = {};  // rank 0's: what `across` returned, by parity
  std::atomic<uint32_t> in_arena[2] = {};     // rank 0's AgreeOnRoute answers, by parity
  // The agreed calls this rank finished (FinishedRoute), by the parity of the agreement's count
  // (a rank can be one agreement ahead of rank 0, not two): its operation number and when
  // (steady clock).
  std::atomic<uint64_t> finished_op[2] = {};
  std::atomic<int64_t> finished_ns[2] = {};
  // The rank's counters by collective; written by the rank only, read by anyone.
  struct Tally {
    std::atomic<uint64_t> operations{0};
    std::atomic<uint64_t> failed{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> busy_ns{0};
    std::atomic<uint64_t> wait_ns{0};
    std::atomic<uint64_t> local_phases{0};
  };
  Tally tallies[NodeArena::kCountedKinds];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Where things are, from a view's own copy of the shape (never from the memory).
inline size_t BlockOffset(int rank) {
  return RoundUp(sizeof(Header)) + static_cast<size_t>(rank) * RoundUp(sizeof(RankBlock));
}
// Input slots 0 and 1, then result slots 2 and 3, of `rank`.
inline size_t SlotOffset(int ranks, size_t slot_bytes, int rank, size_t slot) {
  return BlockOffset(ranks) + (static_cast<size_t>(rank) * 4 + slot) * RoundUp(slot_bytes);
}
inline size_t TotalBytes(int ranks, size_t slot_bytes) {
  return SlotOffset(ranks, slot_bytes, ranks, 0);
}

// A rank's counters for one collective, each read once.
NodeArena::Counters ReadTally(const RankBlock::Tally& tally);

}  // namespace baton::collective::arena
