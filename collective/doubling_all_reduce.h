#pragma once

// Recursive-doubling all-reduce (MPICH's MPIR_Allreduce_intra_recursive_doubling, Thakur et al.
// 2005): in step k every participant exchanges its whole buffer with the partner whose index
// differs in bit k and both fold the two buffers together, so after log2(P) steps all P hold the
// result. It takes the fewest message latencies of any all-reduce (ceil(log2 size) exchanges, plus
// two when the size is not a power of two), at the price of sending the whole buffer in every
// step: it suits small buffers, where latency is all there is.
//
// Sizes that are not a power of two: with p the largest power of two <= size and extra = size - p,
// participants 2i and 2i+1 for i < extra pair up first: 2i sends its buffer to 2i+1, which folds
// it in and takes part in the p-way exchange for both; at the end it sends the result back to 2i.
//
// Buffers: one buffer of `count` elements per participant, reduced in place. Every participant
// ends with the same bits: partners fold in a fixed order (the lower participant's operand
// first), whichever of them computes.
//
// Traffic: every step sends the whole buffer, in chunks of ChunkElements(ctx.chunk_bytes, type):
// log2(p) * D bytes of payload per participant of the exchange for D = count * element size, plus
// D for each participant of a pair. Scratch: one chunk.
//
// Tags: step 0 = pairing in, 1 + k = exchange k, 1 + log2(p) = pairing out; part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type, op and sequence number, and the same
// participant list. ReduceOp::kAvg is reduced as a sum; the caller divides once at the end
// (ctx.kernels->Divide). Errors: InvalidArgument for a rank outside the participants, a
// missing address, an unknown type or op, or a byte count that overflows; transport errors
// annotated with this rank, the step and chunk, and the peer (on error `data` is left partly
// reduced).
absl::Status DoublingAllReduce(const OpContext& ctx, const Participants& participants, void* data,
                               size_t count, DataType type, ReduceOp op);

// Message latencies on the critical path for `size` participants: ceil(log2 size) exchanges,
// plus 2 when size is not a power of two (0 for size 1). For the tuner.
int DoublingSteps(int size);

}  // namespace baton::collective
