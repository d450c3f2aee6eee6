#pragma once

// Ring all-reduce over the transport interface: a reduce-scatter followed by an all-gather, with
// each step cut into chunks so that large buffers pipeline. Every participant calls it with the
// same count, type, op and sequence number.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "transport/transport.h"

namespace baton::collective {

// This participant's place in a ring of endpoints.
struct Ring {
  int rank = 0;      // position in the ring, 0 <= rank < size
  int size = 1;      // number of participants
  std::string prev;  // endpoint address of position (rank - 1 + size) % size
  std::string next;  // endpoint address of position (rank + 1) % size
};

// What every algorithm needs to run one operation.
struct OpContext {
  transport::Endpoint* endpoint = nullptr;  // not owned
  uint64_t comm = 0;                        // the communicator's tag
  uint64_t seq = 0;                         // the operation's sequence number
  absl::Time deadline = absl::InfiniteFuture();
  size_t chunk_bytes = size_t{1} << 20;  // largest message the pipeline sends at once
};

// Reduces `count` elements at `data` in place across the ring: on return every participant holds
// op(participant 0's data, ..., participant size-1's data). ReduceOp::kAvg is reduced as a sum;
// the caller divides once at the end (DivideInPlace in reduce.h). Errors come from the transport,
// annotated with this rank, the phase and step, and the neighbour it was sending to or receiving
// from; on error `data` is left partly reduced. A lost neighbour shows up as Unavailable; ranks
// further away only see DeadlineExceeded at ctx.deadline unless the caller aborts the
// communicator on their endpoints. InvalidArgument for a rank outside the ring, an unknown type,
// or a byte count that overflows.
absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type, ReduceOp op);

}  // namespace baton::collective
