#include "collective/ring_steps.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "common/status_macros.h"

// Why this order never deadlocks: every participant issues sends before its first receive, a
// send of step i+1 needs only a receive of step i, and the transport accepts messages nobody has
// asked for yet. Keeping sends at most two chunks ahead of receives bounds what a receiver holds
// unasked to a few chunks per peer.
//
// A reducing step's chunk is folded into the buffer as it arrives, piece by piece, by whichever
// thread reads it (Endpoint::PostConsume), while the pieces are still in the cache; so such a
// receive is posted only once no send still to go out reads the range it writes.

namespace baton::collective::internal {
namespace {

constexpr size_t kSendsAhead = 2;
// Receives posted at once, the one waited for included.
constexpr size_t kRecvWindow = 4;

bool Overlap(const ElementRange& a, const ElementRange& b) {
  return a.length > 0 && b.length > 0 && a.begin < b.begin + b.length &&
         b.begin < a.begin + a.length;
}

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
  // Per step: its chunks still to be sent.
  std::vector<size_t> unsent(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const size_t chunks = ChunkCount(steps[i].recv.length, chunk_elements_);
    for (size_t part = 0; part < chunks; ++part) receives.push_back({i, part});
    unsent[i] = ChunkCount(steps[i].send.length, chunk_elements_);
  }
  size_t first_unsent = 0;  // the first step with chunks still to be sent

  // The reduction time of the consumers, which run in the transport's threads while this one
  // waits; moved from the operation's transport time to its reduction time at the end (the
  // receives they ran for are complete by then).
  std::atomic<int64_t> consumed_ns{0};
  auto consumer = [&](const RingStep& step,
                      const ElementRange& chunk) -> transport::Endpoint::PieceConsumer {
    std::byte* const own = BytesOf(data_, element_size_, chunk).data();
    const bool from_inputs =
        step.own_from_input && !(inputs_.size() == 1 && inputs_.front() == data_);
    return [this, own, chunk, from_inputs, &consumed_ns](size_t offset,
                                                         transport::ConstByteSpan piece) {
      const auto start = std::chrono::steady_clock::now();
      const size_t length = piece.size() / element_size_;
      if (from_inputs) {
        const ElementRange part{chunk.begin + offset / element_size_, length};
        ctx_.kernels->ReduceMany(type_, op_, own + offset, InputsOf(part, piece.data()), length);
      } else {
        ctx_.kernels->ReduceInto(type_, op_, own + offset, piece.data(), length);
      }
      consumed_ns.fetch_add((std::chrono::steady_clock::now() - start).count(),
                            std::memory_order_relaxed);
    };
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
    --unsent[next.step];
    while (first_unsent < steps.size() && unsent[first_unsent] == 0) ++first_unsent;
    const ElementRange chunk = ChunkOf(step.send, chunk_elements_, next.part);
    if (step.send_from_input && inputs_.size() > 1) {
      // Several inputs: their reduction is what goes out; it is built in the buffer, which no
      // step has written there yet.
      PhaseTimer timer(ReduceSlot(ctx_));
      ctx_.kernels->ReduceMany(type_, op_, BytesOf(data_, element_size_, chunk).data(),
                               InputsOf(chunk, nullptr), chunk.length);
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
  // where they belong. A reducing step's receive is posted once no earlier step's send that reads
  // its range is still to go out (it changes the range as it arrives); a storing step's only once
  // its step is current and no earlier step's send is still to go out (the chunk overwrites the
  // buffer, which such a send may still have to read).
  auto can_post = [&](const Receive& r, size_t current_step) {
    const RingStep& step = steps[r.step];
    if (!step.reduce) {
      return r.step == current_step && (ready.empty() || ready.front().step >= r.step);
    }
    const ElementRange chunk = ChunkOf(step.recv, chunk_elements_, r.part);
    for (size_t k = first_unsent; k < r.step; ++k) {
      if (unsent[k] > 0 && Overlap(steps[k].send, chunk)) return false;
    }
    return true;
  };
  std::deque<std::unique_ptr<transport::PostedRecv>> posted;
  size_t next_post = 0;
  auto post_ahead = [&](size_t current_step) {
    while (next_post < receives.size() && next_post < received + kRecvWindow) {
      const Receive& r = receives[next_post];
      if (!can_post(r, current_step)) return;
      const RingStep& step = steps[r.step];
      const ElementRange chunk = ChunkOf(step.recv, chunk_elements_, r.part);
      if (step.reduce) {
        posted.push_back(ctx_.endpoint->PostConsume(ring_.prev, tag_of(r.step, r.part),
                                                    chunk.length * element_size_, ctx_.deadline,
                                                    consumer(step, chunk)));
      } else {
        posted.push_back(ctx_.endpoint->PostRecv(ring_.prev, tag_of(r.step, r.part),
                                                 BytesOf(data_, element_size_, chunk),
                                                 ctx_.deadline, nullptr));
      }
      ++next_post;
    }
  };

  if (!steps.empty()) queue_all(0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const RingStep& step = steps[i];
    const bool next_chained = i + 1 < steps.size() && chained(i + 1);
    const size_t chunks = ChunkCount(step.recv.length, chunk_elements_);
    for (size_t part = 0; part < chunks; ++part) {
      // The receive waited for next must not change data still waiting to go out from an earlier
      // step: such sends go first. (Every send of an earlier step is ready by now.)
      while (next_post == received && !can_post(receives[next_post], i)) {
        if (ready.empty()) return absl::InternalError(absl::StrCat(where(i), ": nothing to send"));
        BATON_RETURN_IF_ERROR(issue());
      }
      post_ahead(i);
      while (!ready.empty() && issued < received + kSendsAhead) BATON_RETURN_IF_ERROR(issue());
      // This step's receive is posted now: it is within the window, and the sends it had to
      // wait for have gone out above.
      const absl::Status status = posted.front()->Wait();
      posted.pop_front();
      if (!status.ok())
        return AnnotateTransportError(status, where(i), "receiving from", ring_.prev);
      ++received;
      // Chained: the next step sends exactly this chunk, which is final now.
      if (next_chained) ready.push_back({i + 1, part});
    }
    if (i + 1 < steps.size() && !next_chained) queue_all(i + 1);
  }
  while (!ready.empty()) BATON_RETURN_IF_ERROR(issue());
  CountReductionInWait(ctx_.stats,
                       std::chrono::nanoseconds(consumed_ns.load(std::memory_order_relaxed)));
  return absl::OkStatus();
}

}  // namespace baton::collective::internal
