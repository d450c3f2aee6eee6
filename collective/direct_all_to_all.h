#pragma once

// Direct all-to-all: every pair of participants exchanges one block, over a direct link.
//
// Buffers: `send` and `recv` each hold size * count elements, as size blocks of `count` elements
// (the same count for every peer). Block j of participant i's `send` ends up as block i of
// participant j's `recv`; a participant copies its own block locally. `send` is only read. The
// two buffers must not overlap (an in-place caller copies its input aside first).
//
// Traffic: with B = count * element size and C = ChunkCount(count, ChunkElements(
// ctx.chunk_bytes, type)) and h the transport's per-message overhead (LinkStats, transport.h;
// 40 bytes on TCP), every participant transmits B + h * C bytes to each of the other size-1
// participants: (size-1) * (B + h * C) in all.
//
// Tags: step s (1 <= s < size) carries the block from participant i to participant i+s (mod
// size), part = chunk.

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type and sequence number; `type` only sets the
// element size. Errors: InvalidArgument for a rank outside the participants, a missing address,
// an unknown type, a byte count that overflows or overlapping buffers; transport errors annotated
// with this rank and the peer (on error `recv` is left partly written).
absl::Status DirectAllToAll(const OpContext& ctx, const Participants& participants,
                            const void* send, void* recv, size_t count, DataType type);

// The same between participants (daemons) that each stand for several ranks, straight between
// the ranks' own buffers: nothing is packed or copied aside. Each participant sends the others
// their blocks in rounds, about ctx.chunk_bytes to each in one SendAll per round, so that every
// link carries all steps at once.
//
// `ranks_of[p]` lists the global ranks participant p stands for (the same lists on every
// participant); `sends[i]` and `recvs[i]` are the buffers of the caller's i-th rank
// (ranks_of[participants.rank][i]), each holding one block of `block_bytes` per global rank, at
// rank * block_bytes. Block g of rank a's send ends up as block a of rank g's recv. No send may
// overlap a recv (in place: pack aside, as the daemon's slab path does). Blocks between two ranks
// of the caller are copied locally.
//
// Tags: step s carries participant p's blocks for participant p+s (mod size); the block from
// p's i-th rank to the j-th rank of p+s is cut into chunks of ctx.chunk_bytes, chunk c tagged
// part = (i * most + j) * chunks + c, where most is the most ranks any participant stands for
// and chunks = ChunkCount(block_bytes, chunk_bytes).
//
// Errors: as DirectAllToAll, and InvalidArgument when the lists disagree with the buffers, a rank
// is out of range or listed twice, or the tag's part number would overflow.
absl::Status DirectAllToAllOfRanks(const OpContext& ctx, const Participants& participants,
                                   const std::vector<std::vector<int>>& ranks_of,
                                   std::span<const std::byte* const> sends,
                                   std::span<std::byte* const> recvs, size_t block_bytes);

}  // namespace baton::collective
