#include "daemon/rendezvous.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/comm_id.h"
#include "common/secure_random.h"
#include "common/status_macros.h"
#include "topology/planner.h"

namespace baton::daemon {

absl::StatusOr<std::string> Rendezvous::CreateSecret(uid_t uid) {
  std::string secret = SecureRandomHex(16);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  ForgetUnused(now);
  if (auto mine = unused_per_uid_.find(uid);
      mine != unused_per_uid_.end() && mine->second >= limits_.max_unused_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", uid, " has ", mine->second,
        " communicator ids whose communicator has not formed, its limit "
        "(max_pending_comm_ids_per_uid); they count until every rank joins, or until they "
        "expire unused (comm_id_ttl)"));
  }
  if (unused_ >= limits_.max_unused) {
    // Room is made only at the expense of an id nobody has joined with: a job whose ranks are
    // joining never loses its id to someone else's.
    if (unjoined_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("this daemon has ", unused_,
                       " communicator ids whose communicator has not formed, each joined by a "
                       "rank, its limit (max_pending_comm_ids)"));
    }
    const std::string oldest = unjoined_.begin()->second;  // a copy: ForgetIdle erases it
    ForgetIdle(oldest);
  }
  Pending pending;
  pending.created = now;
  pending.owner = uid;
  pending.idle_since = now;
  pending_.emplace(secret, std::move(pending));
  idle_.emplace(now, secret);
  unjoined_.emplace(now, secret);
  ++unused_;
  ++unused_per_uid_[uid];
  return secret;
}

size_t Rendezvous::PendingCount() {
  absl::MutexLock lock(&mu_);
  ForgetUnused(absl::Now());
  return pending_.size();
}

size_t Rendezvous::UnusedCountOf(uid_t uid) {
  absl::MutexLock lock(&mu_);
  ForgetUnused(absl::Now());
  auto it = unused_per_uid_.find(uid);
  return it == unused_per_uid_.end() ? 0 : it->second;
}

void Rendezvous::ForgetUnused(absl::Time now) {
  while (!idle_.empty() && now - idle_.begin()->first >= limits_.unused_ttl) {
    // A copy: forgetting the secret erases the entry that holds it.
    const std::pair<absl::Time, std::string> oldest = *idle_.begin();
    ForgetIdle(oldest.second);
    idle_.erase(oldest);  // gone already, unless no pending secret matched it
  }
}

void Rendezvous::ForgetIdle(const std::string& secret) {
  auto it = pending_.find(secret);
  if (it == pending_.end()) return;
  // The sets hold the map's own spelling of the secret (lookups accept either case).
  const std::string key = it->first;
  Pending& pending = it->second;
  idle_.erase({pending.idle_since, key});
  unjoined_.erase({pending.created, key});
  Uncount(pending);
  pending_.erase(it);
}

void Rendezvous::Uncount(Pending& pending) {
  if (!pending.counted) return;
  pending.counted = false;
  --unused_;
  auto it = unused_per_uid_.find(pending.owner);
  if (it != unused_per_uid_.end() && --it->second == 0) unused_per_uid_.erase(it);
}

int Rendezvous::Arrived(const std::string& secret) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(secret);
  if (it == pending_.end() || it->second.plan != nullptr) return 0;
  return static_cast<int>(it->second.ranks.size());
}

absl::StatusOr<uint64_t> Rendezvous::TagOfSecret(const std::string& secret) {
  return CommTagOfSecret(secret);
}

size_t Rendezvous::TagHash::operator()(const std::string& secret) const {
  const absl::Hash<std::string_view> hash;
  const std::string_view text = secret;
  return hash(text.substr(0, 16));
}

bool Rendezvous::SecretEquals::operator()(const std::string& a, const std::string& b) const {
  return ConstantTimeEquals(a, b);
}

Plan Rendezvous::ComputePlan(uint64_t comm_tag, int world_size,
                             const std::map<int, Member>& ranks) {
  Plan plan;
  plan.comm_tag = comm_tag;
  plan.world_size = world_size;
  // std::map iterates ranks in ascending order, so daemons appear in order of their lowest rank.
  for (const auto& [rank, member] : ranks) {
    const int index = plan.IndexOf(member.data_address);
    if (index >= 0) {
      plan.daemons[index].ranks.push_back(rank);
    } else {
      plan.daemons.push_back(PlanDaemon{member, {rank}});
    }
  }
  return plan;
}

absl::Status Rendezvous::OrderByLocality(Plan& plan) {
  const bool labelled = std::any_of(plan.daemons.begin(), plan.daemons.end(),
                                    [](const PlanDaemon& d) { return !d.member.locality.empty(); });
  if (!labelled) return absl::OkStatus();
  std::vector<topology::DaemonLocality> daemons;
  for (const PlanDaemon& daemon : plan.daemons) {
    // Names must be unique: node names may repeat across clusters, data addresses do not.
    daemons.push_back(topology::DaemonLocality{
        absl::StrCat(daemon.member.node_name, "@", daemon.member.data_address),
        daemon.member.locality});
  }
  BATON_ASSIGN_OR_RETURN(std::vector<int> ring, topology::PlanDaemonRing(daemons));
  std::vector<PlanDaemon> ordered;
  ordered.reserve(ring.size());
  for (int index : ring) ordered.push_back(plan.daemons[index]);
  plan.daemons = std::move(ordered);
  return absl::OkStatus();
}

absl::StatusOr<Plan> Rendezvous::Join(const std::string& secret, int world_size, int rank,
                                      const Member& member, absl::Time deadline) {
  BATON_RETURN_IF_ERROR(CommTagOfSecret(secret).status());
  absl::MutexLock lock(&mu_);
  if (!stopped_.ok()) return stopped_;
  auto it = pending_.find(secret);
  if (it == pending_.end()) {
    return absl::PermissionDeniedError(
        "unknown communicator id: its secret was not created by this root daemon, or the "
        "communicator it named has already formed");
  }
  // The map's own spelling of the secret, which idle_ and unjoined_ hold (lookups accept the
  // hex digits in either case).
  const std::string key = it->first;
  Pending& pending = it->second;
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be at least 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for world size ", world_size));
  }
  if (pending.plan != nullptr || pending.forming) {
    return absl::FailedPreconditionError(
        "communicator has already formed; its id cannot be reused");
  }
  if (pending.ranks.empty() && pending.waiting == 0) {
    pending.world_size = world_size;
  } else if (pending.world_size != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " of rank ", rank,
                                                   " differs from ", pending.world_size,
                                                   " given by the ranks before it"));
  }
  if (auto existing = pending.ranks.find(rank); existing != pending.ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " has already joined (from node ",
                                                   existing->second.node_name, ")"));
  }
  if (pending.ranks.empty() && pending.waiting == 0) {
    // Someone waits on it now: it neither expires nor makes room for others.
    idle_.erase({pending.idle_since, key});
    unjoined_.erase({pending.created, key});
  }
  pending.ranks.emplace(rank, member);
  pending.seen.insert(rank);
  if (static_cast<int>(pending.ranks.size()) == world_size) {
    absl::StatusOr<uint64_t> tag = TagOfSecret(secret);
    if (!tag.ok()) return tag.status();
    Plan plan = ComputePlan(*tag, world_size, pending.ranks);
    if (finish_) {
      pending.forming = true;
      mu_.Unlock();
      finish_(plan);
      mu_.Lock();
    }
    pending.plan = std::make_shared<const Plan>(std::move(plan));
    Uncount(pending);
  }

  ++pending.waiting;
  auto complete = [&pending] { return pending.plan != nullptr; };
  auto complete_or_stopped = [this, &pending]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending.plan != nullptr || !stopped_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&complete_or_stopped), deadline);
  // Every rank has arrived and the plan is being finished: it is only moments away.
  if (pending.forming) mu_.Await(absl::Condition(&complete));
  --pending.waiting;
  std::shared_ptr<const Plan> plan = pending.plan;
  if (plan == nullptr && !stopped_.ok()) {
    pending.ranks.erase(rank);
    const absl::Status reason = stopped_;
    if (pending.waiting == 0) {
      Uncount(pending);
      pending_.erase(secret);
    }
    return reason;
  }
  if (plan == nullptr) {
    pending.ranks.erase(rank);
    // Nobody waits on it any more: it may be joined again, and expires like an unused secret
    // (but makes no room for others: a rank joined with it).
    if (pending.ranks.empty() && pending.waiting == 0) {
      pending.idle_since = absl::Now();
      idle_.emplace(pending.idle_since, key);
    }
    // Name the first 32 missing ranks and count the rest: the message stays short however
    // large the world.
    constexpr int kNamed = 32;
    std::vector<int> missing;
    int unnamed = 0;
    for (int r = 0; r < world_size; ++r) {
      if (pending.seen.contains(r)) continue;
      if (static_cast<int>(missing.size()) < kNamed) {
        missing.push_back(r);
      } else {
        ++unnamed;
      }
    }
    return absl::DeadlineExceededError(
        absl::StrCat("timed out waiting for ranks [", absl::StrJoin(missing, ", "),
                     unnamed > 0 ? absl::StrCat(" and ", unnamed, " more") : "", "] of ",
                     world_size, " to join the communicator"));
  }
  // By key: `it` may be stale, since other secrets were added while the lock was released
  // (the map's nodes, and so `pending`, stay put when it rehashes; its iterators do not).
  if (pending.waiting == 0) pending_.erase(secret);
  return *plan;
}

void Rendezvous::Stop(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  stopped_ = reason.ok() ? absl::UnavailableError("the root daemon is shutting down") : reason;
}

}  // namespace baton::daemon
