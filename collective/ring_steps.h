#pragma once

// One participant's side of a ring schedule, shared by the ring all-reduce, reduce-scatter and
// all-gather: a sequence of steps in each of which it sends one range of its buffer to the next
// participant and receives another range from the previous one, folding what arrives into its
// own elements or storing it in place. Internal to collective/.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "collective/segments.h"

namespace baton::collective::internal {

class RingSteps {
 public:
  // `data` holds the operation's elements of `type` (a known type); `op` is used by reducing
  // steps only. ctx, ring and data must outlive this object.
  RingSteps(const OpContext& ctx, const Ring& ring, void* data, DataType type, ReduceOp op);

  // Sends `send` to ring.next and receives `recv` from ring.prev, each cut into chunks of
  // ChunkElements(ctx.chunk_bytes, type) tagged {ctx.comm, ctx.seq, step, chunk index}. What
  // arrives is folded into the buffer's copy of `recv` (op(own, received)) when `reduce`, and
  // otherwise stored there. A transport error comes back annotated with where() and the peer:
  // "<where()>: receiving from <ring.prev>: <error>".
  absl::Status Step(uint32_t step, const ElementRange& send, const ElementRange& recv, bool reduce,
                    absl::FunctionRef<std::string()> where);

 private:
  const OpContext& ctx_;
  const Ring& ring_;
  void* const data_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  std::unique_ptr<std::byte[]> scratch_;  // what a reducing step receives before folding it in
  size_t scratch_elements_ = 0;
};

}  // namespace baton::collective::internal
