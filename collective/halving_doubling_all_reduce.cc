#include "collective/halving_doubling_all_reduce.h"

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/reduce.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// No deadlock: as in doubling_all_reduce.cc, partners in a step post their receive, send, then
// wait, chunk by chunk, and sends never wait for the receiver.

namespace baton::collective {
namespace {

constexpr absl::string_view kWhat = "halving-doubling all-reduce";

class HalvingDoublingOperation {
 public:
  HalvingDoublingOperation(const OpContext& ctx, const Participants& participants, void* data,
                           size_t count, DataType type, ReduceOp op)
      : ctx_(ctx),
        participants_(participants),
        data_(data),
        count_(count),
        type_(type),
        op_(op),
        element_size_(DataTypeSize(type)),
        chunk_elements_(ChunkElements(ctx.chunk_bytes, type)) {}

  absl::Status Run() {
    const int size = participants_.size();
    const int rank = participants_.rank;
    const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(size)));
    const int extra = size - p;
    const int levels = std::countr_zero(static_cast<unsigned>(p));
    const uint32_t last_step = 1 + 2 * static_cast<uint32_t>(levels);
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(std::min(chunk_elements_, count_) *
                                                           element_size_);
    const ElementRange whole{0, count_};
    if (rank < 2 * extra && rank % 2 == 0) {
      BATON_RETURN_IF_ERROR(Send(0, rank + 1, whole));
      return Recv(last_step, rank + 1, whole);
    }
    if (rank < 2 * extra) BATON_RETURN_IF_ERROR(Fold(0, rank - 1, whole, /*send=*/{}));
    const int index = rank < 2 * extra ? rank / 2 : rank - extra;
    auto participant = [extra](int i) { return i < extra ? 2 * i + 1 : i + extra; };

    // Halving: ranges[k] is this participant's range before step k.
    std::vector<ElementRange> ranges = {whole};
    for (int k = 0; k < levels; ++k) {
      const int mask = p >> (k + 1);
      const int partner = participant(index ^ mask);
      const ElementRange range = ranges.back();
      const ElementRange first{range.begin, (range.length + 1) / 2};
      const ElementRange second{first.begin + first.length, range.length - first.length};
      const bool keep_first = (index & mask) == 0;
      const ElementRange keep = keep_first ? first : second;
      const ElementRange give = keep_first ? second : first;
      BATON_RETURN_IF_ERROR(Fold(1 + static_cast<uint32_t>(k), partner, keep, give));
      ranges.push_back(keep);
    }
    // Doubling: retrace the steps, swapping the block held for the partner's.
    for (int k = levels - 1; k >= 0; --k) {
      const int mask = p >> (k + 1);
      const int partner = participant(index ^ mask);
      const ElementRange mine = ranges[k + 1];
      const ElementRange parent = ranges[k];
      const ElementRange theirs =
          mine.begin == parent.begin
              ? ElementRange{mine.begin + mine.length, parent.length - mine.length}
              : ElementRange{parent.begin, parent.length - mine.length};
      BATON_RETURN_IF_ERROR(
          Swap(1 + static_cast<uint32_t>(levels + (levels - 1 - k)), partner, mine, theirs));
    }
    if (rank < 2 * extra) return Send(last_step, rank - 1, whole);
    return absl::OkStatus();
  }

 private:
  // Sends `give` (if not empty) to the partner while receiving its copy of `keep` and folding it
  // in, chunk by chunk, the lower participant's operand first.
  absl::Status Fold(uint32_t step, int partner, const ElementRange& keep,
                    const ElementRange& give) {
    const bool partner_first = partner < participants_.rank;
    const std::string& address = participants_.addresses[partner];
    const size_t chunks = std::max(ChunkCount(keep.length, chunk_elements_),
                                   ChunkCount(give.length, chunk_elements_));
    for (size_t part = 0; part < chunks; ++part) {
      std::unique_ptr<transport::PostedRecv> posted;
      ElementRange in{};
      if (part < ChunkCount(keep.length, chunk_elements_)) {
        in = ChunkOf(keep, chunk_elements_, part);
        posted = ctx_.endpoint->PostRecv(
            address, Tag(step, part),
            transport::ByteSpan(scratch_.get(), in.length * element_size_), ctx_.deadline, nullptr);
      }
      if (part < ChunkCount(give.length, chunk_elements_)) {
        BATON_RETURN_IF_ERROR(SendChunk(step, part, partner, ChunkOf(give, chunk_elements_, part)));
      }
      if (posted == nullptr) continue;
      if (absl::Status status = posted->Wait(); !status.ok()) {
        return internal::AnnotateTransportError(status, Where(step, part), "receiving from",
                                                address);
      }
      const transport::ByteSpan own = internal::BytesOf(data_, element_size_, in);
      PhaseTimer timer(ReduceSlot(ctx_));
      const std::array<const void*, 2> sources =
          partner_first ? std::array<const void*, 2>{scratch_.get(), own.data()}
                        : std::array<const void*, 2>{own.data(), scratch_.get()};
      ReduceMany(type_, op_, own.data(), sources, in.length);
    }
    return absl::OkStatus();
  }

  // Sends `mine` to the partner and receives its `theirs` in place, chunk by chunk.
  absl::Status Swap(uint32_t step, int partner, const ElementRange& mine,
                    const ElementRange& theirs) {
    const std::string& address = participants_.addresses[partner];
    const size_t in_chunks = ChunkCount(theirs.length, chunk_elements_);
    const size_t out_chunks = ChunkCount(mine.length, chunk_elements_);
    for (size_t part = 0; part < std::max(in_chunks, out_chunks); ++part) {
      std::unique_ptr<transport::PostedRecv> posted;
      if (part < in_chunks) {
        posted = ctx_.endpoint->PostRecv(
            address, Tag(step, part),
            internal::BytesOf(data_, element_size_, ChunkOf(theirs, chunk_elements_, part)),
            ctx_.deadline, nullptr);
      }
      if (part < out_chunks) {
        BATON_RETURN_IF_ERROR(SendChunk(step, part, partner, ChunkOf(mine, chunk_elements_, part)));
      }
      if (posted == nullptr) continue;
      if (absl::Status status = posted->Wait(); !status.ok()) {
        return internal::AnnotateTransportError(status, Where(step, part), "receiving from",
                                                address);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Send(uint32_t step, int peer, const ElementRange& range) {
    for (size_t part = 0; part < ChunkCount(range.length, chunk_elements_); ++part) {
      BATON_RETURN_IF_ERROR(SendChunk(step, part, peer, ChunkOf(range, chunk_elements_, part)));
    }
    return absl::OkStatus();
  }

  absl::Status Recv(uint32_t step, int peer, const ElementRange& range) {
    const std::string& address = participants_.addresses[peer];
    for (size_t part = 0; part < ChunkCount(range.length, chunk_elements_); ++part) {
      const absl::Status status = ctx_.endpoint->Recv(
          address, Tag(step, part),
          internal::BytesOf(data_, element_size_, ChunkOf(range, chunk_elements_, part)),
          ctx_.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, Where(step, part), "receiving from",
                                                address);
      }
    }
    return absl::OkStatus();
  }

  absl::Status SendChunk(uint32_t step, size_t part, int peer, const ElementRange& chunk) {
    const std::string& address = participants_.addresses[peer];
    const absl::Status status = ctx_.endpoint->Send(
        address, Tag(step, part), internal::BytesOf(data_, element_size_, chunk), ctx_.deadline);
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
                        step, " chunk ", part + 1);
  }

  const OpContext& ctx_;
  const Participants& participants_;
  void* const data_;
  const size_t count_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  std::unique_ptr<std::byte[]> scratch_;  // one chunk received from the partner
};

}  // namespace

absl::Status HalvingDoublingAllReduce(const OpContext& ctx, const Participants& participants,
                                      void* data, size_t count, DataType type, ReduceOp op) {
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, participants.rank, participants.size()));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (participants.size() == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckParticipantLinks(kWhat, ctx, participants));
  if (data == nullptr) {
    return absl::InvalidArgumentError("halving-doubling all-reduce: needs a buffer");
  }
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, count));
  return HalvingDoublingOperation(ctx, participants, data, count, type, op).Run();
}

}  // namespace baton::collective
