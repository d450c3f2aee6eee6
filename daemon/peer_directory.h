#pragma once

// The peer daemons this daemon knows: those in the plans of its communicators, and those it is
// configured to probe (`probe_peers`). A peer whose last communicator has gone is kept for a
// linger period, so that scrapes still see its final counters, then forgotten: its link series
// leave /metrics and the link monitor stops probing it. That keeps label cardinality bounded by
// the peers actually in use.

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/plan.h"

namespace baton::daemon {

class PeerDirectory {
 public:
  // `configured` holds peer API addresses to know (and probe) always; `self` is this daemon, which
  // is never its own peer.
  PeerDirectory(Member self, const std::vector<std::string>& configured, absl::Duration linger);

  // Records the peers of a communicator being created, so that even one that ends before the
  // next Update lingers.
  void AddPlan(const std::vector<Member>& members) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the peers named by the current communicators' plans (all of them, every time).
  void Update(const std::vector<Member>& in_plans, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Fills in what a probe learnt about the daemon at `peer_address` (its name and data address).
  void Learn(const std::string& peer_address, const Member& member) ABSL_LOCKS_EXCLUDED(mu_);
  // The peers known at `now`, sorted by peer address; forgets those whose linger has passed.
  std::vector<Member> Active(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // The node name of the peer whose data endpoint is `data_address`, else the address itself.
  std::string NameOf(const std::string& data_address) const ABSL_LOCKS_EXCLUDED(mu_);
  // The peer whose data endpoint is `data_address`, if a plan or probe named it.
  std::optional<Member> MemberAt(const std::string& data_address) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Member member;  // node_name and data_address are empty until a plan or probe names them
    bool configured = false;
    bool in_plan = false;
    absl::Time left_plans = absl::InfinitePast();
  };

  const Member self_;
  const absl::Duration linger_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by peer address
};

}  // namespace baton::daemon
