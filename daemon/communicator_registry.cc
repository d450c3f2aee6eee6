#include "daemon/communicator_registry.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/secure_random.h"

namespace baton::daemon {

absl::StatusOr<std::shared_ptr<Communicator>> CommunicatorRegistry::GetOrCreate(const Plan& plan) {
  absl::MutexLock lock(&mu_);
  auto it = communicators_.find(plan.comm_tag);
  if (it != communicators_.end()) return it->second;
  absl::StatusOr<std::shared_ptr<Communicator>> created = factory_(plan);
  if (!created.ok()) return created.status();
  const absl::Time now = absl::Now();
  while (!ended_.empty() && now - ended_.front().at > kEndedTtl) ended_.pop_front();
  for (auto e = ended_.begin(); e != ended_.end(); ++e) {
    // The secret too: the tag is only its first half, and the root chose it.
    if (e->comm_tag != plan.comm_tag || !ConstantTimeEquals(e->secret, plan.secret)) continue;
    (*created)->Abort(e->reason, /*notify_peers=*/false);  // not visible to anyone yet
    ended_.erase(e);
    break;
  }
  communicators_.emplace(plan.comm_tag, *created);
  return *created;
}

std::shared_ptr<Communicator> CommunicatorRegistry::Find(uint64_t comm_tag) const {
  absl::MutexLock lock(&mu_);
  auto it = communicators_.find(comm_tag);
  return it == communicators_.end() ? nullptr : it->second;
}

void CommunicatorRegistry::Remove(uint64_t comm_tag) {
  std::shared_ptr<Communicator> removed;  // destroyed outside the lock: it joins a thread
  {
    absl::MutexLock lock(&mu_);
    auto it = communicators_.find(comm_tag);
    if (it == communicators_.end()) return;
    removed = std::move(it->second);
    communicators_.erase(it);
    if (std::optional<absl::Status> failed = removed->FailedBeforeEveryRankAttached()) {
      if (ended_.size() >= kMaxEnded) ended_.pop_front();
      ended_.push_back(Ended{comm_tag, removed->plan().secret, *std::move(failed), absl::Now()});
    }
    // In the same critical section as the erase: ArenaTotals counts it exactly once.
    removed_arena_counts_ += removed->ArenaCounters();
  }
}

ArenaCounts CommunicatorRegistry::ArenaTotals() const {
  absl::MutexLock lock(&mu_);
  ArenaCounts totals = removed_arena_counts_;
  for (const auto& [tag, comm] : communicators_) totals += comm->ArenaCounters();
  return totals;
}

void CommunicatorRegistry::DropSession(uint64_t session_id) {
  for (const std::shared_ptr<Communicator>& comm : List()) {
    const std::vector<int> lost = comm->DetachSession(session_id);
    if (lost.empty()) continue;
    // A rank that goes away without Destroy leaves its peers unable to finish: fail them now.
    comm->Abort(
        absl::UnavailableError(absl::StrCat("rank(s) [", absl::StrJoin(lost, ", "), "] on node ",
                                            comm->plan().daemons[comm->self()].member.node_name,
                                            " went away without destroying the communicator")),
        /*notify_peers=*/true);
    if (comm->Empty()) Remove(comm->plan().comm_tag);
  }
}

void CommunicatorRegistry::AbortAll(const absl::Status& reason, bool notify_peers) {
  for (const std::shared_ptr<Communicator>& comm : List()) comm->Abort(reason, notify_peers);
}

std::vector<std::shared_ptr<Communicator>> CommunicatorRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Communicator>> list;
  list.reserve(communicators_.size());
  for (const auto& [tag, comm] : communicators_) list.push_back(comm);
  return list;
}

}  // namespace baton::daemon
