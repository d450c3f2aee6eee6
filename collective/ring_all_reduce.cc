#include "collective/ring_all_reduce.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "collective/reduce.h"
#include "common/status_macros.h"

// The buffer is cut into `size` segments. In reduce-scatter step s (0 <= s < size-1) rank r sends
// segment r-s to the next rank and folds segment r-s-1, received from the previous rank, into its
// own copy; afterwards rank r holds segment r+1 fully reduced. In all-gather step s rank r
// forwards segment r+1-s and receives segment r-s in place. All segment numbers are mod size.
//
// Each step moves its segment in chunks of at most ctx.chunk_bytes, tagged {comm, seq, step,
// part}. The sends run one chunk ahead of the receives (send k+1, then receive and reduce k), so
// while we wait for and reduce chunk k the transport is already carrying chunk k+1. That never
// deadlocks: every rank sends before it receives, and the transport accepts messages nobody has
// asked for yet. It also bounds what a receiver holds unasked to about two chunks per peer.

namespace baton::collective {
namespace {

struct Range {
  size_t begin = 0;   // first element
  size_t length = 0;  // number of elements
};

// Segment `index` of `count` elements split into `parts` as evenly as possible: the first
// count % parts segments get one element more.
Range Segment(size_t count, int parts, int index) {
  const size_t n = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>((index % parts + parts) % parts);
  const size_t base = count / n;
  const size_t extra = count % n;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

class RingOperation {
 public:
  RingOperation(const OpContext& ctx, const Ring& ring, void* data, size_t count, DataType type,
                ReduceOp op)
      : ctx_(ctx),
        ring_(ring),
        data_(static_cast<std::byte*>(data)),
        count_(count),
        type_(type),
        op_(op),
        element_size_(DataTypeSize(type)),
        chunk_elements_(std::max<size_t>(1, ctx.chunk_bytes / std::max<size_t>(1, element_size_))) {
  }

  absl::Status Run() {
    const int steps = ring_.size - 1;
    const Range largest = Segment(count_, ring_.size, 0);
    const size_t scratch_elements = std::min(chunk_elements_, largest.length);
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(scratch_elements * element_size_);
    for (int s = 0; s < steps; ++s) {
      BATON_RETURN_IF_ERROR(Step(s, Segment(count_, ring_.size, ring_.rank - s),
                                 Segment(count_, ring_.size, ring_.rank - s - 1), true));
    }
    for (int s = 0; s < steps; ++s) {
      BATON_RETURN_IF_ERROR(Step(steps + s, Segment(count_, ring_.size, ring_.rank + 1 - s),
                                 Segment(count_, ring_.size, ring_.rank - s), false));
    }
    return absl::OkStatus();
  }

  size_t ChunksIn(const Range& segment) const {  // rounded up without overflowing
    return segment.length / chunk_elements_ + (segment.length % chunk_elements_ != 0 ? 1 : 0);
  }

 private:
  // Sends `send` to the next rank and receives `recv` from the previous one, chunk by chunk,
  // either reducing what arrives into our copy (`reduce`) or storing it in place.
  absl::Status Step(int step, Range send, Range recv, bool reduce) {
    const size_t send_chunks = ChunksIn(send);
    const size_t recv_chunks = ChunksIn(recv);
    size_t sent = 0;
    auto send_next = [&]() -> absl::Status {
      if (sent == send_chunks) return absl::OkStatus();
      const Range chunk = Chunk(send, sent);
      const absl::Status status =
          ctx_.endpoint->Send(ring_.next, MakeTag(step, sent), Bytes(chunk), ctx_.deadline);
      ++sent;
      if (!status.ok()) return Annotate(status, Context(step, "sending to", ring_.next));
      return absl::OkStatus();
    };
    BATON_RETURN_IF_ERROR(send_next());
    for (size_t part = 0; part < recv_chunks; ++part) {
      BATON_RETURN_IF_ERROR(send_next());
      const Range chunk = Chunk(recv, part);
      const transport::ByteSpan into =
          reduce ? transport::ByteSpan(scratch_.get(), chunk.length * element_size_) : Bytes(chunk);
      const absl::Status status =
          ctx_.endpoint->Recv(ring_.prev, MakeTag(step, part), into, ctx_.deadline);
      if (!status.ok()) return Annotate(status, Context(step, "receiving from", ring_.prev));
      if (reduce) ReduceInto(type_, op_, Bytes(chunk).data(), into.data(), chunk.length);
    }
    while (sent < send_chunks) BATON_RETURN_IF_ERROR(send_next());
    return absl::OkStatus();
  }

  // Chunk `part` of `segment`.
  Range Chunk(const Range& segment, size_t part) const {
    const size_t offset = part * chunk_elements_;
    return {segment.begin + offset, std::min(chunk_elements_, segment.length - offset)};
  }

  transport::ByteSpan Bytes(const Range& range) const {
    return {data_ + range.begin * element_size_, range.length * element_size_};
  }

  transport::Tag MakeTag(int step, size_t part) const {
    return {ctx_.comm, ctx_.seq, static_cast<uint32_t>(step), static_cast<uint32_t>(part)};
  }

  std::string Context(int step, const char* what, const std::string& peer) const {
    const int steps = ring_.size - 1;
    const bool scatter = step < steps;
    return absl::StrCat("ring all-reduce rank ", ring_.rank, "/", ring_.size, ", ",
                        scatter ? "reduce-scatter" : "all-gather", " step ",
                        (scatter ? step : step - steps) + 1, "/", steps, ": ", what, " ", peer);
  }

  const OpContext& ctx_;
  const Ring& ring_;
  std::byte* const data_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  std::unique_ptr<std::byte[]> scratch_;  // one chunk: what reduce-scatter receives before folding
};

}  // namespace

absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type, ReduceOp op) {
  if (ring.size < 1 || ring.rank < 0 || ring.rank >= ring.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: rank ", ring.rank, " is not in a ring of size ", ring.size));
  }
  const size_t element_size = DataTypeSize(type);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: unknown data type ", static_cast<int>(type)));
  }
  if (count > std::numeric_limits<size_t>::max() / element_size) {
    return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: ", count, " elements of ",
                                                   DataTypeName(type),
                                                   " overflow the address space"));
  }
  if (ring.size == 1 || count == 0) return absl::OkStatus();
  if (ctx.endpoint == nullptr || data == nullptr || ring.prev.empty() || ring.next.empty()) {
    return absl::InvalidArgumentError(
        "ring all-reduce: needs an endpoint, a buffer and both neighbours' addresses");
  }
  RingOperation operation(ctx, ring, data, count, type, op);
  if (operation.ChunksIn(Segment(count, ring.size, 0)) > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring all-reduce: chunk size of ", ctx.chunk_bytes, " bytes needs more than 2^32 chunks"));
  }
  return operation.Run();
}

}  // namespace baton::collective
