#pragma once

// barrier: the dissemination barrier across daemons (the local ranks have all arrived when the
// schedule runs).

#include "collective/schedule.h"

namespace baton::collective {

absl::Status BarrierSchedule(const Schedule& schedule);

}  // namespace baton::collective
