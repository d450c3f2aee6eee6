#pragma once

// broadcast: the root's send placed in a local output on the root's daemon, a pipelined chain
// along the ring of daemons from there, then copied to every local rank.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status BroadcastSchedule(const Schedule& schedule);

}  // namespace baton::collective
