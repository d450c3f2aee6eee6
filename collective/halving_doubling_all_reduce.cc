#include "collective/halving_doubling_all_reduce.h"

#include <vector>

#include "collective/pairwise_exchange.h"
#include "common/status_macros.h"

namespace baton::collective {

absl::Status HalvingDoublingAllReduce(const OpContext& ctx, const Participants& participants,
                                      void* data, size_t count, DataType type, ReduceOp op) {
  return internal::RunPairwiseAllReduce(
      "halving-doubling all-reduce", ctx, participants, data, count, type, op,
      /*steps_per_level=*/2,
      [](const internal::Pairing& pairing, internal::PairwiseExchange& exchange) -> absl::Status {
        const int levels = pairing.levels();
        const int index = pairing.index();
        // Halving: ranges[k] is this participant's range before step k. The participant whose bit
        // is clear keeps the first ceil(r/2) elements.
        std::vector<ElementRange> ranges = {exchange.whole()};
        for (int k = 0; k < levels; ++k) {
          const int mask = pairing.p >> (k + 1);
          const ElementRange range = ranges.back();
          const ElementRange first{range.begin, (range.length + 1) / 2};
          const ElementRange second{first.begin + first.length, range.length - first.length};
          const bool keep_first = (index & mask) == 0;
          BATON_RETURN_IF_ERROR(
              exchange.Fold(1 + static_cast<uint32_t>(k), pairing.Participant(index ^ mask),
                            keep_first ? first : second, keep_first ? second : first));
          ranges.push_back(keep_first ? first : second);
        }
        // Doubling: retrace the steps, swapping the block held for the partner's.
        for (int k = levels - 1; k >= 0; --k) {
          const int mask = pairing.p >> (k + 1);
          const ElementRange mine = ranges[k + 1];
          const ElementRange parent = ranges[k];
          const ElementRange theirs =
              mine.begin == parent.begin
                  ? ElementRange{mine.begin + mine.length, parent.length - mine.length}
                  : ElementRange{parent.begin, parent.length - mine.length};
          BATON_RETURN_IF_ERROR(exchange.Swap(1 + static_cast<uint32_t>(levels + (levels - 1 - k)),
                                              pairing.Participant(index ^ mask), mine, theirs));
        }
        return absl::OkStatus();
      });
}

}  // namespace baton::collective
