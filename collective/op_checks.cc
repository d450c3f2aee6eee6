#include "collective/op_checks.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collective/segments.h"
#include "common/status_macros.h"

namespace baton::collective::internal {

absl::Status CheckRank(absl::string_view what, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", rank, " is not among ", size, " participants"));
  }
  return absl::OkStatus();
}

absl::Status CheckElements(absl::string_view what, DataType type, size_t count, size_t blocks) {
  const size_t element_size = DataTypeSize(type);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unknown data type ", static_cast<int>(type)));
  }
  const size_t limit = std::numeric_limits<size_t>::max() / element_size;
  if (count > limit || (blocks > 1 && count > limit / blocks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", count, " elements of ", DataTypeName(type),
        blocks > 1 ? absl::StrCat(" times ", blocks) : "", " overflow the address space"));
  }
  return absl::OkStatus();
}

absl::Status CheckReduceOp(absl::string_view what, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kAvg:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown reduce op ", static_cast<int>(op)));
}

absl::Status CheckRingLinks(absl::string_view what, const OpContext& ctx, const Ring& ring) {
  if (ctx.endpoint == nullptr || ring.prev.empty() || ring.next.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs an endpoint and both neighbours' addresses"));
  }
  return absl::OkStatus();
}

absl::Status CheckParticipantLinks(absl::string_view what, const OpContext& ctx,
                                   const Participants& participants) {
  if (ctx.endpoint == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, ": no endpoint"));
  for (int i = 0; i < participants.size(); ++i) {
    if (participants.addresses[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": participant ", i, " has no endpoint address"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckChunkCount(absl::string_view what, const OpContext& ctx, DataType type,
                             size_t length) {
  if (ChunkCount(length, ChunkElements(ctx.chunk_bytes, type)) >
      std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": chunk size of ", ctx.chunk_bytes,
                                                   " bytes needs more than 2^32 chunks"));
  }
  return absl::OkStatus();
}

transport::ByteSpan BytesOf(void* data, size_t element_size, const ElementRange& range) {
  return {static_cast<std::byte*>(data) + range.begin * element_size, range.length * element_size};
}

transport::ConstByteSpan BytesOf(const void* data, size_t element_size, const ElementRange& range) {
  return {static_cast<const std::byte*>(data) + range.begin * element_size,
          range.length * element_size};
}

absl::Status AnnotateTransportError(const absl::Status& status, absl::string_view where,
                                    absl::string_view what, const std::string& peer) {
  return Annotate(status, absl::StrCat(where, ": ", what, " ", peer));
}

}  // namespace baton::collective::internal
