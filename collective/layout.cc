#include "collective/layout.h"

#include <algorithm>

namespace baton::collective {

std::pair<int, int> Layout::Locate(int rank) const {
  for (size_t d = 0; d < daemons.size(); ++d) {
    const std::vector<int>& ranks = daemons[d].ranks;
    auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
    if (it != ranks.end() && *it == rank) {
      return {static_cast<int>(d), static_cast<int>(it - ranks.begin())};
    }
  }
  return {-1, -1};
}

int Layout::LocalIndex(int rank) const {
  const std::vector<int>& ranks = local_ranks();
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end() || *it != rank) return -1;
  return static_cast<int>(it - ranks.begin());
}

bool Layout::BlockRegular() const {
  const size_t k = daemons.front().ranks.size();
  for (size_t d = 0; d < daemons.size(); ++d) {
    const std::vector<int>& ranks = daemons[d].ranks;
    if (ranks.size() != k) return false;
    for (size_t i = 0; i < k; ++i) {
      if (ranks[i] != static_cast<int>(d * k + i)) return false;
    }
  }
  return true;
}

Ring Layout::RingOfDaemons() const {
  const int size = daemon_count();
  Ring ring;
  ring.rank = self;
  ring.size = size;
  ring.prev = daemons[(self + size - 1) % size].address;
  ring.next = daemons[(self + 1) % size].address;
  return ring;
}

Participants Layout::DaemonParticipants() const {
  Participants participants;
  participants.rank = self;
  for (const LayoutDaemon& daemon : daemons) participants.addresses.push_back(daemon.address);
  return participants;
}

}  // namespace baton::collective
