#pragma once

// all_gather on a daemon's local ranks: their blocks placed in the first local rank's output, a
// ring all-gather across daemons (block-regular placement) or a byte-sum all-reduce of blocks
// zeroed where other daemons' ranks go (irregular), then the whole output copied to the others.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status AllGatherSchedule(const Schedule& schedule);

}  // namespace baton::collective
