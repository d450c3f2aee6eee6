#pragma once

// The receive side that every transport shares: it matches incoming messages to posted receives by
// (sender address, tag), keeps the messages nobody has asked for yet, and applies Abort/Forget,
// lost peers and shutdown exactly as transport.h specifies, so all transports behave alike.
//
// A transport calls Recv() from Endpoint::Recv, and for each incoming message BeginDelivery() ->
// write the payload into Delivery::buffer() (or hand it to Delivery::Consume, when consuming()) ->
// FinishDelivery(). When a matching receive is already posted, buffer() is the receiver's own
// buffer, so a stream transport can read the payload from its socket straight into it (no extra
// copy); otherwise it is a fresh buffer that becomes an unexpected message.
//
// Flow control (transport/flow_control.h): given the endpoint's ReceiveCredits, the matcher
// charges every eager message as it begins, returns the charge once the message is delivered or
// dropped, refuses (as discard(), with violation()) an eager message beyond its sender's credit,
// drops a rendezvous-sized message that finds no receive posted, and asks for a clear-to-send when
// a receive of rendezvous size is posted. It never waits for room: what a peer may have kept here
// is bounded by the credit it was granted, so a transport reads every message as it comes.
//
// Thread-safe. Receive-side link counters (rx bytes and messages, link up) are kept here too, so
// that a completed Recv is always already reflected in them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_limiter.h"
#include "transport/flow_control.h"
#include "transport/transport.h"

namespace baton::transport {

// The LinkStats counter of the messages dropped because their sender is not a member of their
// communicator (Endpoint::Restrict).
inline constexpr std::string_view kRefusedMessagesCounter = "refused_messages";

// The error of a receive whose deadline passed: DeadlineExceeded naming the peer and the tag.
absl::Status RecvDeadlineExceeded(const std::string& peer, const Tag& tag);

class ReceiveMatcher {
 private:
  struct PendingRecv;

 public:
  // One incoming message between BeginDelivery and FinishDelivery. Move-only.
  class Delivery {
   public:
    Delivery(Delivery&&) = default;
    Delivery& operator=(Delivery&&) = default;

    // True when nobody wants the payload (its communicator is aborted, the posted receive had the
    // wrong length, the matcher is shut down, it is of rendezvous size and no receive is posted
    // for it, or it is refused): the transport must consume and drop it.
    bool discard() const { return kind_ == Kind::kDiscard; }
    // True when the message is refused because its sender had too little credit for it (counted
    // in kCreditViolationsCounter): the sender breaks the protocol, and what it sends next may
    // be lost too. The transport drops it and fails the link's receives (TCP: DataLoss naming
    // the peer, and it closes the peer's connections).
    bool violation() const { return violation_; }
    // Where the payload goes; exactly as long as the message unless discard() or consuming().
    ByteSpan buffer() const { return buffer_; }
    // True when the posted receive consumes the message (Endpoint::PostConsume): the payload goes
    // to Consume, in order, instead of into buffer() (which is empty).
    bool consuming() const { return kind_ == Kind::kPosted && recv_->consume != nullptr; }
    // Hands the next piece of the payload, at `offset`, to the receive's consumer. Every piece but
    // the last must be a multiple of Endpoint::kPieceAlignment bytes.
    void Consume(size_t offset, ConstByteSpan piece) const { recv_->consume(offset, piece); }
    // Writes the whole payload at once, for a transport that holds it in memory: into buffer(),
    // or to the consumer when consuming(); nothing when discard().
    void Write(ConstByteSpan payload) const;
    // How long the receiver waits: writing into a posted receive's buffer must stop by then
    // (finish with RecvDeadlineExceeded). InfiniteFuture for an unexpected message.
    absl::Time deadline() const;
    // True once the posted receive was aborted or the matcher shut down: the transport may stop
    // writing into buffer(), drop the rest of the payload and finish with any error.
    bool cancelled() const;

   private:
    friend class ReceiveMatcher;
    enum class Kind { kDiscard, kPosted, kUnexpected };
    Delivery(Kind kind, std::string peer, const Tag& tag, uint64_t length)
        : kind_(kind), peer_(std::move(peer)), tag_(tag), length_(length) {}

    Kind kind_;
    std::string peer_;
    Tag tag_;
    uint64_t length_;
    PendingRecv* recv_ = nullptr;           // kPosted
    std::unique_ptr<std::byte[]> storage_;  // kUnexpected
    ByteSpan buffer_;
    uint64_t charge_ = 0;  // the credit charged for it, returned once it is delivered or dropped
    bool violation_ = false;
  };

  // `message_overhead_bytes` is what the transport adds to every message on its link (TCP: its
  // frame header), counted in rx_bytes with each message's payload; 0 for none (in memory).
  // `credits` (not owned; may be null: no flow control, and no bound on what is kept unexpected)
  // is the endpoint's receive side of flow control, which the matcher charges and releases.
  explicit ReceiveMatcher(uint64_t message_overhead_bytes = 0, ReceiveCredits* credits = nullptr)
      : message_overhead_bytes_(message_overhead_bytes), credits_(credits) {}
  ReceiveMatcher(const ReceiveMatcher&) = delete;
  ReceiveMatcher& operator=(const ReceiveMatcher&) = delete;
  // No Recv may be running and no Delivery outstanding.
  ~ReceiveMatcher() = default;

  // Endpoint::PostRecv: posts a receive of the message tagged `tag` from `peer` into `data`. Its
  // Wait() fails with FailedPrecondition when the lengths differ or another receive for the same
  // peer and tag is pending, with the abort reason, the peer's lost status (see PeerLost), the
  // shutdown status, or RecvDeadlineExceeded at `deadline`. While the payload is being written
  // into `data` the deadline is the writer's to enforce (see Delivery::deadline), so neither Wait
  // nor the destructor returns while `data` is still being written. A message already kept
  // unexpected is copied into `data` before this returns. A receive of rendezvous size that goes
  // pending asks for its message (ReceiveCredits::Posted).
  // `on_arrival` as for Endpoint::PostRecv: the thread that completes the write (Post itself,
  // or the transport in FinishDelivery) runs it before completing the receive.
  std::unique_ptr<PostedRecv> Post(const std::string& peer, const Tag& tag, ByteSpan data,
                                   absl::Time deadline,
                                   Endpoint::ArrivalCallback on_arrival = nullptr);
  // Endpoint::PostConsume: as Post, for a message of `length` bytes handed to `consume` instead of
  // written into a buffer (by the transport, or whole by this call or FinishDelivery when it was
  // kept unexpected).
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, Endpoint::PieceConsumer consume,
                                          Endpoint::ArrivalCallback on_arrival = nullptr);
  // Endpoint::Recv: Post(...)->Wait().
  absl::Status Recv(const std::string& peer, const Tag& tag, ByteSpan data, absl::Time deadline) {
    return Post(peer, tag, data, deadline)->Wait();
  }

  // Starts delivering a message of `length` payload bytes from `peer`; never waits. Every
  // Delivery must be passed to FinishDelivery exactly once.
  Delivery BeginDelivery(const std::string& peer, const Tag& tag, uint64_t length);
  // Completes a delivery. `status` is OK when the whole payload was written to buffer() (or
  // consumed, for discard()); otherwise the posted receive fails with `status` and an unexpected
  // message is dropped. DataLoss means that the message arrived whole but corrupt (its checksum
  // did not match): then the receive for it fails with `status` whether it is posted now or later,
  // so that it does not wait for a message that will never come. Counts the message in the peer's
  // rx counters (length + the message overhead given to the constructor) when `status` is OK.
  void FinishDelivery(Delivery delivery, const absl::Status& status);

  // Endpoint::Abort and Endpoint::Forget. Abort also cancels deliveries into posted receives.
  void Abort(uint64_t comm, const absl::Status& reason);
  void Forget(uint64_t comm);
  // Endpoint::Restrict: from now on until Forget(comm), a message of `comm` from a peer not in
  // `peers` is delivered as discard() (and counted in that peer's kRefusedMessagesCounter), and
  // the unexpected messages of `comm` already kept from such peers are dropped.
  void Restrict(uint64_t comm, std::span<const std::string> peers);
  // The abort reason of `comm`, OK when it is not aborted (for the send side of a transport).
  absl::Status AbortReason(uint64_t comm) const;

  // `peer` has (re)connected: clears its lost status and marks its link up.
  void PeerConnected(const std::string& peer);
  // `peer`'s link is gone: its pending receives that are not being written fail with `status`
  // (Unavailable naming the peer; DataLoss when what it sent was altered or lost on the way) and
  // so do later receives from it, until PeerConnected(peer), except those of a communicator
  // restricted (Restrict) after the loss: its plan, made since, holds the peer as it is now (say
  // a daemon that restarted at the same address), and such a receive waits for the peer to
  // connect, until its deadline. A DataLoss status is kept until the peer connects again: a later
  // PeerLost does not replace it. Messages already delivered from it stay receivable.
  void PeerLost(const std::string& peer, const absl::Status& status);

  // Fails every pending and later Recv with `status` and drops unexpected messages.
  void Shutdown(const absl::Status& status);

  // Receive-side counters per peer: peer, rx_bytes, rx_messages and up are filled in, and the
  // counters kRefusedMessagesCounter and (with credits) kCreditViolationsCounter.
  absl::flat_hash_map<std::string, LinkStats> RecvLinkStats() const;

 private:
  class Posted;
  struct PendingRecv {
    uint64_t comm = 0;
    ByteSpan data;                    // empty when consumed
    size_t length = 0;                // the message's expected length
    Endpoint::PieceConsumer consume;  // PostConsume's; null for a receive into `data`
    absl::Time deadline;
    bool claimed = false;  // a Delivery is writing into `data`; only it may complete this receive
    bool done = false;
    absl::Status result;
    std::atomic<bool> cancelled{false};
    // Run by whoever writes the message, after writing it and before completing the receive;
    // only the claimant (or Post) touches it.
    Endpoint::ArrivalCallback on_arrival;
  };
  struct Key {
    std::string peer;
    Tag tag;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.peer, k.tag);
    }
  };
  struct Unexpected {
    std::unique_ptr<std::byte[]> data;
    uint64_t length = 0;
    // Not OK for a message that arrived corrupt (FinishDelivery with DataLoss): its receive fails
    // with this. Such an entry holds no data and no credit (length 0).
    absl::Status error;
    uint64_t charge = 0;  // the credit it holds
  };

  std::unique_ptr<PostedRecv> PostImpl(const std::string& peer, const Tag& tag, ByteSpan data,
                                       size_t length, absl::Time deadline,
                                       Endpoint::PieceConsumer consume,
                                       Endpoint::ArrivalCallback on_arrival);
  // Writes a whole message kept unexpected into `recv`'s buffer, or hands it to its consumer.
  static void Fill(PendingRecv& recv, const std::byte* data, uint64_t length);
  void CompleteLocked(PendingRecv* recv, absl::Status result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error that prevents receiving on `comm` now (shut down or aborted), or OK.
  absl::Status BlockingErrorLocked(uint64_t comm) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CountLocked(const std::string& peer, uint64_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns `charge` to `peer`'s credit.
  void ReleaseLocked(const std::string& peer, uint64_t charge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the unexpected messages of `comm`, releasing their credit.
  void DropUnexpectedLocked(uint64_t comm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when Restrict(comm, ...) did not name `peer`: its messages of `comm` are refused.
  bool RefusedLocked(const std::string& peer, uint64_t comm) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const uint64_t message_overhead_bytes_;
  ReceiveCredits* const credits_;
  mutable absl::Mutex mu_;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Status> aborted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, PendingRecv*> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<PendingRecv*> claimed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::deque<Unexpected>> unexpected_ ABSL_GUARDED_BY(mu_);
  // Per lost peer: why, and which loss it was (the losses_ count then).
  struct Lost {
    absl::Status status;
    uint64_t loss = 0;
  };
  absl::flat_hash_map<std::string, Lost> lost_ ABSL_GUARDED_BY(mu_);
  uint64_t losses_ ABSL_GUARDED_BY(mu_) = 0;  // PeerLost calls so far
  // Per restricted communicator: losses_ when it was restricted (losses it is formed after).
  absl::flat_hash_map<uint64_t, uint64_t> restricted_after_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, LinkStats> links_ ABSL_GUARDED_BY(mu_);
  // Per restricted communicator: the peers whose messages of it are accepted.
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<std::string>> members_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> refused_ ABSL_GUARDED_BY(mu_);  // per peer
  // Refused messages come from an authenticated daemon, but as fast as it likes.
  LogLimiter refused_log_{5, absl::Minutes(1)};
};

}  // namespace baton::transport
