#pragma once

// Receiver-driven flow control, shared by every transport: no transport needs to stop reading to
// hold a sender back (an RDMA NIC cannot), and a receiver's memory for messages nobody has asked
// for yet stays bounded per peer.
//
// Per link (sender -> receiver) the receiver grants the sender a window of credit. A message is
// either
//   eager:      CreditCharge(length) <= eager_max. The sender takes its charge from the credit it
//               was granted before it sends, waiting while it has too little; the receiver keeps
//               the message unexpected if no receive is posted for it, and returns its charge once
//               it is consumed (delivered to a receive, or dropped by Abort, Forget or Restrict).
//               A message that lands in a receive already posted is charged and returned at once:
//               its sender could not know. Returns are batched (a grant once enough is owed), so
//               that they cost no frame per message.
//   rendezvous: larger. The receiver, when a receive of that length from that peer is posted,
//               sends a clear-to-send (tag, length), and the sender waits for it before it sends;
//               such a message costs no credit and is never kept unexpected (with no receive
//               posted when it arrives, it is dropped). Both ends know which messages are which:
//               both know the length, and the grant carries eager_max.
//
// Grants are cumulative: a grant says how much the sender may have sent in all in the link's
// current epoch (a session of the link at the receiver: a transport starts one when it links the
// peer and ends it when it no longer has any link to it), so grants are idempotent and may arrive
// in any order. A sender that sends beyond its grant is violating the protocol: its message is
// refused (Charge is false) and counted (kCreditViolationsCounter).
//
// Why two peers that send large messages to each other never deadlock on credit:
//   1. Nobody stops reading: a transport reads every message as it comes (into a posted receive,
//      into a new unexpected message, or drops it), so credit and clear-to-send messages are
//      always read, and a write always completes.
//   2. A clear-to-send is sent by the receiving endpoint when the receive is posted, not by the
//      receiving algorithm, which may be blocked in a send of its own meanwhile. So an exchange
//      (both post their receive, then both send) or a ring (post from prev, send to next) that
//      posts before it sends completes at any size.
//   3. An eager message is at most eager_max = window / 4, and the receiver returns credit as soon
//      as more than min(window - eager_max, window / 2) is owed: once every message a sender sent
//      has been consumed, at least eager_max of credit is back with it, so the next eager message
//      never waits on credit that the receiver sits on. A send therefore waits at most until the
//      receiver has taken the messages sent before it (eager) or posted its receive (rendezvous),
//      never for anything later: an algorithm that would complete with synchronous sends (MPI's
//      Ssend) completes here, and the eager window only lets sends run ahead.
// What it does not remove: the messages of all communicators between two endpoints share the
// link's window, so a receiver that leaves one communicator's messages unreceived holds back
// another's eager messages from the same peer until it takes or forgets them.
//
// Both classes are thread-safe and never call out while holding their lock: what a receiver has
// to send is queued (TakeOutgoing) for the transport to carry.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace baton::transport {

// The LinkStats counter of the messages a peer sent beyond the credit it was granted.
inline constexpr std::string_view kCreditViolationsCounter = "credit_violations";

// What a message costs in credit beyond its payload, so that a flood of empty messages (each of
// which the receiver keeps a record of) is bounded too.
inline constexpr uint64_t kCreditPerMessageBytes = 64;
// A message's charge: its length plus kCreditPerMessageBytes (saturating).
constexpr uint64_t CreditCharge(uint64_t length) {
  return length > UINT64_MAX - kCreditPerMessageBytes ? UINT64_MAX
                                                      : length + kCreditPerMessageBytes;
}

// A receiver's grant to one sender.
struct CreditGrant {
  uint64_t epoch = 0;      // the link's session at the receiver; never 0
  uint64_t limit = 0;      // the charges the sender may have sent in this epoch, in all
  uint64_t eager_max = 0;  // the largest charge sent without a clear-to-send
  friend bool operator==(const CreditGrant&, const CreditGrant&) = default;
};

// A clear-to-send: the receive of the message tagged `tag`, `length` bytes long, is posted.
struct ClearToSend {
  Tag tag;
  uint64_t length = 0;
};

// The receiving side of every link of one endpoint.
class ReceiveCredits {
 public:
  // `window`: the credit granted to each peer (0: no flow control: every message is eager and
  // nothing is refused). `total`: what the windows of the peers linked at once may add up to
  // (0: no bound); a peer linked when others hold the total gets less than `window`, but never
  // less than half of it, so that its eager messages always fit (see above).
  ReceiveCredits(uint64_t window, uint64_t total);
  ReceiveCredits(const ReceiveCredits&) = delete;
  ReceiveCredits& operator=(const ReceiveCredits&) = delete;

  // The largest charge sent eagerly; UINT64_MAX without flow control.
  uint64_t eager_max() const { return eager_max_; }
  // Whether a message of `length` bytes is sent eagerly (else by rendezvous).
  bool Eager(uint64_t length) const { return CreditCharge(length) <= eager_max_; }

  // The transport has linked `peer` once more (TCP: a connection with it is established). The
  // first link starts an epoch, whose window is granted less what the peer's earlier messages
  // still hold. Returns the grant to send on the new link before anything else, so that the
  // sender knows which epoch the link belongs to.
  CreditGrant Attach(const std::string& peer);
  // One of `peer`'s links is gone; with the last, its epoch ends (what it sent is still held
  // until taken, and counts against the next epoch's window).
  void Detach(const std::string& peer);
  // The grant to send `peer` now (its epoch and limit so far); nullopt without an epoch.
  std::optional<CreditGrant> Current(const std::string& peer) const;

  // An eager message of `length` bytes from `peer` arrives: charges it and returns true, or
  // returns false, counting a violation, when `peer` has no epoch or too little credit. A charged
  // message must be Released exactly once.
  bool Charge(const std::string& peer, uint64_t length);
  // The charge of a message from `peer` (CreditCharge of its length) is free again: it was
  // delivered or dropped. Queues a grant once enough is owed.
  void Release(const std::string& peer, uint64_t charge);
  // A receive of `length` bytes from `peer` is posted: queues a clear-to-send unless the message
  // is eager (kept until the peer is linked, if it is not).
  void Posted(const std::string& peer, const Tag& tag, uint64_t length);

  // What is to be sent: the peers owed a grant (send them Current()) and the clear-to-sends.
  struct Outgoing {
    std::vector<std::string> grants;
    std::vector<std::pair<std::string, ClearToSend>> clear_to_send;
    bool empty() const { return grants.empty() && clear_to_send.empty(); }
  };
  // Takes what is queued; waits up to `deadline` while nothing is, unless Stop was called.
  Outgoing TakeOutgoing(absl::Time deadline);
  // Wakes TakeOutgoing and makes it return at once from now on.
  void Stop();

  // The messages refused from each peer so far (kCreditViolationsCounter).
  absl::flat_hash_map<std::string, uint64_t> Violations() const;

 private:
  struct Epoch {
    uint64_t id = 0;
    uint64_t window = 0;
    uint64_t limit = 0;     // granted so far, in all
    uint64_t received = 0;  // charged so far, in all
    uint64_t owed = 0;      // released since the last grant
    int links = 0;
  };
  // What a peer owes before it is granted it back.
  uint64_t ReturnThreshold(const Epoch& epoch) const;

  const uint64_t window_;
  const uint64_t total_;
  const uint64_t eager_max_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Epoch> epochs_ ABSL_GUARDED_BY(mu_);  // linked peers
  // Per peer: charges not released yet, whatever the epoch.
  absl::flat_hash_map<std::string, uint64_t> held_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> violations_ ABSL_GUARDED_BY(mu_);
  // Outgoing: peers owed a grant (each once), clear-to-sends in order.
  absl::flat_hash_set<std::string> grants_due_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, ClearToSend>> clear_to_send_ ABSL_GUARDED_BY(mu_);
  // Clear-to-sends for peers not linked yet, queued once they are.
  absl::flat_hash_map<std::string, std::vector<ClearToSend>> parked_ ABSL_GUARDED_BY(mu_);
};

// The sending side of every link of one endpoint: the credit each peer granted, per epoch, and
// the clear-to-sends it sent.
class SendCredits {
 public:
  SendCredits() = default;
  SendCredits(const SendCredits&) = delete;
  SendCredits& operator=(const SendCredits&) = delete;

  // A grant from `peer` (a later one of the same epoch only ever raises the limit).
  void Grant(const std::string& peer, const CreditGrant& grant);
  // A clear-to-send from `peer`. At most kMaxClearToSendPerPeer are kept per peer (an honest
  // receiver posts far fewer receives of rendezvous size at once); more are dropped.
  static constexpr size_t kMaxClearToSendPerPeer = 4096;
  void ClearToSend(const std::string& peer, const ClearToSend& clear);

  // The eager_max of `peer`'s epoch `epoch`, if it has granted one.
  std::optional<uint64_t> EagerMax(const std::string& peer, uint64_t epoch) const;
  // The epoch `peer` granted last, if any (for a transport with one link per peer).
  std::optional<uint64_t> Latest(const std::string& peer) const;

  // Takes `charge` (the CreditCharge of each message, added up) for messages of communicator
  // tag.comm (errors name `tag`) from `peer`'s credit in `epoch`, waiting while there is too
  // little. OK once taken.
  // Sets `*retry` and returns OK without taking anything when the epoch ends meanwhile (Retire):
  // the transport links the peer again and asks anew. Errors: DeadlineExceeded naming the peer
  // and tag, the abort reason (Abort), the shutdown status.
  absl::Status Take(const std::string& peer, uint64_t epoch, const Tag& tag, uint64_t charge,
                    absl::Time deadline, bool* retry);
  // Takes it only if there is enough now.
  bool TryTake(const std::string& peer, uint64_t epoch, uint64_t charge);
  // Gives back a charge taken for messages that never went out.
  void Refund(const std::string& peer, uint64_t epoch, uint64_t charge);
  // Waits for `peer`'s clear-to-send of the message tagged `tag` and takes it (its length,
  // which may differ from the message's: then the receive fails at the receiver). Sets `*retry`
  // as Take. Errors as Take's.
  absl::Status AwaitClearToSend(const std::string& peer, const Tag& tag, absl::Time deadline,
                                bool* retry);

  // `peer`'s epochs are over (the transport has no link to it any more): waiters retry.
  void Retire(const std::string& peer);
  // Take and AwaitClearToSend on `comm` fail with `reason` until Forget(comm), which also drops
  // the clear-to-sends of `comm`.
  void Abort(uint64_t comm, const absl::Status& reason);
  void Forget(uint64_t comm);
  // Everything waiting or to come fails with `status`.
  void Shutdown(const absl::Status& status);

 private:
  struct Epoch {
    uint64_t limit = 0;
    uint64_t sent = 0;
    uint64_t eager_max = 0;
  };
  struct Peer {
    absl::flat_hash_map<uint64_t, Epoch> epochs;
    std::optional<uint64_t> latest;
    uint64_t retired = 0;  // Retire calls so far
    absl::flat_hash_map<Tag, uint64_t> clear_to_send;
  };
  // The error that stops sends of `comm` now, or OK.
  absl::Status BlockingLocked(uint64_t comm) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits until `ready`, the deadline, an abort of tag.comm, shutdown or `peer`'s retirement.
  absl::Status WaitLocked(const std::string& peer, const Tag& tag, absl::Time deadline,
                          absl::string_view waiting_for, bool* retry,
                          absl::FunctionRef<bool()> ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Status> aborted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::transport
