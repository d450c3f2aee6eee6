#pragma once

// The root daemon's side of communicator formation. The root hands out communicator secrets;
// every rank's join is forwarded here; once all ranks of a secret have arrived the plan is
// computed and returned to every waiting join.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/plan.h"

namespace baton::daemon {

// Secrets are created by the sessions of local users, so they must not accumulate, nor may one
// user's secrets push out another's. A secret is *unused* until its communicator forms. Unused
// secrets are bounded per uid that created them (more are refused) and in all: past that, the
// oldest that no rank has ever joined with is forgotten, and while every unused secret has had a
// rank, new ones are refused. A secret no rank is waiting on expires after unused_ttl (counted
// from its creation, or from when its last waiting rank gave up).
struct RendezvousLimits {
  absl::Duration unused_ttl = absl::Hours(1);
  size_t max_unused = 16384;
  size_t max_unused_per_uid = 1024;
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

  // A new random 128-bit secret (32 lowercase hex digits) that Join will accept, created for a
  // session of `uid` and counted against it until its communicator forms or it is forgotten
  // (Limits). ResourceExhausted, naming the limit, when `uid` has Limits::max_unused_per_uid
  // unused secrets, or when there are Limits::max_unused and a rank has joined with each.
  absl::StatusOr<std::string> CreateSecret(uid_t uid);
  // Secrets created and not yet joined with, or formed and not yet collected.
  size_t PendingCount();
  // Unused secrets created for `uid`.
  size_t UnusedCountOf(uid_t uid);

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
    uid_t owner = 0;        // whose session created it
    bool counted = true;    // unused: counted against its owner and the total
    absl::Time idle_since;  // while no rank waits: since when (the key in idle_)
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

  // Forgets the secrets that nobody waited on for Limits::unused_ttl.
  void ForgetUnused(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets an idle secret (no rank waits on it).
  void ForgetIdle(const std::string& secret) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops counting a secret as unused (its communicator formed, or it is being forgotten).
  void Uncount(Pending& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PlanFinisher finish_;
  const Limits limits_;
  absl::Mutex mu_;
  // Node-based: waiters keep a reference to their entry while the lock is released.
  absl::node_hash_map<std::string, Pending, TagHash, SecretEquals> pending_ ABSL_GUARDED_BY(mu_);
  // Secrets that no rank waits on, by Pending::idle_since: the next to expire first.
  std::set<std::pair<absl::Time, std::string>> idle_ ABSL_GUARDED_BY(mu_);
  // Of those, the ones no rank has ever joined with, by creation: the ones forgotten to make room.
  std::set<std::pair<absl::Time, std::string>> unjoined_ ABSL_GUARDED_BY(mu_);
  size_t unused_ ABSL_GUARDED_BY(mu_) = 0;  // Pending::counted ones
  absl::flat_hash_map<uid_t, size_t> unused_per_uid_ ABSL_GUARDED_BY(mu_);
  absl::Status stopped_ ABSL_GUARDED_BY(mu_);  // Stop's reason once stopped
};

}  // namespace baton::daemon
