#include "collective/ring_reduce_scatter.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/ring_steps.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// In step s (0 <= s < size-1) rank r sends segment r-1-s to the next rank and folds segment
// r-2-s, received from the previous rank, into its own copy. Segment j thus starts at rank j+1
// and travels once around the ring, collecting every rank's contribution, to end at rank j after
// size-1 steps. (The all-reduce's reduce-scatter is the same schedule shifted by one segment.)

namespace baton::collective {

absl::Status RingReduceScatter(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                               DataType type, ReduceOp op) {
  constexpr absl::string_view kWhat = "ring reduce-scatter";
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, ring.rank, ring.size));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (ring.size == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckRingLinks(kWhat, ctx, ring));
  if (data == nullptr) return absl::InvalidArgumentError("ring reduce-scatter: needs a buffer");
  BATON_RETURN_IF_ERROR(
      internal::CheckChunkCount(kWhat, ctx, type, SegmentOf(count, ring.size, 0).length));

  const int n = ring.size;
  const int r = ring.rank;
  const int steps = n - 1;
  std::vector<internal::RingStep> schedule;
  schedule.reserve(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    schedule.push_back(
        {SegmentOf(count, n, r - 1 - s), SegmentOf(count, n, r - 2 - s), /*reduce=*/true});
  }
  internal::RingSteps ring_steps(ctx, ring, data, type, op);
  BATON_RETURN_IF_ERROR(ring_steps.Run(schedule, [&](size_t i) {
    return absl::StrCat("ring reduce-scatter rank ", r, "/", n, ", step ", i + 1, "/", steps);
  }));
  return absl::OkStatus();
}

}  // namespace baton::collective
