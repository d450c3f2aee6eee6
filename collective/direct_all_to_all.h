#pragma once

// Direct all-to-all: every pair of participants exchanges one block, over a direct link.
//
// Buffers: `send` and `recv` each hold size * count elements, as size blocks of `count` elements
// (the same count for every peer). Block j of participant i's `send` ends up as block i of
// participant j's `recv`; a participant copies its own block locally. `send` is only read. The
// two buffers must not overlap (an in-place caller copies its input aside first).
//
// Traffic: with B = count * element size and C = ChunkCount(count, ChunkElements(
// ctx.chunk_bytes, type)), every participant transmits B + kFrameHeaderBytes * C bytes to each
// of the other size-1 participants: (size-1) * (B + 40 * C) in all.
//
// Tags: step s (1 <= s < size) carries the block from participant i to participant i+s (mod
// size), part = chunk.

#include <cstddef>

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

}  // namespace baton::collective
