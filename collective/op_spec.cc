#include "collective/op_spec.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::collective {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// count * factor, or nullopt when it overflows (or the bytes would).
std::optional<uint64_t> Times(uint64_t count, uint64_t factor, uint64_t element) {
  if (factor != 0 && count > kMax / factor) return std::nullopt;
  const uint64_t product = count * factor;
  if (element != 0 && product > kMax / element) return std::nullopt;
  return product;
}

// The elements a buffer must hold for blocks (counts[j] at displs[j]); nullopt on overflow.
std::optional<uint64_t> Span(const std::vector<uint64_t>& counts,
                             const std::vector<uint64_t>& displs) {
  uint64_t end = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] == 0) continue;
    if (displs[j] > kMax - counts[j]) return std::nullopt;
    end = std::max(end, displs[j] + counts[j]);
  }
  return end;
}

uint64_t SumOf(const std::vector<uint64_t>& counts) {
  uint64_t sum = 0;
  for (uint64_t c : counts) sum += c;
  return sum;
}

}  // namespace

bool OpSpec::Rooted() const {
  return collective == Collective::kBroadcast || collective == Collective::kReduce ||
         collective == Collective::kGather || collective == Collective::kScatter;
}

absl::Status OpSpec::ValidateBlocks(int world_size, uint64_t element) const {
  const size_t world = static_cast<size_t>(world_size);
  struct Side {
    const char* name;
    const std::vector<uint64_t>& counts;
    const std::vector<uint64_t>& displs;
  };
  for (const Side& side :
       {Side{"send", send_counts, send_displs}, Side{"recv", recv_counts, recv_displs}}) {
    if (side.counts.size() != world || side.displs.size() != world) {
      return absl::InvalidArgumentError(absl::StrCat(
          side.name, "_counts has ", side.counts.size(), " entries and ", side.name, "_displs ",
          side.displs.size(), "; both need one per rank (world size ", world_size, ")"));
    }
    for (size_t j = 0; j < world; ++j) {
      if (side.counts[j] > kMax - side.displs[j]) {
        return absl::InvalidArgumentError(absl::StrCat(side.name, "_displs[", j, "] + ", side.name,
                                                       "_counts[", j, "] overflows (",
                                                       side.displs[j], " + ", side.counts[j], ")"));
      }
    }
    const uint64_t span = Span(side.counts, side.displs).value_or(kMax);
    if (!Times(span, 1, element)) {
      return absl::InvalidArgumentError(absl::StrCat("all_to_all_v's ", side.name, " buffer of ",
                                                     span, " elements overflows in bytes"));
    }
  }
  // Two blocks received into one place would leave either peer's data there.
  std::vector<std::pair<uint64_t, size_t>> blocks;  // (displacement, rank) of non-empty blocks
  for (size_t i = 0; i < world; ++i) {
    if (recv_counts[i] > 0) blocks.emplace_back(recv_displs[i], i);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t b = 1; b < blocks.size(); ++b) {
    const size_t before = blocks[b - 1].second;
    if (recv_displs[before] + recv_counts[before] > blocks[b].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("recv blocks of ranks ", before, " and ", blocks[b].second, " overlap"));
    }
  }
  return absl::OkStatus();
}

absl::Status OpSpec::Validate(int world_size, int rank) const {
  if (ParseCollective(CollectiveName(collective)) != collective) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective ", static_cast<int>(collective)));
  }
  if (DataTypeName(type) == "unknown") {
    return absl::InvalidArgumentError(absl::StrCat("unknown data type ", static_cast<int>(type)));
  }
  if (ReduceOpName(op) == "unknown") {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", static_cast<int>(op)));
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for world size ", world_size));
  }
  if (algorithm && !IsSupported(collective, *algorithm)) {
    return absl::InvalidArgumentError(absl::StrCat("algorithm ", AlgorithmName(*algorithm),
                                                   " does not implement ",
                                                   CollectiveName(collective)));
  }
  if (Rooted() && (root < 0 || root >= world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is out of range for world size ", world_size));
  }
  if (PointToPoint() && (peer < 0 || peer >= world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is out of range for world size ", world_size));
  }
  const uint64_t element = DataTypeSize(type);
  if (collective == Collective::kAllToAllV) {
    if (count != 0) {
      return absl::InvalidArgumentError("all_to_all_v takes its counts per peer; count must be 0");
    }
    return ValidateBlocks(world_size, element);
  }
  const bool per_rank_blocks =
      collective == Collective::kReduceScatter || collective == Collective::kAllGather ||
      collective == Collective::kAllToAll || collective == Collective::kGather ||
      collective == Collective::kScatter;
  if (!Times(count, per_rank_blocks ? static_cast<uint64_t>(world_size) : 1, element)) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
  }
  return absl::OkStatus();
}

uint64_t OpSpec::SendElements(int world_size, int rank) const {
  const uint64_t world = static_cast<uint64_t>(world_size);
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kAllGather:
    case Collective::kGather:
    case Collective::kSend:
      return count;
    case Collective::kBroadcast:
      return rank == root ? count : 0;
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return count * world;
    case Collective::kScatter:
      return rank == root ? count * world : 0;
    case Collective::kAllToAllV:
      return Span(send_counts, send_displs).value_or(0);
    case Collective::kBarrier:
    case Collective::kRecv:
      return 0;
  }
  return 0;
}

uint64_t OpSpec::RecvElements(int world_size, int rank) const {
  const uint64_t world = static_cast<uint64_t>(world_size);
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduceScatter:
    case Collective::kScatter:
    case Collective::kRecv:
      return count;
    case Collective::kReduce:
      return rank == root ? count : 0;
    case Collective::kAllGather:
    case Collective::kAllToAll:
      return count * world;
    case Collective::kGather:
      return rank == root ? count * world : 0;
    case Collective::kAllToAllV:
      return Span(recv_counts, recv_displs).value_or(0);
    case Collective::kBarrier:
    case Collective::kSend:
      return 0;
  }
  return 0;
}

std::string OpSpec::Describe() const {
  std::string text = absl::StrCat(CollectiveName(collective), "(", DataTypeName(type));
  const bool reduces = collective == Collective::kAllReduce ||
                       collective == Collective::kReduceScatter ||
                       collective == Collective::kReduce;
  if (reduces) absl::StrAppend(&text, ", ", ReduceOpName(op));
  if (collective == Collective::kAllToAllV) {
    absl::StrAppend(&text, ", sends ", SumOf(send_counts), ", receives ", SumOf(recv_counts));
  } else if (collective != Collective::kBarrier) {
    absl::StrAppend(&text, ", count ", count);
  }
  if (Rooted()) absl::StrAppend(&text, ", root ", root);
  if (PointToPoint()) absl::StrAppend(&text, ", peer ", peer);
  if (algorithm) absl::StrAppend(&text, ", ", AlgorithmName(*algorithm));
  return text + ")";
}

Signature Signature::Of(const OpSpec& spec) {
  Signature s;
  s.collective = static_cast<uint32_t>(spec.collective);
  s.type = static_cast<uint32_t>(spec.type);
  s.op = static_cast<uint32_t>(spec.op);
  s.root = spec.Rooted() ? spec.root : 0;
  s.count = spec.count;
  s.algorithm = spec.algorithm ? 1 + static_cast<uint32_t>(*spec.algorithm) : 0;
  return s;
}

OpSpec Signature::AsSpec() const {
  OpSpec spec;
  spec.collective = static_cast<Collective>(collective);
  spec.type = static_cast<DataType>(type);
  spec.op = static_cast<ReduceOp>(op);
  spec.root = root;
  spec.count = count;
  if (algorithm > 0) spec.algorithm = static_cast<Algorithm>(algorithm - 1);
  return spec;
}

}  // namespace baton::collective
