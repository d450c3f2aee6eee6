#pragma once

// gather: every rank's block lands in the root's output in rank order. Each daemon sends the
// root's daemon one message per local rank, straight from that rank's send buffer; the root's
// daemon receives each straight into its place in the root's output and copies its own ranks'
// blocks. Nothing is packed or staged. Tags: step 0, part = the sender's local index.

#include "collective/schedule.h"

namespace baton::collective {

absl::Status GatherSchedule(const Schedule& schedule);

}  // namespace baton::collective
