#include "collective/algorithm.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/registry.h"

namespace baton::collective {
namespace {

// Indexed by the enums' values, so that names and parsing share one table.
constexpr std::array<std::pair<Collective, absl::string_view>, 12> kCollectives = {{
    {Collective::kAllReduce, "all_reduce"},
    {Collective::kReduceScatter, "reduce_scatter"},
    {Collective::kAllGather, "all_gather"},
    {Collective::kBroadcast, "broadcast"},
    {Collective::kReduce, "reduce"},
    {Collective::kAllToAll, "all_to_all"},
    {Collective::kBarrier, "barrier"},
    {Collective::kGather, "gather"},
    {Collective::kScatter, "scatter"},
    {Collective::kAllToAllV, "all_to_all_v"},
    {Collective::kSend, "send"},
    {Collective::kRecv, "recv"},
}};

constexpr std::array<std::pair<Algorithm, absl::string_view>, 5> kAlgorithms = {{
    {Algorithm::kRing, "ring"},
    {Algorithm::kTree, "tree"},
    {Algorithm::kDirect, "direct"},
    {Algorithm::kDoubling, "doubling"},
    {Algorithm::kHalvingDoubling, "halving_doubling"},
}};

template <typename Table>
constexpr bool IndexedByValue(const Table& table) {
  for (size_t i = 0; i < table.size(); ++i) {
    if (static_cast<size_t>(table[i].first) != i) return false;
  }
  return true;
}
static_assert(IndexedByValue(kCollectives));
static_assert(IndexedByValue(kAlgorithms));

template <typename Table, typename Enum>
absl::string_view NameIn(const Table& table, Enum value) {
  const auto index = static_cast<size_t>(value);
  return index < table.size() ? table[index].second : "unknown";
}

template <typename Table>
auto ParseIn(const Table& table, absl::string_view name)
    -> std::optional<typename Table::value_type::first_type> {
  for (const auto& [value, value_name] : table) {
    if (value_name == name) return value;
  }
  return std::nullopt;
}

}  // namespace

absl::string_view CollectiveName(Collective collective) { return NameIn(kCollectives, collective); }

std::optional<Collective> ParseCollective(absl::string_view name) {
  return ParseIn(kCollectives, name);
}

absl::string_view AlgorithmName(Algorithm algorithm) { return NameIn(kAlgorithms, algorithm); }

std::string AlgorithmNames() {
  std::string names;
  for (const auto& [algorithm, name] : kAlgorithms) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  return names;
}

std::optional<Algorithm> ParseAlgorithm(absl::string_view name) {
  return ParseIn(kAlgorithms, name);
}

bool IsSupported(Collective collective, Algorithm algorithm) {
  return FindImplementation(collective, algorithm) != nullptr;
}

}  // namespace baton::collective
