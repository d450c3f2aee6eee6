#pragma once

// The plan of a communicator: which daemons take part, which ranks each hosts, and their ring
// order. Computed once by the root daemon and identical on every daemon.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collective/layout.h"
#include "transport/transport.h"

namespace baton::daemon {

struct Member {
  std::string node_name;
  std::string peer_address;  // gRPC peer API
  // The name collective/ and the plan give the daemon's data plane: the address of its primary
  // transport's endpoint (TCP's), which every daemon has.
  std::string data_address;
  std::vector<std::string> locality;  // coarse to fine, e.g. {"pod-a", "rack-07"}; may be empty
  // Every data-plane transport the daemon listens on, in its order of preference, with the
  // address of its endpoint there (transport/selector.h picks one per peer). Empty from a daemon
  // that predates the list: then its only transport is TCP at data_address.
  std::vector<transport::TransportAddress> transports = {};

  // What a transport is told about this daemon (Transport::CanReach).
  transport::PeerInfo ToPeerInfo() const {
    transport::PeerInfo info{node_name, locality, transports};
    if (info.transports.empty() && !data_address.empty()) {
      info.transports.push_back(transport::TransportAddress{"tcp", data_address});
    }
    return info;
  }
};

struct PlanDaemon {
  Member member;
  std::vector<int> ranks;  // ascending
};

struct Plan {
  uint64_t comm_tag = 0;
  int world_size = 0;
  std::vector<PlanDaemon> daemons;  // in ring order
  // The root's measurement of the links (collective/tuner.h); zero when it had none.
  double link_alpha_seconds = 0;
  double link_bytes_per_second = 0;
  // The pipeline chunk every daemon cuts messages into: the root's chunk_bytes, so that daemons
  // configured differently still agree on every message; zero: each daemon's own.
  int64_t chunk_bytes = 0;
  // The root's --tuner-learn=false: choose from the model alone (CommunicatorOptions).
  bool model_only = false;
  // The agreed measured times (collective::MeasuredTimes::Agreed) of the root's last
  // communicator with the same TunerKey, which every daemon starts this one from; empty: none.
  std::vector<int64_t> measured_seed;
  // The communicator's 128-bit secret as this daemon's ranks presented it (the key of
  // daemon/comm_proof.h). Local to each daemon: never sent in a plan, never logged.
  std::string secret;

  // What measured times depend on besides the sizes: the daemons in order, their rank counts and
  // the chunk. Communicators with the same key may share measurements.
  std::string TunerKey() const {
    std::string key = std::to_string(chunk_bytes);
    for (const PlanDaemon& daemon : daemons) {
      key += "|" + daemon.member.data_address + "#" + std::to_string(daemon.ranks.size());
    }
    return key;
  }

  // The daemons and their ranks as collective/ sees them, from daemon `self`'s side.
  collective::Layout LayoutFor(int self) const {
    collective::Layout layout;
    layout.world_size = world_size;
    layout.self = self;
    for (const PlanDaemon& daemon : daemons) {
      layout.daemons.push_back({daemon.member.data_address, daemon.ranks, daemon.member.node_name});
    }
    return layout;
  }

  // Index into `daemons` of the daemon whose data address is `data_address`, or -1.
  int IndexOf(const std::string& data_address) const {
    for (size_t i = 0; i < daemons.size(); ++i) {
      if (daemons[i].member.data_address == data_address) return static_cast<int>(i);
    }
    return -1;
  }
};

// OK when `plan` is one for a join of `world_size` ranks (already checked against
// max_world_size) that collective/ can run on: of that world size, its ranks partitioning
// [0, world_size) (collective/layout.h) in ascending order per daemon, every daemon hosting one at
// least, and no two daemons at one data address. DataLoss saying what is wrong otherwise: a
// joining daemon takes the plan from the communicator's root, whatever that sends.
absl::Status CheckPlan(const Plan& plan, int world_size);

}  // namespace baton::daemon
