#pragma once

// Reduce to a root along the ring: a pipelined chain root+1 -> root+2 -> ... -> root. Each
// participant folds its own chunk k into the partial result it receives and passes it on at
// once, so all links carry chunks at the same time.
//
// Buffers: one buffer of `count` elements per participant. On return the root's `data` holds
// op(every participant's data); the other participants' `data` is left unchanged (they reduce
// into a one-chunk scratch buffer). The result is combined in chain order, root+1 first.
//
// Traffic: with D = count * element size and C = ChunkCount(count, ChainChunkElements(
// ctx.chunk_bytes, count, type)) and h the transport's per-message overhead (LinkStats,
// transport.h; 40 bytes on TCP), every participant except the root transmits D + h * C bytes to
// ring.next; the root transmits nothing. In all (size-1) * D bytes of payload.
//
// Tags: step 0, part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same root, count, type, op and sequence number.
// ReduceOp::kAvg is reduced as a sum; the root divides (ctx.kernels->Divide). Errors:
// InvalidArgument for a rank or root outside the ring, an unknown type or op, or a byte count
// that overflows; transport errors annotated with this rank, the chunk and the neighbour (on
// error the root's `data` is left partly reduced).
absl::Status RingReduce(const OpContext& ctx, const Ring& ring, int root, void* data, size_t count,
                        DataType type, ReduceOp op);

}  // namespace baton::collective
