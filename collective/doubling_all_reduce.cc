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
  return internal::RunPairwiseAllReduce(
      "doubling all-reduce", ctx, participants, data, count, type, op, /*steps_per_level=*/1,
      [](const internal::Pairing& pairing, internal::PairwiseExchange& exchange) {
        const ElementRange whole = exchange.whole();
        for (int k = 0; k < pairing.levels(); ++k) {
          const int partner = pairing.Participant(pairing.index() ^ (1 << k));
          BATON_RETURN_IF_ERROR(exchange.Fold(1 + static_cast<uint32_t>(k), partner, whole, whole));
        }
        return absl::OkStatus();
      });
}

}  // namespace baton::collective
