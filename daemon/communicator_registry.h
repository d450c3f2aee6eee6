#pragma once

// The communicators this daemon takes part in, by tag.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/communicator.h"

namespace baton::daemon {

class CommunicatorRegistry {
 public:
  using Factory = std::function<absl::StatusOr<std::shared_ptr<Communicator>>(const Plan&)>;

  explicit CommunicatorRegistry(Factory factory) : factory_(std::move(factory)) {}

  // The communicator of plan.comm_tag, created from the plan on first use. One that was removed
  // after failing before all its local ranks had attached comes back failed, with its reason,
  // for the ranks still attaching (with the plan's secret, within kEndedTtl): never fresh, or
  // they would wait in it for peers that left.
  absl::StatusOr<std::shared_ptr<Communicator>> GetOrCreate(const Plan& plan);
  // Nullptr if unknown.
  std::shared_ptr<Communicator> Find(uint64_t comm_tag) const;
  // Forgets a communicator; it is destroyed when its last user lets go.
  void Remove(uint64_t comm_tag);

  // How many failed communicators, and for how long, are remembered for ranks still attaching.
  static constexpr size_t kMaxEnded = 1024;
  static constexpr absl::Duration kEndedTtl = absl::Minutes(5);
  // Detaches every rank the session held; communicators left without ranks are removed.
  void DropSession(uint64_t session_id);
  // Aborts every communicator (daemon shutdown).
  void AbortAll(const absl::Status& reason, bool notify_peers);
  std::vector<std::shared_ptr<Communicator>> List() const;
  // The node arena counters of every communicator this daemon has had, the removed ones
  // included, so that the totals only grow (Prometheus counters).
  ArenaCounts ArenaTotals() const;

 private:
  const Factory factory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Communicator>> communicators_ ABSL_GUARDED_BY(mu_);
  ArenaCounts removed_arena_counts_ ABSL_GUARDED_BY(mu_){};  // of the communicators removed
  // Communicators removed after failing before every local rank had attached, oldest first.
  struct Ended {
    uint64_t comm_tag = 0;
    std::string secret;
    absl::Status reason;
    absl::Time at;
  };
  std::deque<Ended> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::daemon
