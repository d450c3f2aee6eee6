#pragma once

// Ring all-gather: the second half of the ring all-reduce. Every participant contributes its
// segment and ends with everyone's.
//
// Buffers: one buffer of `count` elements per participant, filled in place. On entry segment
// SegmentOf(count, ring.size, r) (segments.h) of participant r's `data` holds its contribution
// (with count = size * m: m elements at [r*m, (r+1)*m), as NCCL's in-place all-gather); the rest
// is overwritten. On return every segment j holds participant j's contribution. An out-of-place
// caller copies its input into its segment of the output buffer first.
//
// Traffic: with S_j, cost() as in ring_all_reduce.h, participant r transmits
//   sum over j != r+1 of cost(S_j)      (indices mod size)
// to ring.next: about (size-1)/size * D bytes of payload for D = count * element size.
//
// Tags: steps 0 .. size-2, part = chunk.

#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type and sequence number; `type` only sets the
// element size. Errors: as RingAllReduce (on error `data` is left partly gathered).
absl::Status RingAllGather(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type);

}  // namespace baton::collective
