#include "transport/receive_matcher.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace baton::transport {
namespace {

absl::Status LengthMismatch(const std::string& peer, const Tag& tag, uint64_t message_bytes,
                            size_t buffer_bytes) {
  return absl::FailedPreconditionError(
      absl::StrCat("message from peer ", peer, " (", TagToString(tag), ") has ", message_bytes,
                   " bytes but the receive buffer has ", buffer_bytes, " bytes"));
}

// Abort and Shutdown take a reason that must not be OK; an OK one would complete receives as
// successful without data, so it is replaced rather than trusted.
absl::Status NotOk(const absl::Status& status, const char* fallback) {
  return status.ok() ? absl::CancelledError(fallback) : status;
}

}  // namespace

absl::Status RecvDeadlineExceeded(const std::string& peer, const Tag& tag) {
  return absl::DeadlineExceededError(absl::StrCat("timed out waiting for the message from peer ",
                                                  peer, " (", TagToString(tag), ")"));
}

absl::Time ReceiveMatcher::Delivery::deadline() const {
  // The receive cannot return while it is claimed, so recv_ stays valid; its deadline is
  // immutable after posting.
  return kind_ == Kind::kPosted ? recv_->deadline : absl::InfiniteFuture();
}

bool ReceiveMatcher::Delivery::cancelled() const {
  return kind_ == Kind::kPosted && recv_->cancelled.load(std::memory_order_acquire);
}

void ReceiveMatcher::Delivery::Write(ConstByteSpan payload) const {
  if (discard() || payload.empty()) return;
  if (consuming()) {
    Consume(0, payload);
  } else {
    std::memcpy(buffer_.data(), payload.data(), payload.size());
  }
}

// A posted receive. Until it is done, its PendingRecv is either in the matcher's pending_ (not yet
// matched) or claimed by a delivery that is writing into its buffer; it must stay alive until
// neither is the case, which the destructor ensures.
class ReceiveMatcher::Posted final : public PostedRecv {
 public:
  Posted(ReceiveMatcher* matcher, std::string peer, const Tag& tag, ByteSpan data, size_t length,
         absl::Time deadline)
      : matcher_(matcher), key_{std::move(peer), tag} {
    recv_.comm = tag.comm;
    recv_.data = data;
    recv_.length = length;
    recv_.deadline = deadline;
  }
  ~Posted() override {
    absl::MutexLock lock(&matcher_->mu_);
    if (recv_.done) return;
    if (!recv_.claimed) {
      matcher_->pending_.erase(key_);
      return;
    }
    recv_.cancelled.store(true, std::memory_order_release);
    matcher_->mu_.Await(absl::Condition(&recv_.done));
  }

  absl::Status Wait() override {
    absl::MutexLock lock(&matcher_->mu_);
    if (!matcher_->mu_.AwaitWithDeadline(absl::Condition(&recv_.done), recv_.deadline) &&
        !recv_.claimed) {
      matcher_->pending_.erase(key_);
      matcher_->CompleteLocked(&recv_, RecvDeadlineExceeded(key_.peer, key_.tag));
    }
    // Claimed: the writer finishes by recv_.deadline (or when cancelled), so this wait is bounded
    // even though it has no deadline of its own; the buffer must not be released before then.
    matcher_->mu_.Await(absl::Condition(&recv_.done));
    return recv_.result;
  }

  bool Test() override {
    absl::MutexLock lock(&matcher_->mu_);
    return recv_.done;
  }

 private:
  friend class ReceiveMatcher;
  ReceiveMatcher* const matcher_;
  const Key key_;
  PendingRecv recv_;
};

std::unique_ptr<PostedRecv> ReceiveMatcher::Post(const std::string& peer, const Tag& tag,
                                                 ByteSpan data, absl::Time deadline,
                                                 Endpoint::ArrivalCallback on_arrival) {
  return PostImpl(peer, tag, data, data.size(), deadline, nullptr, std::move(on_arrival));
}

std::unique_ptr<PostedRecv> ReceiveMatcher::PostConsume(const std::string& peer, const Tag& tag,
                                                        size_t length, absl::Time deadline,
                                                        Endpoint::PieceConsumer consume,
                                                        Endpoint::ArrivalCallback on_arrival) {
  return PostImpl(peer, tag, ByteSpan(), length, deadline, std::move(consume),
                  std::move(on_arrival));
}

void ReceiveMatcher::Fill(PendingRecv& recv, const std::byte* data, uint64_t length) {
  if (length == 0) return;
  if (recv.consume != nullptr) {
    recv.consume(0, ConstByteSpan(data, length));
  } else {
    std::memcpy(recv.data.data(), data, length);
  }
}

std::unique_ptr<PostedRecv> ReceiveMatcher::PostImpl(const std::string& peer, const Tag& tag,
                                                     ByteSpan data, size_t length,
                                                     absl::Time deadline,
                                                     Endpoint::PieceConsumer consume,
                                                     Endpoint::ArrivalCallback on_arrival) {
  auto posted = std::make_unique<Posted>(this, peer, tag, data, length, deadline);
  PendingRecv& recv = posted->recv_;
  recv.consume = std::move(consume);
  recv.on_arrival = std::move(on_arrival);
  Unexpected message;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status error = BlockingErrorLocked(tag.comm); !error.ok()) {
      CompleteLocked(&recv, std::move(error));
      return posted;
    }
    auto it = unexpected_.find(posted->key_);
    if (it == unexpected_.end()) {
      // Messages that arrived before the link was lost are still receivable, hence this order.
      auto lost = lost_.find(peer);
      auto restricted = restricted_after_.find(tag.comm);
      if (lost != lost_.end() &&
          (restricted == restricted_after_.end() || restricted->second < lost->second.loss)) {
        CompleteLocked(&recv, lost->second.status);
      } else if (pending_.contains(posted->key_)) {
        CompleteLocked(&recv, absl::FailedPreconditionError(
                                  absl::StrCat("a receive from peer ", peer, " (", TagToString(tag),
                                               ") is already pending")));
      } else {
        pending_.emplace(posted->key_, &recv);
        if (credits_ != nullptr) credits_->Posted(peer, tag, length);
      }
      return posted;
    }
    message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) unexpected_.erase(it);
    ReleaseLocked(peer, message.charge);
  }
  // Not shared with anyone yet: completed without the lock.
  recv.done = true;
  if (!message.error.ok()) {
    recv.result = std::move(message.error);
    return posted;
  }
  if (message.length != length) {
    recv.result = LengthMismatch(peer, tag, message.length, length);
    return posted;
  }
  Fill(recv, message.data.get(), message.length);
  if (recv.on_arrival) std::move(recv.on_arrival)();
  return posted;
}

ReceiveMatcher::Delivery ReceiveMatcher::BeginDelivery(const std::string& peer, const Tag& tag,
                                                       uint64_t length) {
  {
    absl::MutexLock lock(&mu_);
    Key key{peer, tag};
    // The sender took an eager message's charge whatever becomes of it here, so it is charged
    // (and released once delivered or dropped) on every path but refusal.
    uint64_t charge = 0;
    const bool eager = credits_ == nullptr || credits_->Eager(length);
    if (credits_ != nullptr && eager) {
      if (!credits_->Charge(peer, length)) {
        Delivery refused(Delivery::Kind::kDiscard, peer, tag, length);
        refused.violation_ = true;
        return refused;
      }
      charge = CreditCharge(length);
    }
    auto discard = [&] {
      Delivery delivery(Delivery::Kind::kDiscard, peer, tag, length);
      delivery.charge_ = charge;
      return delivery;
    };
    if (!BlockingErrorLocked(tag.comm).ok()) return discard();
    if (RefusedLocked(peer, tag.comm)) {
      // An authenticated daemon, but not one of the communicator's: a daemon that outlived its
      // plan, or one that means harm. Its bytes are read and dropped, its link stays up.
      refused_log_.Log(spdlog::level::warn,
                       "refused messages of communicator {:x} from {}, which is not in its plan "
                       "({} refused from it so far)",
                       tag.comm, peer, ++refused_[peer]);
      return discard();
    }
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      PendingRecv* recv = it->second;
      pending_.erase(it);
      if (recv->length != length) {
        CompleteLocked(recv, LengthMismatch(peer, tag, length, recv->length));
        return discard();
      }
      recv->claimed = true;
      claimed_.insert(recv);
      Delivery delivery(Delivery::Kind::kPosted, peer, tag, length);
      delivery.recv_ = recv;
      delivery.buffer_ = recv->data;
      delivery.charge_ = charge;
      return delivery;
    }
    // A rendezvous message is sent only once its receive is posted: with none posted now, its
    // receive was withdrawn after it asked for the message (or the sender breaks the protocol,
    // which costs nothing here). Never kept: it holds no credit.
    if (!eager) return discard();
  }
  // Allocated outside the lock: it may be large, and is filled before anyone reads it.
  Delivery delivery(Delivery::Kind::kUnexpected, peer, tag, length);
  delivery.charge_ = credits_ == nullptr ? 0 : CreditCharge(length);
  if (length > 0) delivery.storage_ = std::make_unique_for_overwrite<std::byte[]>(length);
  delivery.buffer_ = ByteSpan(delivery.storage_.get(), length);
  return delivery;
}

void ReceiveMatcher::FinishDelivery(Delivery delivery, const absl::Status& status) {
  const std::string& peer = delivery.peer_;
  const Tag& tag = delivery.tag_;
  PendingRecv* target = nullptr;
  switch (delivery.kind_) {
    case Delivery::Kind::kDiscard: {
      absl::MutexLock lock(&mu_);
      if (status.ok() && !delivery.violation_) CountLocked(peer, delivery.length_);
      ReleaseLocked(peer, delivery.charge_);
      return;
    }
    case Delivery::Kind::kPosted: {
      // Claimed, so the receiver cannot return yet; its callback runs before it may.
      if (status.ok() && delivery.recv_->on_arrival) std::move(delivery.recv_->on_arrival)();
      absl::MutexLock lock(&mu_);
      if (status.ok()) CountLocked(peer, delivery.length_);
      ReleaseLocked(peer, delivery.charge_);
      claimed_.erase(delivery.recv_);
      absl::Status blocking = BlockingErrorLocked(tag.comm);
      CompleteLocked(delivery.recv_, blocking.ok() ? status : blocking);
      return;
    }
    case Delivery::Kind::kUnexpected: {
      absl::MutexLock lock(&mu_);
      // From here on the message is either kept (and keeps its credit) or not.
      const uint64_t charge = delivery.charge_;
      // A partial message is of no use to anyone; a corrupt one is kept as its error alone.
      const bool corrupt = absl::IsDataLoss(status);
      Key key{peer, tag};
      // A receive may have been posted while the payload was being read.
      auto it = pending_.find(key);
      const bool keep = status.ok() && it == pending_.end() && BlockingErrorLocked(tag.comm).ok() &&
                        !RefusedLocked(peer, tag.comm);
      if (!keep) ReleaseLocked(peer, charge);
      if (!status.ok() && !corrupt) return;
      if (!corrupt) CountLocked(peer, delivery.length_);
      if (!BlockingErrorLocked(tag.comm).ok()) return;
      if (RefusedLocked(peer, tag.comm)) {  // restricted while it was being read
        ++refused_[peer];
        return;
      }
      if (corrupt) {
        // Kept only for a communicator formed here (restricted to its plan, whose members this
        // sender is): it costs no allowance, so nobody else may leave such entries behind.
        if (it == pending_.end() && !members_.contains(tag.comm)) return;
        if (it == pending_.end()) {
          unexpected_[std::move(key)].push_back(Unexpected{nullptr, 0, status});
        } else {
          CompleteLocked(it->second, status);
          pending_.erase(it);
        }
        return;
      }
      if (it == pending_.end()) {
        unexpected_[std::move(key)].push_back(
            Unexpected{std::move(delivery.storage_), delivery.length_, absl::OkStatus(), charge});
        return;
      }
      target = it->second;
      pending_.erase(it);
      if (target->length != delivery.length_) {
        CompleteLocked(target, LengthMismatch(peer, tag, delivery.length_, target->length));
        return;
      }
      target->claimed = true;
      claimed_.insert(target);
      break;
    }
  }
  // Copy outside the lock; the claim keeps the receive (and its buffer) alive meanwhile.
  Fill(*target, delivery.storage_.get(), delivery.length_);
  if (target->on_arrival) std::move(target->on_arrival)();
  absl::MutexLock lock(&mu_);
  claimed_.erase(target);
  CompleteLocked(target, BlockingErrorLocked(tag.comm));
}

void ReceiveMatcher::Abort(uint64_t comm, const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  const absl::Status& stored = aborted_[comm] = NotOk(reason, "communicator aborted");
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->first.tag.comm == comm) {
      CompleteLocked(it->second, stored);
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  for (PendingRecv* recv : claimed_) {
    if (recv->comm == comm) recv->cancelled.store(true, std::memory_order_release);
  }
  DropUnexpectedLocked(comm);
}

void ReceiveMatcher::Forget(uint64_t comm) {
  absl::MutexLock lock(&mu_);
  aborted_.erase(comm);
  members_.erase(comm);
  restricted_after_.erase(comm);
  DropUnexpectedLocked(comm);
}

void ReceiveMatcher::Restrict(uint64_t comm, std::span<const std::string> peers) {
  absl::MutexLock lock(&mu_);
  members_[comm] = absl::flat_hash_set<std::string>(peers.begin(), peers.end());
  restricted_after_[comm] = losses_;
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (it->first.tag.comm == comm && RefusedLocked(it->first.peer, comm)) {
      for (const Unexpected& message : it->second) ReleaseLocked(it->first.peer, message.charge);
      refused_[it->first.peer] += it->second.size();
      unexpected_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool ReceiveMatcher::RefusedLocked(const std::string& peer, uint64_t comm) const {
  auto it = members_.find(comm);
  return it != members_.end() && !it->second.contains(peer);
}

void ReceiveMatcher::DropUnexpectedLocked(uint64_t comm) {
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (it->first.tag.comm == comm) {
      for (const Unexpected& message : it->second) ReleaseLocked(it->first.peer, message.charge);
      unexpected_.erase(it++);
    } else {
      ++it;
    }
  }
}

void ReceiveMatcher::ReleaseLocked(const std::string& peer, uint64_t charge) {
  if (credits_ != nullptr && charge > 0) credits_->Release(peer, charge);
}

absl::Status ReceiveMatcher::AbortReason(uint64_t comm) const {
  absl::MutexLock lock(&mu_);
  auto it = aborted_.find(comm);
  return it == aborted_.end() ? absl::OkStatus() : it->second;
}

void ReceiveMatcher::PeerConnected(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  lost_.erase(peer);
  LinkStats& link = links_[peer];
  link.peer = peer;
  link.up = true;
}

void ReceiveMatcher::PeerLost(const std::string& peer, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  Lost& lost = lost_[peer];
  // Data lost from the peer explains every later failure until it connects again; the
  // connections that close after it must not hide it.
  if (!absl::IsDataLoss(lost.status)) lost.status = NotOk(status, "lost connection to peer");
  lost.loss = ++losses_;
  const absl::Status& stored = lost.status;
  if (auto link = links_.find(peer); link != links_.end()) link->second.up = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->first.peer == peer) {
      CompleteLocked(it->second, stored);
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
}

void ReceiveMatcher::Shutdown(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = NotOk(status, "endpoint shut down");
  for (auto& [key, recv] : pending_) CompleteLocked(recv, closed_);
  pending_.clear();
  for (PendingRecv* recv : claimed_) recv->cancelled.store(true, std::memory_order_release);
  unexpected_.clear();
}

absl::flat_hash_map<std::string, LinkStats> ReceiveMatcher::RecvLinkStats() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, LinkStats> links = links_;
  for (const auto& [peer, count] : refused_) links[peer].peer = peer;
  absl::flat_hash_map<std::string, uint64_t> violations;
  if (credits_ != nullptr) violations = credits_->Violations();
  for (const auto& [peer, count] : violations) links[peer].peer = peer;
  for (auto& [peer, link] : links) {
    auto it = refused_.find(peer);
    link.counters.push_back(
        LinkCounter{std::string(kRefusedMessagesCounter), it == refused_.end() ? 0 : it->second});
    if (credits_ == nullptr) continue;
    auto violated = violations.find(peer);
    link.counters.push_back(LinkCounter{std::string(kCreditViolationsCounter),
                                        violated == violations.end() ? 0 : violated->second});
  }
  return links;
}

void ReceiveMatcher::CompleteLocked(PendingRecv* recv, absl::Status result) {
  recv->result = std::move(result);
  recv->done = true;  // from here on the receiving thread may return and free `recv`
}

absl::Status ReceiveMatcher::BlockingErrorLocked(uint64_t comm) const {
  if (!closed_.ok()) return closed_;
  if (auto it = aborted_.find(comm); it != aborted_.end()) return it->second;
  return absl::OkStatus();
}

void ReceiveMatcher::CountLocked(const std::string& peer, uint64_t length) {
  LinkStats& link = links_[peer];
  link.peer = peer;
  link.rx_bytes += length + message_overhead_bytes_;
  ++link.rx_messages;
}

}  // namespace baton::transport
