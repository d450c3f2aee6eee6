#include "collective/ring_all_gather.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/ring_steps.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// In step s (0 <= s < size-1) rank r forwards segment r-s to the next rank and stores segment
// r-s-1 from the previous one: each segment starts at its owner and travels size-1 hops.

namespace baton::collective {

absl::Status RingAllGather(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type) {
  constexpr absl::string_view kWhat = "ring all-gather";
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, ring.rank, ring.size));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  if (ring.size == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckRingLinks(kWhat, ctx, ring));
  if (data == nullptr) return absl::InvalidArgumentError("ring all-gather: needs a buffer");
  BATON_RETURN_IF_ERROR(
      internal::CheckChunkCount(kWhat, ctx, type, SegmentOf(count, ring.size, 0).length));

  const int n = ring.size;
  const int r = ring.rank;
  const int steps = n - 1;
  std::vector<internal::RingStep> schedule;
  schedule.reserve(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    schedule.push_back(
        {SegmentOf(count, n, r - s), SegmentOf(count, n, r - s - 1), /*reduce=*/false});
  }
  internal::RingSteps ring_steps(ctx, ring, data, type, ReduceOp::kSum);
  BATON_RETURN_IF_ERROR(ring_steps.Run(schedule, [&](size_t i) {
    return absl::StrCat("ring all-gather rank ", r, "/", n, ", step ", i + 1, "/", steps);
  }));
  return absl::OkStatus();
}

}  // namespace baton::collective
