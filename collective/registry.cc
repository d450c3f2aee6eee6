#include "collective/registry.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/all_gather_schedule.h"
#include "collective/all_reduce_schedule.h"
#include "collective/all_to_all_schedule.h"
#include "collective/all_to_all_v_schedule.h"
#include "collective/barrier_schedule.h"
#include "collective/broadcast_schedule.h"
#include "collective/gather_schedule.h"
#include "collective/reduce_scatter_schedule.h"
#include "collective/reduce_schedule.h"
#include "collective/scatter_schedule.h"

namespace baton::collective {
namespace {

using C = Collective;
using A = Algorithm;

constexpr std::array kImplementations = {
    OpImplementation{C::kAllReduce, A::kRing, AllReduceSchedule, RingAllReduceCost,
                     "reduce-scatter then all-gather around the ring of daemons"},
    OpImplementation{C::kAllReduce, A::kTree, AllReduceSchedule, TreeAllReduceCost,
                     "NCCL's double binary tree, each tree carrying half"},
    OpImplementation{C::kAllReduce, A::kDoubling, AllReduceSchedule, DoublingAllReduceCost,
                     "recursive doubling: log2(D) exchanges of the whole buffer"},
    OpImplementation{C::kAllReduce, A::kHalvingDoubling, AllReduceSchedule,
                     HalvingDoublingAllReduceCost,
                     "Rabenseifner's recursive halving then doubling"},
    OpImplementation{C::kReduceScatter, A::kRing, ReduceScatterSchedule, nullptr,
                     "local reduce, ring reduce-scatter across daemons"},
    OpImplementation{C::kAllGather, A::kRing, AllGatherSchedule, nullptr,
                     "local placement, ring all-gather across daemons"},
    OpImplementation{C::kBroadcast, A::kRing, BroadcastSchedule, nullptr,
                     "pipelined chain from the root's daemon along the ring"},
    OpImplementation{C::kReduce, A::kRing, ReduceSchedule, nullptr,
                     "local reduce, pipelined chain to the root's daemon"},
    OpImplementation{C::kAllToAll, A::kDirect, AllToAllSchedule, nullptr,
                     "one block per pair of ranks, straight between buffers"},
    OpImplementation{C::kBarrier, A::kDirect, BarrierSchedule, nullptr,
                     "dissemination barrier across daemons"},
    OpImplementation{C::kGather, A::kDirect, GatherSchedule, nullptr,
                     "every daemon sends its ranks' blocks to the root's daemon"},
    OpImplementation{C::kScatter, A::kDirect, ScatterSchedule, nullptr,
                     "the root's daemon sends every daemon its ranks' blocks"},
    OpImplementation{C::kAllToAllV, A::kDirect, AllToAllVSchedule, nullptr,
                     "one message per pair of ranks, per-peer counts"},
    OpImplementation{C::kSend, A::kDirect, nullptr, nullptr,
                     "to one peer rank, in order per pair (collective/point_to_point.h)"},
    OpImplementation{C::kRecv, A::kDirect, nullptr, nullptr,
                     "from one peer rank, in order per pair (collective/point_to_point.h)"},
};

}  // namespace

std::span<const OpImplementation> Implementations() { return kImplementations; }

const OpImplementation* FindImplementation(Collective collective, Algorithm algorithm) {
  for (const OpImplementation& entry : kImplementations) {
    if (entry.collective == collective && entry.algorithm == algorithm) return &entry;
  }
  return nullptr;
}

std::vector<Algorithm> AlgorithmsOf(Collective collective) {
  std::vector<Algorithm> algorithms;
  for (const OpImplementation& entry : kImplementations) {
    if (entry.collective == collective) algorithms.push_back(entry.algorithm);
  }
  return algorithms;
}

std::string AlgorithmNamesOf(Collective collective) {
  return absl::StrJoin(AlgorithmsOf(collective), ", ", [](std::string* out, Algorithm a) {
    absl::StrAppend(out, AlgorithmName(a));
  });
}

std::string DescribeImplementations() {
  std::string text;
  std::vector<Collective> seen;
  for (const OpImplementation& entry : kImplementations) {
    if (std::find(seen.begin(), seen.end(), entry.collective) != seen.end()) continue;
    seen.push_back(entry.collective);
    const absl::string_view name = CollectiveName(entry.collective);
    absl::StrAppend(&text, "  ", name, std::string(name.size() < 16 ? 16 - name.size() : 1, ' '),
                    AlgorithmNamesOf(entry.collective), "\n");
  }
  return text;
}

}  // namespace baton::collective
