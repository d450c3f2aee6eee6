#pragma once

// reduce_scatter on a daemon's local ranks, a slab of every rank's block at a time: the local
// inputs reduced into scratch, then across daemons (a ring reduce-scatter when the placement is
// block-regular, so that a daemon's ranks own exactly its segment; else a ring all-reduce), then
// each local rank's block of the slab copied out.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status ReduceScatterSchedule(const Schedule& schedule);

}  // namespace baton::collective
