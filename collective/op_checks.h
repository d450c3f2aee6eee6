#pragma once

// Argument checks and small helpers that every algorithm in collective/ shares. Internal to
// collective/: callers see the checks' errors, not these functions. Every error is
// InvalidArgument and starts with `what`, the operation's name ("ring reduce-scatter").

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "collective/segments.h"
#include "transport/transport.h"

namespace baton::collective::internal {

// rank within [0, size) and size >= 1.
absl::Status CheckRank(absl::string_view what, int rank, int size);

// A known type whose `count` elements, times `blocks`, fit in the address space.
absl::Status CheckElements(absl::string_view what, DataType type, size_t count, size_t blocks = 1);

// One of the ReduceOp values.
absl::Status CheckReduceOp(absl::string_view what, ReduceOp op);

// A ring's rank and size, its neighbours' addresses, and an endpoint.
absl::Status CheckRingLinks(absl::string_view what, const OpContext& ctx, const Ring& ring);

// An endpoint and every participant's address.
absl::Status CheckParticipantLinks(absl::string_view what, const OpContext& ctx,
                                   const Participants& participants);

// `length` elements of `type` at ctx.chunk_bytes per message need at most 2^32 messages (the
// tag's part number is 32 bits).
absl::Status CheckChunkCount(absl::string_view what, const OpContext& ctx, DataType type,
                             size_t length);

// The bytes of `range` in a buffer of elements of `element_size` bytes starting at `data`.
transport::ByteSpan BytesOf(void* data, size_t element_size, const ElementRange& range);
transport::ConstByteSpan BytesOf(const void* data, size_t element_size, const ElementRange& range);

// A transport error annotated with where it happened: "<where>: <what> <peer>: <message>".
absl::Status AnnotateTransportError(const absl::Status& status, absl::string_view where,
                                    absl::string_view what, const std::string& peer);

}  // namespace baton::collective::internal
