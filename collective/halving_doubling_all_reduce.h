#pragma once

// Halving-doubling all-reduce (Rabenseifner's algorithm; MPICH's
// MPIR_Allreduce_intra_reduce_scatter_allgather, Gloo's AllreduceHalvingDoubling): a
// reduce-scatter by recursive halving, then an all-gather by recursive doubling. In halving step
// k every participant exchanges half of its current range with the partner whose index differs in
// the k-th highest bit, keeps the other half and folds the partner's copy of it in; after log2(P)
// steps each holds one reduced block, and the all-gather retraces the steps in reverse, swapping
// blocks. It takes 2·log2(P) message latencies, like two rounds of recursive doubling, but moves
// only 2(P−1)/P of the buffer per participant, like the ring: it suits the middle sizes, between
// doubling (latency-bound) and the ring (many pipelined chunks).
//
// Sizes that are not a power of two pair up first, as in doubling_all_reduce.h: participant 2i
// hands its buffer to 2i+1 for the halving and doubling, and gets the result back at the end.
//
// Buffers: one buffer of `count` elements per participant, reduced in place; every participant
// ends with the same bits (each block is reduced once and copied; partners fold the lower
// participant's operand first).
//
// Ranges: a range of r elements splits into its first ceil(r/2) and its last floor(r/2)
// elements; the participant whose bit is clear keeps the first half.
//
// Traffic: each range exchanged once per direction, in chunks of ChunkElements(ctx.chunk_bytes,
// type); about 2(P−1)/P · D bytes of payload per participant for D = count · element size, plus
// D each way for a pair. Scratch: one chunk.
//
// Tags: step 0 = pairing in; 1 + k = halving step k; 1 + L + k = doubling step k (L = log2 P);
// 1 + 2L = pairing out; part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type, op and sequence number, and the same
// participant list. ReduceOp::kAvg is reduced as a sum; the caller divides once at the end.
// Errors as DoublingAllReduce's.
absl::Status HalvingDoublingAllReduce(const OpContext& ctx, const Participants& participants,
                                      void* data, size_t count, DataType type, ReduceOp op);

}  // namespace baton::collective
