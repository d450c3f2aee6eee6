#include "collective/ring_all_reduce.h"

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/ring_steps.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// The buffer is cut into `size` segments. In reduce-scatter step s (0 <= s < size-1) rank r sends
// segment r-s to the next rank and folds segment r-s-1, received from the previous rank, into its
// own copy; afterwards rank r holds segment r+1 fully reduced. In all-gather step s rank r
// forwards segment r+1-s and receives segment r-s in place. All segment numbers are mod size.
// RingSteps (ring_steps.cc) cuts each step into chunks and pipelines them.

namespace baton::collective {

absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, void* data, size_t count,
                           DataType type, ReduceOp op) {
  return RingAllReduce(ctx, ring, data, data, count, type, op);
}

absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring, const void* send, void* recv,
                           size_t count, DataType type, ReduceOp op) {
  const std::array<const void*, 1> inputs = {send};
  return RingAllReduce(ctx, ring, inputs, recv, count, type, op);
}

absl::Status RingAllReduce(const OpContext& ctx, const Ring& ring,
                           std::span<const void* const> inputs, void* recv, size_t count,
                           DataType type, ReduceOp op) {
  constexpr absl::string_view kWhat = "ring all-reduce";
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, ring.rank, ring.size));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (count == 0) return absl::OkStatus();
  if (recv == nullptr || inputs.empty() ||
      std::find(inputs.begin(), inputs.end(), nullptr) != inputs.end()) {
    return absl::InvalidArgumentError("ring all-reduce: needs a buffer");
  }
  if (ring.size == 1) {
    ctx.kernels->ReduceMany(type, op, recv, inputs, count);  // a copy for one input other than recv
    return absl::OkStatus();
  }
  BATON_RETURN_IF_ERROR(internal::CheckRingLinks(kWhat, ctx, ring));
  BATON_RETURN_IF_ERROR(
      internal::CheckChunkCount(kWhat, ctx, type, SegmentOf(count, ring.size, 0).length));

  const int n = ring.size;
  const int r = ring.rank;
  const int steps = n - 1;
  // Reduce-scatter, then all-gather: step s sends segment r - s, which step s - 1 received. Out
  // of place, the first step sends this rank's own input (the reduction of its inputs), and each
  // reducing step combines its own inputs with what arrives; every segment of recv is written by
  // a later step.
  std::vector<internal::RingStep> schedule;
  schedule.reserve(2 * static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    schedule.push_back({SegmentOf(count, n, r - s), SegmentOf(count, n, r - s - 1),
                        /*reduce=*/true, /*send_from_input=*/s == 0, /*own_from_input=*/true});
  }
  for (int s = 0; s < steps; ++s) {
    schedule.push_back(
        {SegmentOf(count, n, r + 1 - s), SegmentOf(count, n, r - s), /*reduce=*/false});
  }
  internal::RingSteps ring_steps(ctx, ring, recv, type, op, inputs);
  BATON_RETURN_IF_ERROR(ring_steps.Run(schedule, [&](size_t i) {
    const int s = static_cast<int>(i) % steps;
    return absl::StrCat("ring all-reduce rank ", r, "/", n, ", ",
                        static_cast<int>(i) < steps ? "reduce-scatter" : "all-gather", " step ",
                        s + 1, "/", steps);
  }));
  return absl::OkStatus();
}

}  // namespace baton::collective
