#pragma once

// Ring all-reduce over the transport interface: a reduce-scatter followed by an all-gather, with
// each step cut into chunks so that large buffers pipeline. Every participant calls it with the
// same count, type, op and sequence number.
//
// Traffic: with S_j = SegmentOf(count, size, j), e the element size, c = ChunkElements(
// ctx.chunk_bytes, type), h the transport's per-message overhead (LinkStats, transport.h; 40
// bytes on TCP) and cost(S) = |S|*e + h * ChunkCount(|S|, c) (payload plus h per message),
// participant r transmits
//   sum over j != r+1 of cost(S_j)  +  sum over j != r+2 of cost(S_j)      (indices mod size)
// all to ring.next: about 2(size-1)/size * D bytes of payload for D = count*e, exactly that plus
// 2h(size-1) * ChunkCount(count/size, c) when size divides count.
//
// Tags: steps 0 .. size-2 (reduce-scatter) and size-1 .. 2*size-3 (all-gather), part = chunk.

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Reduces `count` elements at `data` in place across the ring: on return every participant holds
// op(participant 0's data, ..., participant size-1's data). ReduceOp::kAvg is reduced as a sum;
// the caller divides once at the end (ctx.kernels->Divide). Errors come from the transport,
// annotated with this rank, the phase and step, and the neighbour it was sending to or receiving
// from; on error `data` is left partly reduced. A lost neighbour shows up as Unavailable; ranks
// further away only see DeadlineExceeded at ctx.deadline unless the caller aborts the
// communicator on their endpoints. InvalidArgument for a rank outside the ring, an unknown type
// or reduce op, or a byte count that overflows.
absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type, ReduceOp op);

// The same out of place: reads `send` and writes the result to `recv` (both `count` elements;
// send may equal recv, else they must not overlap). Reads each input element once, instead of
// copying send to recv first. Same traffic, tags and errors as the in-place form.
absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, const void* send, void* recv,
                           size_t count, DataType type, ReduceOp op);

// The same with several inputs that stand for this participant together (a daemon's local ranks):
// the result is op over every participant's every input, written to `recv`. Each input element is
// read once, as the ring needs it, so the inputs are never reduced into a buffer first. One input
// may be `recv` itself; the others must not overlap it. Same traffic, tags and errors.
absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring,
                           std::span<const void* const> inputs, void* recv, size_t count,
                           DataType type, ReduceOp op);

}  // namespace baton::collective
