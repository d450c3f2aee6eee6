#include "collective/pairwise_exchange.h"

#include <algorithm>
#include <array>
#include <bit>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/registered_memory.h"
#include "common/status_macros.h"

namespace baton::collective::internal {

Pairing::Pairing(int size, int rank_in)
    : p(static_cast<int>(std::bit_floor(static_cast<unsigned>(size)))),
      extra(size - p),
      rank(rank_in) {}

int Pairing::levels() const { return std::countr_zero(static_cast<unsigned>(p)); }

namespace {

// The argument checks both algorithms make: InvalidArgument for a rank outside the participants,
// a missing address, an unknown type or op, a byte count that overflows, or no buffer. False when
// there is nothing to exchange (one participant, or no elements).
absl::StatusOr<bool> CheckPairwiseArguments(absl::string_view what, const OpContext& ctx,
                                            const Participants& participants, const void* data,
                                            size_t count, DataType type, ReduceOp op) {
  BATON_RETURN_IF_ERROR(CheckRank(what, participants.rank, participants.size()));
  BATON_RETURN_IF_ERROR(CheckElements(what, type, count));
  BATON_RETURN_IF_ERROR(CheckReduceOp(what, op));
  if (participants.size() == 1 || count == 0) return false;
  BATON_RETURN_IF_ERROR(CheckParticipantLinks(what, ctx, participants));
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": needs a buffer"));
  BATON_RETURN_IF_ERROR(CheckChunkCount(what, ctx, type, count));
  return true;
}

}  // namespace

PairwiseExchange::PairwiseExchange(absl::string_view what, const OpContext& ctx,
                                   const Participants& participants, void* data, size_t count,
                                   DataType type, ReduceOp op)
    : what_(what),
      ctx_(ctx),
      participants_(participants),
      data_(data),
      count_(count),
      type_(type),
      op_(op),
      element_size_(DataTypeSize(type)),
      chunk_elements_(ChunkElements(ctx.chunk_bytes, type)) {}

absl::Status PairwiseExchange::RunPaired(const Pairing& pairing, uint32_t last_step,
                                         absl::FunctionRef<absl::Status()> exchanges) {
  const int rank = participants_.rank;
  if (pairing.handed_over()) {
    BATON_RETURN_IF_ERROR(Send(0, rank + 1, whole()));
    return Recv(last_step, rank + 1, whole());
  }
  if (pairing.holds_pair()) BATON_RETURN_IF_ERROR(Fold(0, rank - 1, whole(), {}));
  BATON_RETURN_IF_ERROR(exchanges());
  if (pairing.holds_pair()) return Send(last_step, rank - 1, whole());
  return absl::OkStatus();
}

absl::Status PairwiseExchange::Fold(uint32_t step, int partner, const ElementRange& keep,
                                    const ElementRange& give) {
  return Exchange(step, partner, keep, /*fold=*/true, give);
}

absl::Status PairwiseExchange::Swap(uint32_t step, int partner, const ElementRange& mine,
                                    const ElementRange& theirs) {
  return Exchange(step, partner, theirs, /*fold=*/false, mine);
}

absl::Status PairwiseExchange::Exchange(uint32_t step, int partner, const ElementRange& in,
                                        bool fold, const ElementRange& out) {
  if (fold && scratch_.data() == nullptr && in.length > 0) {
    scratch_ = TakeScratch(ctx_, std::min(chunk_elements_, count_) * element_size_);
  }
  const bool partner_first = partner < participants_.rank;
  const std::string& address = participants_.addresses[partner];
  const size_t in_chunks = ChunkCount(in.length, chunk_elements_);
  const size_t out_chunks = ChunkCount(out.length, chunk_elements_);
  for (size_t part = 0; part < std::max(in_chunks, out_chunks); ++part) {
    std::unique_ptr<transport::PostedRecv> posted;
    ElementRange chunk{};
    if (part < in_chunks) {
      chunk = ChunkOf(in, chunk_elements_, part);
      const transport::ByteSpan into =
          fold ? transport::ByteSpan(scratch_.data(), chunk.length * element_size_)
               : BytesOf(data_, element_size_, chunk);
      posted = ctx_.endpoint->PostRecv(address, Tag(step, part), into, ctx_.deadline, nullptr);
    }
    if (part < out_chunks) {
      BATON_RETURN_IF_ERROR(SendChunk(step, part, partner, ChunkOf(out, chunk_elements_, part)));
    }
    if (posted == nullptr) continue;
    if (absl::Status status = posted->Wait(); !status.ok()) {
      return AnnotateTransportError(status, Where(step, part), "receiving from", address);
    }
    if (!fold) continue;
    void* own = BytesOf(data_, element_size_, chunk).data();
    PhaseTimer timer(ReduceSlot(ctx_));
    const std::array<const void*, 2> sources =
        partner_first ? std::array<const void*, 2>{scratch_.data(), own}
                      : std::array<const void*, 2>{own, scratch_.data()};
    ctx_.kernels->ReduceMany(type_, op_, own, sources, chunk.length);
  }
  return absl::OkStatus();
}

absl::Status PairwiseExchange::Send(uint32_t step, int peer, const ElementRange& range) {
  for (size_t part = 0; part < ChunkCount(range.length, chunk_elements_); ++part) {
    BATON_RETURN_IF_ERROR(SendChunk(step, part, peer, ChunkOf(range, chunk_elements_, part)));
  }
  return absl::OkStatus();
}

absl::Status PairwiseExchange::Recv(uint32_t step, int peer, const ElementRange& range) {
  const std::string& address = participants_.addresses[peer];
  for (size_t part = 0; part < ChunkCount(range.length, chunk_elements_); ++part) {
    const absl::Status status = ctx_.endpoint->Recv(
        address, Tag(step, part),
        BytesOf(data_, element_size_, ChunkOf(range, chunk_elements_, part)), ctx_.deadline);
    if (!status.ok()) {
      return AnnotateTransportError(status, Where(step, part), "receiving from", address);
    }
  }
  return absl::OkStatus();
}

absl::Status PairwiseExchange::SendChunk(uint32_t step, size_t part, int peer,
                                         const ElementRange& chunk) {
  const std::string& address = participants_.addresses[peer];
  const absl::Status status = ctx_.endpoint->Send(
      address, Tag(step, part), BytesOf(data_, element_size_, chunk), ctx_.deadline);
  if (!status.ok()) return AnnotateTransportError(status, Where(step, part), "sending to", address);
  return absl::OkStatus();
}

transport::Tag PairwiseExchange::Tag(uint32_t step, size_t part) const {
  return {ctx_.comm, ctx_.seq, ctx_.first_step + step, static_cast<uint32_t>(part)};
}

std::string PairwiseExchange::Where(uint32_t step, size_t part) const {
  return absl::StrCat(what_, " rank ", participants_.rank, "/", participants_.size(), ", step ",
                      step, " chunk ", part + 1);
}

absl::Status RunPairwiseAllReduce(
    absl::string_view what, const OpContext& ctx, const Participants& participants, void* data,
    size_t count, DataType type, ReduceOp op, uint32_t steps_per_level,
    absl::FunctionRef<absl::Status(const Pairing&, PairwiseExchange&)> exchanges) {
  BATON_ASSIGN_OR_RETURN(const bool work,
                         CheckPairwiseArguments(what, ctx, participants, data, count, type, op));
  if (!work) return absl::OkStatus();
  const Pairing pairing(participants.size(), participants.rank);
  PairwiseExchange exchange(what, ctx, participants, data, count, type, op);
  return exchange.RunPaired(pairing, 1 + steps_per_level * static_cast<uint32_t>(pairing.levels()),
                            [&] { return exchanges(pairing, exchange); });
}

}  // namespace baton::collective::internal
