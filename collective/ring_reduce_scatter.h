#pragma once

// Ring reduce-scatter: the first half of the ring all-reduce, arranged so that every participant
// ends with its own segment reduced.
//
// Buffers: one buffer of `count` elements per participant, reduced in place. Participant r owns
// segment SegmentOf(count, ring.size, r) (segments.h): the even split, so with count = size * m
// every participant owns m elements, participant r elements [r*m, (r+1)*m). On return that
// segment of `data` holds op(participant 0's segment, ..., participant size-1's segment); the
// rest of `data` holds partial reductions (unspecified). An out-of-place caller copies its input
// in first and its segment out afterwards.
//
// Traffic: with S_j, cost() as in ring_all_reduce.h, participant r transmits
//   sum over j != r of cost(S_j)
// to ring.next: about (size-1)/size * D bytes of payload for D = count * element size.
//
// Tags: steps 0 .. size-2, part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type, op and sequence number. ReduceOp::kAvg is
// reduced as a sum; the caller divides its segment (ctx.kernels->Divide). Errors: as
// RingAllReduce (transport errors annotated with this rank, the step and the neighbour; on error
// `data` is left partly reduced).
absl::Status RingReduceScatter(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                               DataType type, ReduceOp op);

}  // namespace baton::collective
