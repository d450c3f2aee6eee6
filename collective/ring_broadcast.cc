#include "collective/ring_broadcast.h"

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// Sends return once the transport has the bytes, so the root streams every chunk out without
// waiting, and each link of the chain carries chunk k+1 while the next participant forwards
// chunk k. Receives are posted in chunk order; the transport holds chunks that arrive earlier.

namespace baton::collective {

absl::Status RingBroadcast(const OpContext& ctx, const Ring& ring, int root, void* data,
                           size_t count, DataType type) {
  constexpr absl::string_view kWhat = "ring broadcast";
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, ring.rank, ring.size));
  if (root < 0 || root >= ring.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring broadcast: root ", root, " is not among ", ring.size, " participants"));
  }
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  if (ring.size == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckRingLinks(kWhat, ctx, ring));
  if (data == nullptr) return absl::InvalidArgumentError("ring broadcast: needs a buffer");
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, count));

  const int n = ring.size;
  const int distance = (ring.rank - root + n) % n;  // hops from the root
  const bool receives = distance != 0;
  const bool sends = distance != n - 1;
  const size_t element_size = DataTypeSize(type);
  const size_t chunk_elements = ChainChunkElements(ctx.chunk_bytes, count, type);
  const size_t chunks = ChunkCount(count, chunk_elements);
  auto where = [&](size_t part) {
    return absl::StrCat("ring broadcast rank ", ring.rank, "/", n, " (root ", root, "), chunk ",
                        part + 1, "/", chunks);
  };
  for (size_t part = 0; part < chunks; ++part) {
    const transport::ByteSpan bytes =
        internal::BytesOf(data, element_size, ChunkOf({0, count}, chunk_elements, part));
    const transport::Tag tag{ctx.comm, ctx.seq, ctx.first_step, static_cast<uint32_t>(part)};
    if (receives) {
      const absl::Status status = ctx.endpoint->Recv(ring.prev, tag, bytes, ctx.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(part), "receiving from", ring.prev);
      }
    }
    if (sends) {
      const absl::Status status = ctx.endpoint->Send(ring.next, tag, bytes, ctx.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(part), "sending to", ring.next);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
