#pragma once

// all_reduce on a daemon's local ranks: their inputs are reduced into the first local rank's
// output (the ring reads them itself, as it needs them, when none overlaps that output), that
// buffer is all-reduced across daemons with the schedule's algorithm (ring, tree, doubling,
// halving_doubling), averaged if the operator is avg, and copied to the other local ranks.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status AllReduceSchedule(const Schedule& schedule);

}  // namespace baton::collective
