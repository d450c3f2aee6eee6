#include "daemon/plan.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace baton::daemon {

absl::Status CheckPlan(const Plan& plan, int world_size) {
  // The world size and every rank are checked before anything is sized by them: a plan of a
  // world of 2^31 ranks would otherwise have this daemon allocate gigabytes per communicator.
  if (plan.world_size != world_size) {
    return absl::DataLossError(absl::StrCat("a plan of world size ", plan.world_size,
                                            " for a join of world size ", world_size));
  }
  constexpr size_t kMaxQuoted = 64;  // addresses in messages are the root's input
  std::vector<bool> placed(static_cast<size_t>(world_size), false);
  int ranks = 0;
  absl::flat_hash_set<std::string> addresses;
  for (const PlanDaemon& daemon : plan.daemons) {
    const std::string quoted = daemon.member.data_address.substr(0, kMaxQuoted);
    if (daemon.ranks.empty()) {
      return absl::DataLossError(absl::StrCat("the plan's daemon at ", quoted, " hosts no rank"));
    }
    if (!addresses.insert(daemon.member.data_address).second) {
      return absl::DataLossError(absl::StrCat("the plan names data address ", quoted, " twice"));
    }
    int previous = -1;
    for (const int rank : daemon.ranks) {
      if (rank < 0 || rank >= world_size || placed[static_cast<size_t>(rank)]) {
        return absl::DataLossError(absl::StrCat("the plan places rank ", rank,
                                                rank < 0 || rank >= world_size
                                                    ? " outside its world"
                                                    : " on two daemons, or twice on one"));
      }
      if (rank < previous) {
        return absl::DataLossError(
            absl::StrCat("the plan's ranks on ", quoted, " are not in ascending order"));
      }
      placed[static_cast<size_t>(rank)] = true;
      previous = rank;
      ++ranks;
    }
  }
  if (ranks != world_size) {
    return absl::DataLossError(
        absl::StrCat("the plan places ", ranks, " of its ", world_size, " ranks"));
  }
  return absl::OkStatus();
}

}  // namespace baton::daemon
