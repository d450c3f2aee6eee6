#pragma once

// Broadcast from a root along the ring: a pipelined chain root -> root+1 -> ... -> root-1. Each
// participant forwards chunk k as soon as it has it, so all links carry chunks at once and the
// time is about (size - 2 + chunks) chunk transfers rather than (size - 1) whole buffers.
//
// Buffers: one buffer of `count` elements per participant. The root's `data` is read; every
// other participant's `data` is overwritten with it.
//
// Traffic: with D = count * element size and C = ChunkCount(count, ChainChunkElements(
// ctx.chunk_bytes, count, type)) and h the transport's per-message overhead (LinkStats,
// transport.h; 40 bytes on TCP), every participant except the root's predecessor (rank root-1 mod
// size) transmits D + h * C bytes to ring.next; the root's predecessor transmits nothing. In all
// (size-1) * D bytes of payload.
//
// Tags: step 0, part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same root, count, type and sequence number; `type` only
// sets the element size. Errors: InvalidArgument for a rank or root outside the ring, an unknown
// type or a byte count that overflows; transport errors annotated with this rank, the chunk and
// the neighbour (on error `data` is left partly overwritten).
absl::Status RingBroadcast(const OpContext& ctx, const Ring& ring, int root, void* data,
                           size_t count, DataType type);

}  // namespace baton::collective
