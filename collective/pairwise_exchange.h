#pragma once

// What the recursive-doubling and halving-doubling all-reduces share (internal to collective/):
// the pairing that folds a participant count down to a power of two, and the exchanges between
// two partners over ranges of one buffer, chunk by chunk, each side posting its receive before it
// sends. No deadlock: partners in a step post, send, then wait, and sends never wait for the
// receiver (the transport holds early messages).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "collective/registered_memory.h"
#include "collective/segments.h"

namespace baton::collective::internal {

// The largest power of two p <= size takes part in the exchanges; participants 2i and 2i+1 for
// i < size - p pair up first: 2i hands its buffer to 2i+1 and gets the result back at the end.
struct Pairing {
  Pairing(int size, int rank);

  int p;      // participants in the exchanges
  int extra;  // pairs
  int rank;
  // This participant only hands its buffer over (2i of a pair).
  bool handed_over() const { return rank < 2 * extra && rank % 2 == 0; }
  // This participant exchanges for a pair (2i+1), receiving from and returning to rank - 1.
  bool holds_pair() const { return rank < 2 * extra && rank % 2 == 1; }
  // This participant's index among the p, and the participant with index i.
  int index() const { return rank < 2 * extra ? rank / 2 : rank - extra; }
  int Participant(int i) const { return i < extra ? 2 * i + 1 : i + extra; }
  int levels() const;  // log2(p)
};

class PairwiseExchange {
 public:
  // `what` names the algorithm in errors ("doubling all-reduce"). ctx, participants and data must
  // outlive this object.
  PairwiseExchange(absl::string_view what, const OpContext& ctx, const Participants& participants,
                   void* data, size_t count, DataType type, ReduceOp op);

  // Sends `give` to `partner` while receiving the partner's copy of `keep` and folding it into
  // this participant's `keep`, the lower participant's operand first (so both sides of a pair
  // would compute the same bits). Either range may be empty.
  absl::Status Fold(uint32_t step, int partner, const ElementRange& keep, const ElementRange& give);
  // Sends `mine` to `partner` while receiving the partner's `theirs` in place.
  absl::Status Swap(uint32_t step, int partner, const ElementRange& mine,
                    const ElementRange& theirs);
  absl::Status Send(uint32_t step, int peer, const ElementRange& range);
  absl::Status Recv(uint32_t step, int peer, const ElementRange& range);

  // Runs `exchanges` (the steps among the p) inside the pairing: a participant that hands its
  // buffer over sends it (step 0) and receives the result (`last_step`) without running them; one
  // that holds a pair folds its partner's buffer in first (step 0) and sends the result back
  // (`last_step`) after them.
  absl::Status RunPaired(const Pairing& pairing, uint32_t last_step,
                         absl::FunctionRef<absl::Status()> exchanges);

  ElementRange whole() const { return ElementRange{0, count_}; }

 private:
  // Chunk `part` of `in` is received from `partner` (into scratch when `fold`, else in place)
  // while chunk `part` of `out` is sent to it, for every part of either.
  absl::Status Exchange(uint32_t step, int partner, const ElementRange& in, bool fold,
                        const ElementRange& out);
  absl::Status SendChunk(uint32_t step, size_t part, int peer, const ElementRange& chunk);
  transport::Tag Tag(uint32_t step, size_t part) const;
  std::string Where(uint32_t step, size_t part) const;

  const std::string what_;
  const OpContext& ctx_;
  const Participants& participants_;
  void* const data_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  ScratchPool::Buffer scratch_;  // one chunk received from the partner, to fold in
};

// What both pairwise all-reduces share: checks the arguments (InvalidArgument for a rank outside
// the participants, a missing address, an unknown type or op, a byte count that overflows, or no
// buffer; nothing to do for one participant or no elements), pairs the participants up to a
// power of two and runs `exchanges` inside the pairing (RunPaired), whose steps are 1 to
// `steps_per_level` × levels (its last step follows them).
absl::Status RunPairwiseAllReduce(
    absl::string_view what, const OpContext& ctx, const Participants& participants, void* data,
    size_t count, DataType type, ReduceOp op, uint32_t steps_per_level,
    absl::FunctionRef<absl::Status(const Pairing&, PairwiseExchange&)> exchanges);

}  // namespace baton::collective::internal
