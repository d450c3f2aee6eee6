#pragma once

// The root daemon's side of communicator formation. The root hands out communicator secrets;
// every rank's join is forwarded here; once all ranks of a secret have arrived the plan is
// computed and returned to every waiting join.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/plan.h"

namespace baton::daemon {

// How long a secret nobody has joined with stays valid, and how many such secrets are kept
// (beyond that the oldest unused ones are forgotten): anyone on the node may create ids, so they
// must not accumulate.
struct RendezvousLimits {
  absl::Duration unused_ttl = absl::Hours(1);
  size_t max_unused = 16384;
};

class Rendezvous {
 public:
  // Refines a complete plan before every rank gets it (ring order, link model); runs without the
  // rendezvous lock, once per communicator, on the thread of the rank that completed it. It must
  // finish within a few seconds: ranks whose deadline passes meanwhile wait for it.
  using PlanFinisher = std::function<void(Plan& plan)>;

  using Limits = RendezvousLimits;

  explicit Rendezvous(PlanFinisher finish = nullptr, Limits limits = {})
      : finish_(std::move(finish)), limits_(limits) {}

  // A new random 128-bit secret (32 lowercase hex digits) that Join will accept, until it has
  // gone unused for Limits::unused_ttl or Limits::max_unused newer unused ones exist.
  std::string CreateSecret();
  // Secrets created and not yet joined with, or formed and not yet collected.
  size_t PendingCount();

  // Registers rank `rank` of communicator `secret`, hosted by `member`, and waits until every rank
  // of `world_size` has arrived or `deadline` passes. Errors:
  //   InvalidArgument   - `secret` is not 32 lower case hex digits (common/comm_id.h);
  //   PermissionDenied  - the secret was not created here (all 128 bits are compared);
  //   InvalidArgument   - rank out of range, a world size differing from the first join's, or a
  //                       rank that already joined;
  //   FailedPrecondition - the communicator has already formed;
  //   DeadlineExceeded  - naming the ranks that have not arrived. This rank is withdrawn, so it may
  //                       join again;
  //   Stop's reason     - once Stop was called (at once, for joins waiting then).
  absl::StatusOr<Plan> Join(const std::string& secret, int world_size, int rank,
                            const Member& member, absl::Time deadline);

  // Fails every waiting join and every later one with `reason` (not OK): the daemon is shutting
  // down, and must not wait for ranks until their deadlines.
  void Stop(const absl::Status& reason);

  // How many ranks of `secret` are waiting (0 if unknown or formed).
  int Arrived(const std::string& secret);

  // Computes the plan for a complete set of ranks: one entry per daemon, ordered by the lowest
  // rank each hosts. Exposed for tests.
  static Plan ComputePlan(uint64_t comm_tag, int world_size, const std::map<int, Member>& ranks);

  // Reorders plan.daemons into a ring that crosses locality boundaries as rarely as possible
  // (topology::PlanDaemonRing: daemons sharing a label prefix are contiguous). Only when some
  // daemon has labels: otherwise daemons stay in rank order, which keeps block placements
  // regular (reduce-scatter and all-gather then move the least data). On error the plan is
  // unchanged.
  static absl::Status OrderByLocality(Plan& plan);

  // The communicator tag a secret (32 lower case hex digits) maps to: its first 64 bits.
  static absl::StatusOr<uint64_t> TagOfSecret(const std::string& secret);

 private:
  struct Pending {
    absl::Time created;
    int world_size = 0;
    std::map<int, Member> ranks;       // rank -> hosting daemon, of the ranks waiting now
    std::set<int> seen;                // every rank that ever arrived, withdrawn or not
    bool forming = false;              // complete, and the finisher is running
    std::shared_ptr<const Plan> plan;  // set once complete and finished
    int waiting = 0;
  };

  // The secrets' map finds a secret by its tag (the first 16 digits, which are not secret) and
  // compares all 32 digits in constant time, so that how long a join takes to be refused says
  // nothing about how much of a guessed secret was right.
  struct TagHash {
    size_t operator()(const std::string& secret) const;
  };
  struct SecretEquals {
    bool operator()(const std::string& a, const std::string& b) const;
  };

  // Forgets unused secrets that expired, and the oldest unused ones beyond the limit.
  void ForgetUnused(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PlanFinisher finish_;
  const Limits limits_;
  absl::Mutex mu_;
  // Node-based: waiters keep a reference to their entry while the lock is released.
  absl::node_hash_map<std::string, Pending, TagHash, SecretEquals> pending_ ABSL_GUARDED_BY(mu_);
  // Secrets in the order they were created (some may be gone from pending_ already).
  std::deque<std::pair<absl::Time, std::string>> created_ ABSL_GUARDED_BY(mu_);
  absl::Status stopped_ ABSL_GUARDED_BY(mu_);  // Stop's reason once stopped
};

}  // namespace baton::daemon
