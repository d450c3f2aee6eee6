#include "collective/ring_steps.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "collective/op_checks.h"
#include "collective/reduce.h"
#include "common/status_macros.h"

// Why this order never deadlocks: every participant issues sends before its first receive, a
// send of step i+1 needs only a receive of step i, and the transport accepts messages nobody has
// asked for yet. Keeping sends at most two chunks ahead of receives bounds what a receiver holds
// unasked to a few chunks per peer.

namespace baton::collective::internal {
namespace {

constexpr size_t kSendsAhead = 2;
// Receives posted at once, the one waited for included; also the scratch chunks of a reduction.
constexpr size_t kRecvWindow = 4;

}  // namespace

RingSteps::RingSteps(const OpContext& ctx, const Ring& ring, void* data, DataType type, ReduceOp op,
                     std::span<const void* const> inputs)
    : ctx_(ctx),
      ring_(ring),
      data_(data),
      inputs_(inputs.empty() ? std::vector<const void*>{data}
                             : std::vector<const void*>(inputs.begin(), inputs.end())),
      type_(type),
      op_(op),
      element_size_(DataTypeSize(type)),
      chunk_elements_(ChunkElements(ctx.chunk_bytes, type)) {}

std::vector<const void*> RingSteps::InputsOf(const ElementRange& chunk, const void* extra) const {
  std::vector<const void*> sources;
  sources.reserve(inputs_.size() + 1);
  for (const void* input : inputs_) sources.push_back(BytesOf(input, element_size_, chunk).data());
  if (extra != nullptr) sources.push_back(extra);
  return sources;
}

absl::Status RingSteps::Run(std::span<const RingStep> steps,
                            absl::FunctionRef<std::string(size_t)> where) {
  // Every receive of the schedule, in the order they are waited for.
  struct Receive {
    size_t step;
    size_t part;
  };
  std::vector<Receive> receives;
  bool reducing = false;
  size_t needed = 0;  // elements of the largest chunk a reducing step receives
  for (size_t i = 0; i < steps.size(); ++i) {
    const size_t chunks = ChunkCount(steps[i].recv.length, chunk_elements_);
    for (size_t part = 0; part < chunks; ++part) receives.push_back({i, part});
    if (steps[i].reduce) {
      reducing = true;
      needed = std::max(needed, std::min(chunk_elements_, steps[i].recv.length));
    }
  }
  // Receive r of a reducing step lands in scratch slot r % kRecvWindow, which is free again once
  // receive r - kRecvWindow has been folded in.
  if (reducing && needed * kRecvWindow > scratch_elements_) {
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(needed * kRecvWindow * element_size_);
    scratch_elements_ = needed * kRecvWindow;
  }
  auto scratch_slot = [&](size_t r, size_t bytes) {
    return transport::ByteSpan(scratch_.get() + (r % kRecvWindow) * needed * element_size_, bytes);
  };

  auto tag_of = [&](size_t step, size_t part) {
    return transport::Tag{ctx_.comm, ctx_.seq, ctx_.first_step + static_cast<uint32_t>(step),
                          static_cast<uint32_t>(part)};
  };

  struct Send {
    size_t step;
    size_t part;
  };
  std::deque<Send> ready;  // in step order: steps are queued as their data becomes final
  auto queue_all = [&](size_t i) {
    const size_t chunks = ChunkCount(steps[i].send.length, chunk_elements_);
    for (size_t k = 0; k < chunks; ++k) ready.push_back({i, k});
  };
  auto chained = [&](size_t i) { return i > 0 && steps[i].send == steps[i - 1].recv; };
  size_t issued = 0;
  size_t received = 0;
  auto issue = [&]() -> absl::Status {
    const Send next = ready.front();
    ready.pop_front();
    ++issued;
    const RingStep& step = steps[next.step];
    const ElementRange chunk = ChunkOf(step.send, chunk_elements_, next.part);
    if (step.send_from_input && inputs_.size() > 1) {
      // Several inputs: their reduction is what goes out; it is built in the buffer, which no
      // step has written there yet.
      PhaseTimer timer(ReduceSlot(ctx_));
      ReduceMany(type_, op_, BytesOf(data_, element_size_, chunk).data(), InputsOf(chunk, nullptr),
                 chunk.length);
    }
    const transport::ConstByteSpan bytes =
        BytesOf(step.send_from_input && inputs_.size() == 1 ? inputs_.front() : data_,
                element_size_, chunk);
    const absl::Status status =
        ctx_.endpoint->Send(ring_.next, tag_of(next.step, next.part), bytes, ctx_.deadline);
    if (!status.ok()) {
      return AnnotateTransportError(status, where(next.step), "sending to", ring_.next);
    }
    return absl::OkStatus();
  };

  // Receives posted ahead of the one waited for, so that chunks arriving early go straight to
  // where they belong. A reducing step's receive may be posted any time (it lands in scratch); a
  // storing step's only once its step is current and no earlier step's send is still to go out
  // (the chunk overwrites the buffer, which such a send may still have to read).
  std::deque<std::unique_ptr<transport::PostedRecv>> posted;
  size_t next_post = 0;
  auto post_ahead = [&](size_t current_step) {
    while (next_post < receives.size() && next_post < received + kRecvWindow) {
      const Receive& r = receives[next_post];
      const RingStep& step = steps[r.step];
      if (!step.reduce &&
          (r.step != current_step || (!ready.empty() && ready.front().step < r.step))) {
        return;
      }
      const ElementRange chunk = ChunkOf(step.recv, chunk_elements_, r.part);
      const transport::ByteSpan own = BytesOf(data_, element_size_, chunk);
      posted.push_back(ctx_.endpoint->PostRecv(
          ring_.prev, tag_of(r.step, r.part),
          step.reduce ? scratch_slot(next_post, own.size()) : own, ctx_.deadline, nullptr));
      ++next_post;
    }
  };

  if (!steps.empty()) queue_all(0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const RingStep& step = steps[i];
    const bool next_chained = i + 1 < steps.size() && chained(i + 1);
    const size_t chunks = ChunkCount(step.recv.length, chunk_elements_);
    for (size_t part = 0; part < chunks; ++part) {
      // A receive stored straight into the buffer must not overwrite data still waiting to go
      // out from an earlier step.
      while (!step.reduce && !ready.empty() && ready.front().step < i) {
        BATON_RETURN_IF_ERROR(issue());
      }
      post_ahead(i);
      while (!ready.empty() && issued < received + kSendsAhead) BATON_RETURN_IF_ERROR(issue());
      // This step's receive is posted now: it is within the window, and a storing step's sends of
      // earlier steps have all gone out above.
      const absl::Status status = posted.front()->Wait();
      posted.pop_front();
      if (!status.ok())
        return AnnotateTransportError(status, where(i), "receiving from", ring_.prev);
      if (step.reduce) {
        const ElementRange chunk = ChunkOf(step.recv, chunk_elements_, part);
        const transport::ByteSpan own = BytesOf(data_, element_size_, chunk);
        const transport::ByteSpan into = scratch_slot(received, own.size());
        PhaseTimer timer(ReduceSlot(ctx_));
        if (step.own_from_input && !(inputs_.size() == 1 && inputs_.front() == data_)) {
          ReduceMany(type_, op_, own.data(), InputsOf(chunk, into.data()), chunk.length);
        } else {
          ReduceInto(type_, op_, own.data(), into.data(), chunk.length);
        }
      }
      ++received;
      // Chained: the next step sends exactly this chunk, which is final now.
      if (next_chained) ready.push_back({i + 1, part});
    }
    if (i + 1 < steps.size() && !next_chained) queue_all(i + 1);
  }
  while (!ready.empty()) BATON_RETURN_IF_ERROR(issue());
  return absl::OkStatus();
}

}  // namespace baton::collective::internal
