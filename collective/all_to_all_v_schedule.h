#pragma once

// all_to_all_v: rank s's block for rank t (send_counts[t] elements at send_displs[t]) lands in
// t's output at recv_displs[s] (recv_counts[s] elements, which must equal s's send_counts[t]).
// One message per pair of ranks on different daemons, zero-length ones included (so that counts
// that disagree fail on the length check instead of waiting), sent straight from the send buffer
// and received straight into place; pairs on one daemon are copied. A rank whose send overlaps a
// local output is staged first. Tags: step 0, part = i * L + j, i the sender's local index, j the
// receiver's, L the receiver's daemon's rank count.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status AllToAllVSchedule(const Schedule& schedule);

}  // namespace baton::collective
