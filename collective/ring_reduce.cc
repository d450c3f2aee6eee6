#include "collective/ring_reduce.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/registered_memory.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// The chain's first participant streams its chunks out without waiting (sends return once the
// transport has the bytes); every later one receives chunk k, folds its own chunk k into it and
// sends it on before asking for chunk k+1, which the transport meanwhile holds. The partial
// result travels in the scratch buffer so that only the root's buffer changes.

namespace baton::collective {

absl::Status RingReduce(const OpContext& ctx, const Ring& ring, int root, void* data, size_t count,
                        DataType type, ReduceOp op) {
  constexpr absl::string_view kWhat = "ring reduce";
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, ring.rank, ring.size));
  if (root < 0 || root >= ring.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring reduce: root ", root, " is not among ", ring.size, " participants"));
  }
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (ring.size == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckRingLinks(kWhat, ctx, ring));
  if (data == nullptr) return absl::InvalidArgumentError("ring reduce: needs a buffer");
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, count));

  const int n = ring.size;
  const int position = (ring.rank - root - 1 + n) % n;  // 0 starts the chain, n-1 is the root
  const bool receives = position != 0;
  const bool is_root = position == n - 1;
  const size_t element_size = DataTypeSize(type);
  const size_t chunk_elements = ChainChunkElements(ctx.chunk_bytes, count, type);
  const size_t chunks = ChunkCount(count, chunk_elements);
  ScratchPool::Buffer scratch;
  if (receives) scratch = TakeScratch(ctx, std::min(chunk_elements, count) * element_size);
  auto where = [&](size_t part) {
    return absl::StrCat("ring reduce rank ", ring.rank, "/", n, " (root ", root, "), chunk ",
                        part + 1, "/", chunks);
  };
  for (size_t part = 0; part < chunks; ++part) {
    const ElementRange chunk = ChunkOf({0, count}, chunk_elements, part);
    const transport::ByteSpan own = internal::BytesOf(data, element_size, chunk);
    const transport::Tag tag{ctx.comm, ctx.seq, ctx.first_step, static_cast<uint32_t>(part)};
    transport::ByteSpan outgoing = own;
    if (receives) {
      const transport::ByteSpan partial(scratch.data(), own.size());
      const absl::Status status = ctx.endpoint->Recv(ring.prev, tag, partial, ctx.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(part), "receiving from", ring.prev);
      }
      PhaseTimer timer(ReduceSlot(ctx));
      if (is_root) {
        ctx.kernels->ReduceInto(type, op, own.data(), partial.data(), chunk.length);
        continue;
      }
      ctx.kernels->ReduceInto(type, op, partial.data(), own.data(), chunk.length);
      outgoing = partial;
    }
    const absl::Status status = ctx.endpoint->Send(ring.next, tag, outgoing, ctx.deadline);
    if (!status.ok()) {
      return internal::AnnotateTransportError(status, where(part), "sending to", ring.next);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
