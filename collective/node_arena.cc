// The node arena's handle: its setup by the daemon, a rank's attach, the abort word and the
// counters. The operations are in collective/arena/ (node_arena.h lists which file holds what).

#include "collective/node_arena.h"

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "collective/node_arena_layout.h"

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

}  // namespace baton::collective
