#pragma once

// One participant's side of a ring schedule, shared by the ring all-reduce, reduce-scatter and
// all-gather: a sequence of steps in each of which it sends one range of its buffer to the next
// participant and receives another range from the previous one, folding what arrives into its
// own elements or storing it in place. Internal to collective/.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "collective/segments.h"

namespace baton::collective::internal {

// One step of a ring schedule.
struct RingStep {
  ElementRange send;    // sent to ring.next
  ElementRange recv;    // received from ring.prev
  bool reduce = false;  // fold what arrives into the buffer (op(own, received)); else store it
  // With input buffers (an out-of-place operation, or several local inputs), these read them
  // instead of the buffer: the data sent (the inputs' reduction, when there are several), and the
  // own operands of a reducing step (whose result still goes to the buffer). They let a schedule
  // read each input element once instead of reducing or copying the inputs into the buffer first.
  bool send_from_input = false;
  bool own_from_input = false;
};

class RingSteps {
 public:
  // `data` holds the operation's elements of `type` (a known type); `op` is used by reducing
  // steps and by several inputs. `inputs` (may be empty: `data` itself; one may be `data`; the
  // others must not overlap it) is what steps marked *_from_input read instead of `data`: their
  // element-wise reduction stands for this participant's contribution. ctx, ring, data and the
  // inputs must outlive this object.
  RingSteps(const OpContext& ctx, const Ring& ring, void* data, DataType type, ReduceOp op,
            std::span<const void* const> inputs = {});

  // Runs `steps` in order. Step i sends its `send` range to ring.next and receives its `recv`
  // range from ring.prev, each cut into chunks of ChunkElements(ctx.chunk_bytes, type) tagged
  // {ctx.comm, ctx.seq, i, chunk index}.
  //
  // The schedule is pipelined across steps: when step i+1 sends exactly what step i received
  // (the ring's chain), its chunk k goes out as soon as step i's chunk k has arrived, rather than
  // after all of step i; otherwise step i+1's sends wait for all of step i's receives. Sends stay
  // two chunks ahead of receives, so the link never idles at a step boundary. A transport error
  // comes back annotated with where(i) and the peer: "<where(i)>: receiving from <ring.prev>: ...".
  absl::Status Run(std::span<const RingStep> steps, absl::FunctionRef<std::string(size_t)> where);

 private:
  const OpContext& ctx_;
  const Ring& ring_;
  // A step's *_from_input operands for `chunk`: the inputs' bytes, then `extra` if not null.
  std::vector<const void*> InputsOf(const ElementRange& chunk, const void* extra) const;

  void* const data_;
  const std::vector<const void*> inputs_;  // never empty: {data_} when none were given
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
};

}  // namespace baton::collective::internal
