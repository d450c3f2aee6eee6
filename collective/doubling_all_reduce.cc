#include "collective/doubling_all_reduce.h"

#include <bit>

#include "collective/pairwise_exchange.h"
#include "common/status_macros.h"

namespace baton::collective {

int DoublingSteps(int size) {
  if (size <= 1) return 0;
  const internal::Pairing pairing(size, 0);
  return pairing.levels() + (pairing.extra > 0 ? 2 : 0);
}

absl::Status DoublingAllReduce(const OpContext& ctx, const Participants& participants, void* data,
                               size_t count, DataType type, ReduceOp op) {
  constexpr absl::string_view kWhat = "doubling all-reduce";
  BATON_ASSIGN_OR_RETURN(const bool work, internal::CheckPairwiseArguments(kWhat, ctx, participants,
                                                                           data, count, type, op));
  if (!work) return absl::OkStatus();
  const internal::Pairing pairing(participants.size(), participants.rank);
  internal::PairwiseExchange exchange(kWhat, ctx, participants, data, count, type, op);
  const ElementRange whole = exchange.whole();
  return exchange.RunPaired(pairing, 1 + static_cast<uint32_t>(pairing.levels()), [&] {
    for (int k = 0; k < pairing.levels(); ++k) {
      const int partner = pairing.Participant(pairing.index() ^ (1 << k));
      BATON_RETURN_IF_ERROR(exchange.Fold(1 + static_cast<uint32_t>(k), partner, whole, whole));
    }
    return absl::OkStatus();
  });
}

}  // namespace baton::collective
