#include "collective/doubling_all_reduce.h"

#include <array>
#include <bit>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/reduce.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// No deadlock: in every step a participant posts its receive, sends, and only then waits, and
// its partner does the same in the same step; sends never wait for the receiver (the transport
// holds early messages). Chunks go one at a time, so a link holds at most one unasked chunk per
// step.

namespace baton::collective {
namespace {

constexpr absl::string_view kWhat = "doubling all-reduce";

class DoublingOperation {
 public:
  DoublingOperation(const OpContext& ctx, const Participants& participants, void* data,
                    size_t count, DataType type, ReduceOp op)
      : ctx_(ctx),
        participants_(participants),
        data_(data),
        count_(count),
        type_(type),
        op_(op),
        element_size_(DataTypeSize(type)),
        chunk_elements_(ChunkElements(ctx.chunk_bytes, type)),
        chunks_(ChunkCount(count, chunk_elements_)) {}

  absl::Status Run() {
    const int size = participants_.size();
    const int rank = participants_.rank;
    const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(size)));
    const int extra = size - p;
    const int exchanges = std::countr_zero(static_cast<unsigned>(p));
    const uint32_t last_step = 1 + static_cast<uint32_t>(exchanges);
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(std::min(chunk_elements_, count_) *
                                                           element_size_);
    // Pairing in: 2i hands its buffer to 2i+1 and waits for the result.
    if (rank < 2 * extra && rank % 2 == 0) {
      BATON_RETURN_IF_ERROR(SendAll(0, rank + 1));
      return RecvAll(last_step, rank + 1);
    }
    if (rank < 2 * extra) BATON_RETURN_IF_ERROR(Exchange(0, rank - 1, /*send=*/false));
    // The exchange among p participants, numbered by `index`.
    const int index = rank < 2 * extra ? rank / 2 : rank - extra;
    auto participant = [extra](int i) { return i < extra ? 2 * i + 1 : i + extra; };
    for (int k = 0; k < exchanges; ++k) {
      BATON_RETURN_IF_ERROR(Exchange(1 + static_cast<uint32_t>(k), participant(index ^ (1 << k)),
                                     /*send=*/true));
    }
    if (rank < 2 * extra) return SendAll(last_step, rank - 1);
    return absl::OkStatus();
  }

 private:
  // Folds the partner's buffer into ours chunk by chunk (sending ours first when `send`), the
  // lower participant's operand first.
  absl::Status Exchange(uint32_t step, int partner, bool send) {
    const bool partner_first = partner < participants_.rank;
    for (size_t part = 0; part < chunks_; ++part) {
      const ElementRange chunk = ChunkOf(ElementRange{0, count_}, chunk_elements_, part);
      const transport::ByteSpan own = internal::BytesOf(data_, element_size_, chunk);
      const transport::ByteSpan received(scratch_.get(), own.size());
      const std::string& address = participants_.addresses[partner];
      std::unique_ptr<transport::PostedRecv> posted =
          ctx_.endpoint->PostRecv(address, Tag(step, part), received, ctx_.deadline, nullptr);
      if (send) BATON_RETURN_IF_ERROR(Send(step, part, partner, own));
      if (absl::Status status = posted->Wait(); !status.ok()) {
        return internal::AnnotateTransportError(status, Where(step, part), "receiving from",
                                                address);
      }
      PhaseTimer timer(ReduceSlot(ctx_));
      const std::array<const void*, 2> sources =
          partner_first ? std::array<const void*, 2>{received.data(), own.data()}
                        : std::array<const void*, 2>{own.data(), received.data()};
      ReduceMany(type_, op_, own.data(), sources, chunk.length);
    }
    return absl::OkStatus();
  }

  absl::Status SendAll(uint32_t step, int peer) {
    for (size_t part = 0; part < chunks_; ++part) {
      const ElementRange chunk = ChunkOf(ElementRange{0, count_}, chunk_elements_, part);
      BATON_RETURN_IF_ERROR(Send(step, part, peer, internal::BytesOf(data_, element_size_, chunk)));
    }
    return absl::OkStatus();
  }

  absl::Status RecvAll(uint32_t step, int peer) {
    const std::string& address = participants_.addresses[peer];
    for (size_t part = 0; part < chunks_; ++part) {
      const ElementRange chunk = ChunkOf(ElementRange{0, count_}, chunk_elements_, part);
      const absl::Status status = ctx_.endpoint->Recv(
          address, Tag(step, part), internal::BytesOf(data_, element_size_, chunk), ctx_.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, Where(step, part), "receiving from",
                                                address);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Send(uint32_t step, size_t part, int peer, transport::ConstByteSpan bytes) {
    const std::string& address = participants_.addresses[peer];
    const absl::Status status = ctx_.endpoint->Send(address, Tag(step, part), bytes, ctx_.deadline);
    if (!status.ok()) {
      return internal::AnnotateTransportError(status, Where(step, part), "sending to", address);
    }
    return absl::OkStatus();
  }

  transport::Tag Tag(uint32_t step, size_t part) const {
    return {ctx_.comm, ctx_.seq, ctx_.first_step + step, static_cast<uint32_t>(part)};
  }

  std::string Where(uint32_t step, size_t part) const {
    return absl::StrCat(kWhat, " rank ", participants_.rank, "/", participants_.size(), ", step ",
                        step, " chunk ", part + 1, "/", chunks_);
  }

  const OpContext& ctx_;
  const Participants& participants_;
  void* const data_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  const size_t chunks_;
  std::unique_ptr<std::byte[]> scratch_;  // one chunk received from the partner
};

}  // namespace

int DoublingSteps(int size) {
  if (size <= 1) return 0;
  const unsigned p = std::bit_floor(static_cast<unsigned>(size));
  return std::countr_zero(p) + (static_cast<int>(p) == size ? 0 : 2);
}

absl::Status DoublingAllReduce(const OpContext& ctx, const Participants& participants, void* data,
                               size_t count, DataType type, ReduceOp op) {
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, participants.rank, participants.size()));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (participants.size() == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckParticipantLinks(kWhat, ctx, participants));
  if (data == nullptr) return absl::InvalidArgumentError("doubling all-reduce: needs a buffer");
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, count));
  return DoublingOperation(ctx, participants, data, count, type, op).Run();
}

}  // namespace baton::collective
