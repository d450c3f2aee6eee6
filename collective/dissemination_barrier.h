#pragma once

// Dissemination barrier (Hensgen, Finkel and Manber): in round k (0 <= k < ceil(log2 size))
// participant r sends an empty message to r + 2^k and waits for one from r - 2^k (mod size).
// After the last round every participant has heard, directly or through others, from every
// participant that entered the barrier, so none returns before all have called it.
//
// Traffic: every participant transmits ceil(log2 size) messages of no payload, one to each of
// its peers r + 2^k: ceil(log2 size) times the transport's per-message overhead (LinkStats,
// transport.h; 40 bytes on TCP). Nothing for a single participant.
//
// Tags: step k = round, part 0.

#include "absl/status/status.h"
#include "collective/op_context.h"

namespace baton::collective {

// Returns once every participant has entered the barrier with the same sequence number. Errors:
// InvalidArgument for a rank outside the participants or a missing address; transport errors
// annotated with this rank, the round and the peer. A participant that never arrives makes the
// others fail with DeadlineExceeded at ctx.deadline.
absl::Status DisseminationBarrier(const OpContext& ctx, const Participants& participants);

}  // namespace baton::collective
