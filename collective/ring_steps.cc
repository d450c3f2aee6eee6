#include "collective/ring_steps.h"

#include <algorithm>

#include "collective/op_checks.h"
#include "collective/reduce.h"
#include "common/status_macros.h"

// The sends run one chunk ahead of the receives (send k+1, then receive and reduce k), so while
// we wait for and reduce chunk k the transport is already carrying chunk k+1. That never
// deadlocks: every participant sends before it receives, and the transport accepts messages
// nobody has asked for yet. It also bounds what a receiver holds unasked to about two chunks per
// peer.

namespace baton::collective::internal {

RingSteps::RingSteps(const OpContext& ctx, const Ring& ring, void* data, DataType type, ReduceOp op)
    : ctx_(ctx),
      ring_(ring),
      data_(data),
      type_(type),
      op_(op),
      element_size_(DataTypeSize(type)),
      chunk_elements_(ChunkElements(ctx.chunk_bytes, type)) {}

absl::Status RingSteps::Step(uint32_t step, const ElementRange& send, const ElementRange& recv,
                             bool reduce, absl::FunctionRef<std::string()> where) {
  const size_t send_chunks = ChunkCount(send.length, chunk_elements_);
  const size_t recv_chunks = ChunkCount(recv.length, chunk_elements_);
  if (reduce && recv_chunks > 0) {
    // Sized once for the largest chunk a step receives; the first reducing step has it.
    const size_t needed = std::min(chunk_elements_, recv.length);
    if (needed > scratch_elements_) {
      scratch_ = std::make_unique_for_overwrite<std::byte[]>(needed * element_size_);
      scratch_elements_ = needed;
    }
  }
  auto tag = [&](size_t part) {
    return transport::Tag{ctx_.comm, ctx_.seq, step, static_cast<uint32_t>(part)};
  };
  size_t sent = 0;
  auto send_next = [&]() -> absl::Status {
    if (sent == send_chunks) return absl::OkStatus();
    const transport::ByteSpan bytes =
        BytesOf(data_, element_size_, ChunkOf(send, chunk_elements_, sent));
    const absl::Status status = ctx_.endpoint->Send(ring_.next, tag(sent), bytes, ctx_.deadline);
    ++sent;
    if (!status.ok()) return AnnotateTransportError(status, where(), "sending to", ring_.next);
    return absl::OkStatus();
  };
  BATON_RETURN_IF_ERROR(send_next());
  for (size_t part = 0; part < recv_chunks; ++part) {
    BATON_RETURN_IF_ERROR(send_next());
    const ElementRange chunk = ChunkOf(recv, chunk_elements_, part);
    const transport::ByteSpan own = BytesOf(data_, element_size_, chunk);
    const transport::ByteSpan into = reduce ? transport::ByteSpan(scratch_.get(), own.size()) : own;
    const absl::Status status = ctx_.endpoint->Recv(ring_.prev, tag(part), into, ctx_.deadline);
    if (!status.ok()) return AnnotateTransportError(status, where(), "receiving from", ring_.prev);
    if (reduce) {
      PhaseTimer timer(ReduceSlot(ctx_));
      ReduceInto(type_, op_, own.data(), into.data(), chunk.length);
    }
  }
  while (sent < send_chunks) BATON_RETURN_IF_ERROR(send_next());
  return absl::OkStatus();
}

}  // namespace baton::collective::internal
