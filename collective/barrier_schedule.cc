#include "collective/barrier_schedule.h"

#include "collective/dissemination_barrier.h"

namespace baton::collective {

absl::Status BarrierSchedule(const Schedule& s) {
  if (!s.across()) return absl::OkStatus();
  return DisseminationBarrier(s.ctx, s.layout->DaemonParticipants());
}

}  // namespace baton::collective
