#include "transport/flow_control.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace baton::transport {
namespace {

// A sender keeps this many of a peer's epochs (a link that comes back starts a new one; the old
// ones only matter to sends still in flight on it).
constexpr size_t kEpochsKept = 4;

uint64_t FirstEpoch() {
  // Random, so that the epochs of an endpoint that restarted at the same address are not those
  // its peers still hold from before.
  std::random_device random;
  const uint64_t base = (uint64_t{random()} << 32) | random();
  return std::max<uint64_t>(base >> 1, 1);
}

}  // namespace

ReceiveCredits::ReceiveCredits(uint64_t window, uint64_t total)
    : window_(window),
      total_(total),
      eager_max_(window == 0 ? UINT64_MAX : window / 4),
      next_epoch_(FirstEpoch()) {}

uint64_t ReceiveCredits::ReturnThreshold(const Epoch& epoch) const {
  // Once every message is taken, the sender has at least window - owed > eager_max back.
  return std::max<uint64_t>(
      1, std::min(epoch.window - std::min(epoch.window, eager_max_), epoch.window / 2));
}

CreditGrant ReceiveCredits::Attach(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = epochs_.find(peer);
  if (it == epochs_.end()) {
    Epoch epoch;
    epoch.id = next_epoch_++;
    if (next_epoch_ == 0) next_epoch_ = 1;
    if (window_ == 0) {
      epoch.window = epoch.limit = UINT64_MAX;
    } else {
      uint64_t window = window_;
      if (total_ > 0) {
        uint64_t others = 0;
        for (const auto& [other, held] : epochs_) others += held.window;
        // Never below half the window: its eager messages must always fit (flow_control.h).
        window = std::clamp(total_ - std::min(total_, others), window_ / 2, window_);
      }
      epoch.window = window;
      auto held = held_.find(peer);
      epoch.limit = window - std::min(window, held == held_.end() ? 0 : held->second);
    }
    it = epochs_.emplace(peer, epoch).first;
    if (auto parked = parked_.find(peer); parked != parked_.end()) {
      for (const ClearToSend& clear : parked->second) clear_to_send_.emplace_back(peer, clear);
      parked_.erase(parked);
    }
  }
  ++it->second.links;
  return CreditGrant{it->second.id, it->second.limit, eager_max_};
}

void ReceiveCredits::Detach(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = epochs_.find(peer);
  if (it != epochs_.end() && --it->second.links <= 0) {
    epochs_.erase(it);
    grants_due_.erase(peer);
  }
}

std::optional<CreditGrant> ReceiveCredits::Current(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = epochs_.find(peer);
  if (it == epochs_.end()) return std::nullopt;
  return CreditGrant{it->second.id, it->second.limit, eager_max_};
}

bool ReceiveCredits::Charge(const std::string& peer, uint64_t length) {
  const uint64_t charge = CreditCharge(length);
  absl::MutexLock lock(&mu_);
  if (window_ == 0) return true;
  auto it = epochs_.find(peer);
  if (it == epochs_.end() || charge > eager_max_ || charge > it->second.limit ||
      it->second.received > it->second.limit - charge) {
    ++violations_[peer];
    return false;
  }
  it->second.received += charge;
  held_[peer] += charge;
  return true;
}

void ReceiveCredits::Release(const std::string& peer, uint64_t charge) {
  absl::MutexLock lock(&mu_);
  if (window_ == 0 || charge == 0) return;
  auto held = held_.find(peer);
  if (held != held_.end()) {
    held->second -= std::min(held->second, charge);
    if (held->second == 0) held_.erase(held);
  }
  auto it = epochs_.find(peer);
  if (it == epochs_.end()) return;  // the next epoch's window counts what is still held
  Epoch& epoch = it->second;
  epoch.owed += charge;
  if (epoch.owed >= ReturnThreshold(epoch)) {
    epoch.limit += epoch.owed;
    epoch.owed = 0;
    grants_due_.insert(peer);
  }
}

void ReceiveCredits::Posted(const std::string& peer, const Tag& tag, uint64_t length) {
  if (Eager(length)) return;
  absl::MutexLock lock(&mu_);
  if (!epochs_.contains(peer)) {
    // Sent once the peer links: sending now would have to link it first, and the sender links
    // anyway to send.
    parked_[peer].push_back(ClearToSend{tag, length});
    return;
  }
  clear_to_send_.emplace_back(peer, ClearToSend{tag, length});
}

ReceiveCredits::Outgoing ReceiveCredits::TakeOutgoing(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopped_ || !grants_due_.empty() || !clear_to_send_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&due), deadline);
  Outgoing outgoing;
  outgoing.grants.assign(grants_due_.begin(), grants_due_.end());
  grants_due_.clear();
  outgoing.clear_to_send.assign(std::make_move_iterator(clear_to_send_.begin()),
                                std::make_move_iterator(clear_to_send_.end()));
  clear_to_send_.clear();
  return outgoing;
}

void ReceiveCredits::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

absl::flat_hash_map<std::string, uint64_t> ReceiveCredits::Violations() const {
  absl::MutexLock lock(&mu_);
  return violations_;
}

void SendCredits::Grant(const std::string& peer, const CreditGrant& grant) {
  absl::MutexLock lock(&mu_);
  Peer& state = peers_[peer];
  auto it = state.epochs.find(grant.epoch);
  if (it == state.epochs.end()) {
    if (state.epochs.size() >= kEpochsKept) {
      // Drop an old epoch other than the latest: its links are gone or going.
      for (auto old = state.epochs.begin(); old != state.epochs.end(); ++old) {
        if (old->first != state.latest) {
          state.epochs.erase(old);
          break;
        }
      }
    }
    it = state.epochs.emplace(grant.epoch, Epoch{}).first;
    state.latest = grant.epoch;
  }
  it->second.limit = std::max(it->second.limit, grant.limit);
  it->second.eager_max = grant.eager_max;
}

void SendCredits::ClearToSend(const std::string& peer, const transport::ClearToSend& clear) {
  absl::MutexLock lock(&mu_);
  Peer& state = peers_[peer];
  if (state.clear_to_send.size() >= kMaxClearToSendPerPeer) return;
  state.clear_to_send[clear.tag] = clear.length;
}

std::optional<uint64_t> SendCredits::EagerMax(const std::string& peer, uint64_t epoch) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  auto found = it->second.epochs.find(epoch);
  if (found == it->second.epochs.end()) return std::nullopt;
  return found->second.eager_max;
}

std::optional<uint64_t> SendCredits::Latest(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  return it->second.latest;
}

absl::Status SendCredits::BlockingLocked(uint64_t comm) const {
  if (!closed_.ok()) return closed_;
  if (auto it = aborted_.find(comm); it != aborted_.end()) return it->second;
  return absl::OkStatus();
}

absl::Status SendCredits::WaitLocked(const std::string& peer, const Tag& tag, absl::Time deadline,
                                     absl::string_view waiting_for, bool* retry,
                                     absl::FunctionRef<bool()> ready) {
  *retry = false;
  const uint64_t retired = peers_[peer].retired;
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !BlockingLocked(tag.comm).ok() || peers_[peer].retired != retired || ready();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (absl::Status blocking = BlockingLocked(tag.comm); !blocking.ok()) return blocking;
  if (peers_[peer].retired != retired) {
    *retry = true;
    return absl::OkStatus();
  }
  if (ready()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("send to peer ", peer, " (", TagToString(tag),
                                                  ") timed out waiting for ", waiting_for));
}

absl::Status SendCredits::Take(const std::string& peer, uint64_t epoch, const Tag& tag,
                               uint64_t charge, absl::Time deadline, bool* retry) {
  absl::MutexLock lock(&mu_);
  bool gone = false;
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Peer& state = peers_[peer];
    auto it = state.epochs.find(epoch);
    gone = it == state.epochs.end();
    return gone || it->second.limit - std::min(it->second.limit, it->second.sent) >= charge;
  };
  absl::Status status = WaitLocked(peer, tag, deadline, "credit from the receiver", retry, enough);
  if (!status.ok() || *retry) return status;
  if (gone) {
    *retry = true;
    return absl::OkStatus();
  }
  peers_[peer].epochs[epoch].sent += charge;
  return absl::OkStatus();
}

bool SendCredits::TryTake(const std::string& peer, uint64_t epoch, uint64_t charge) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return false;
  auto found = it->second.epochs.find(epoch);
  if (found == it->second.epochs.end()) return false;
  Epoch& state = found->second;
  if (state.limit - std::min(state.limit, state.sent) < charge) return false;
  state.sent += charge;
  return true;
}

void SendCredits::Refund(const std::string& peer, uint64_t epoch, uint64_t charge) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  auto found = it->second.epochs.find(epoch);
  if (found == it->second.epochs.end()) return;
  found->second.sent -= std::min(found->second.sent, charge);
}

absl::Status SendCredits::AwaitClearToSend(const std::string& peer, const Tag& tag,
                                           absl::Time deadline, bool* retry) {
  absl::MutexLock lock(&mu_);
  auto cleared = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return peers_[peer].clear_to_send.contains(tag);
  };
  absl::Status status =
      WaitLocked(peer, tag, deadline, "the receiver to post its receive", retry, cleared);
  if (status.ok() && !*retry) peers_[peer].clear_to_send.erase(tag);
  return status;
}

void SendCredits::Retire(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  Peer& state = peers_[peer];
  ++state.retired;
  state.epochs.clear();
  state.latest.reset();
}

void SendCredits::Abort(uint64_t comm, const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  aborted_[comm] = reason.ok() ? absl::CancelledError("communicator aborted") : reason;
}

void SendCredits::Forget(uint64_t comm) {
  absl::MutexLock lock(&mu_);
  aborted_.erase(comm);
  for (auto& [peer, state] : peers_) {
    absl::erase_if(state.clear_to_send,
                   [comm](const auto& entry) { return entry.first.comm == comm; });
  }
}

void SendCredits::Shutdown(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = status.ok() ? absl::UnavailableError("endpoint shut down") : status;
}

}  // namespace baton::transport
