#pragma once

// scatter: block r of the root's send lands in rank r's output. The root's daemon sends each
// other daemon one message per rank it hosts, straight from the root's send buffer, into that
// rank's output; its own ranks' blocks it copies, the root's own last (its output may lie in its
// input). Tags: step 0, part = the receiver's local index.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status ScatterSchedule(const Schedule& schedule);

}  // namespace baton::collective
