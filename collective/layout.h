#pragma once

// How a communicator's ranks sit on its daemons, as the hierarchical schedules and the
// point-to-point exchange see it: the daemons in ring order, each with its data-plane address and
// its local ranks, and which daemon this one is. Built by the daemon from its plan; built by tests
// directly, so that every schedule runs as D daemons x L local ranks over the in-memory transport.

#include <string>
#include <utility>
#include <vector>

#include "collective/op_context.h"

namespace baton::collective {

struct LayoutDaemon {
  std::string address;     // data-plane endpoint address
  std::vector<int> ranks;  // ascending; every daemon hosts at least one rank
  std::string name;        // the daemon's node name, for messages
};

struct Layout {
  int world_size = 0;
  int self = 0;                       // this daemon's index in `daemons`
  std::vector<LayoutDaemon> daemons;  // in ring order; their ranks partition [0, world_size)

  int daemon_count() const { return static_cast<int>(daemons.size()); }
  const std::vector<int>& local_ranks() const { return daemons[self].ranks; }
  // The daemon index and local index hosting `rank`; {-1, -1} if no daemon hosts it.
  std::pair<int, int> Locate(int rank) const;
  // The local index of `rank` on this daemon, or -1.
  int LocalIndex(int rank) const;
  // True when every daemon hosts the same number of ranks, daemon i ranks [i*k, (i+1)*k): then a
  // daemon's ranks' blocks form exactly its segment of an even split.
  bool BlockRegular() const;
  // This daemon's place on the ring of daemons, and every daemon's address.
  Ring RingOfDaemons() const;
  Participants DaemonParticipants() const;
};

}  // namespace baton::collective
