#pragma once

// all_to_all: straight between the ranks' buffers where no send overlaps a receive buffer (one
// direct exchange of blocks between daemons); in place, packed into slabs per daemon pair.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status AllToAllSchedule(const Schedule& schedule);

}  // namespace baton::collective
