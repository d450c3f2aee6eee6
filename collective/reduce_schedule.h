#pragma once

// reduce: the local inputs reduced (into the root's output on its daemon, into bounded scratch
// elsewhere, a slab at a time), then a pipelined chain along the ring of daemons to the root's.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status ReduceSchedule(const Schedule& schedule);

}  // namespace baton::collective
