#pragma once

// Send and Recv between two ranks of a communicator, as one daemon runs them for its local ranks.
// The daemon owns one PointToPoint per communicator and calls it from the threads that serve its
// ranks' calls; the peer rank may be on this daemon or on another one.
//
// Matching: the k-th Send from rank s to rank d meets the k-th Recv of d from s, whatever their
// sizes (0 bytes included) and however many of the pair's messages are outstanding. Each rank's
// calls reach the daemon one at a time (the client serialises them); different ranks call at once.
//
// Eager: Send returns once its bytes are handed over, never waiting for the matching Recv, so a
// ring in which every rank sends before it receives cannot deadlock:
// - to a rank on this daemon, the bytes are copied straight into the receiver's buffer when its
//   Recv is already waiting, else into a buffer of the daemon's, queued for the pair;
// - to a rank on another daemon, they go to the transport (see the wire format below), which
//   keeps them until the receive is posted.
// Memory is therefore not bounded by this class: a sender that runs ahead of its receiver makes the
// daemon (or the receiving daemon's transport) hold every message it is ahead by, as MPI's eager
// protocol does. Across daemons the transport's own backlog bound applies (the TCP transport
// stops reading a peer beyond it, which holds the sender back: with that much outstanding, a Send
// may wait for the receiver after all, until its deadline).
//
// Wire format across daemons: message k of the pair (s, d) is sent as transport messages tagged
// {comm, seq = 2^63 | s << 32 | d, step = k mod 2^32, part}: part 0 is a 16-byte header (the
// message's length and the sender's chunk size, little-endian 64-bit each) and parts 1..n are the
// payload in pieces of at most chunk_bytes (a 0-byte message is the header alone). The top bit of
// seq keeps these tags apart from every collective's. The receiver posts the pieces it expects
// before the header arrives, so that the payload lands in its buffer without an extra copy.
//
// Failures: every call ends by its deadline or at Abort, with an error naming both ranks.
// - A Recv whose buffer's length differs from the Send's fails with FailedPrecondition naming
//   both ranks and both lengths (in elements, given the element size); the message is consumed
//   and dropped, so the pair's next message is received intact. The buffer's contents are
//   unspecified after any failed Recv. The Send fails with the same error when it finds its
//   Recv waiting on this daemon; otherwise it has returned OK already (it is eager: across
//   daemons, or before the Recv came, it cannot know), and only the receiving side learns of the
//   mismatch here. The daemon then aborts the communicator with it, which fails the sender's
//   pending operations and the later ones (daemon/communicator.h).
// - A Recv that fails otherwise (deadline, Abort, lost peer) still counts as the pair's k-th
//   receive: message k is dropped whenever it comes (across daemons, its pieces stay with the
//   transport until the communicator is forgotten). A communicator is aborted after such a
//   failure anyway; this only keeps the numbering defined.
// - A Send that fails (deadline, Abort, lost peer) leaves the pair's later messages undefined.
// - A rank that leaves the communicator (destroys its handle) has sent each rank some number of
//   messages (SentBy, on its daemon); once told (SourceLeft, on every daemon), a Recv from it
//   that no message it sent will match fails at once, while those it did send are still received.
//
// Thread-safe.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/layout.h"
#include "transport/transport.h"

namespace baton::collective {

// What a rank that left a communicator had sent: to each rank it sent to, how many messages.
struct Departure {
  int rank = -1;
  std::vector<std::pair<int, uint64_t>> sent;  // (destination rank, messages), in rank order
};

class PointToPoint {
 public:
  // `endpoint` (not owned, must outlive this) reaches the other daemons of `layout`, which says
  // which daemon hosts which rank and which daemon this is; `comm` is the communicator's tag.
  // Messages to other daemons go in pieces of at most `chunk_bytes` (at least 1) bytes; every
  // daemon of the communicator should use the same value.
  PointToPoint(transport::Endpoint* endpoint, uint64_t comm, Layout layout, size_t chunk_bytes);
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;
  // No call may be running.
  ~PointToPoint();

  // Local rank `src` sends `data` to rank `dst` (any rank of the communicator, `src` included).
  // Returns once the bytes are handed over (to the transport, or copied for a local receiver).
  // Errors: InvalidArgument when `src` is not a rank of this daemon or `dst` is out of range; the
  // abort reason after Abort; the transport's error (Unavailable for a lost peer,
  // DeadlineExceeded) annotated with both ranks; FailedPrecondition naming both lengths when the
  // matching Recv is waiting on this daemon with another length (see the top of the file).
  // `element_bytes`: the size of the caller's elements, for the lengths in that message.
  // `region` (may be null): the data plane's registration of the memory `data` lies in, which
  // the transport is given with it (collective/registered_memory.h).
  absl::Status Send(int src, int dst, transport::ConstByteSpan data, absl::Time deadline,
                    size_t element_bytes = 1, const transport::MemoryRegion* region = nullptr);

  // Local rank `dst` receives the pair's next message from rank `src` into `data`, which must be
  // exactly as long as the message. Errors: InvalidArgument when `dst` is not a rank of this
  // daemon or `src` is out of range; FailedPrecondition when the lengths differ (both named, in
  // elements of `element_bytes`; the message is dropped) or the daemons cut it into different
  // pieces; DeadlineExceeded naming both ranks at `deadline`; the abort reason at Abort (a
  // waiting Recv returns at once); Unavailable when `src`'s daemon is lost. See the top of the
  // file for what a failure leaves behind.
  absl::Status Recv(int src, int dst, transport::ByteSpan data, absl::Time deadline,
                    size_t element_bytes = 1, const transport::MemoryRegion* region = nullptr);

  // Fails pending and future Sends and Recvs with `reason` (an OK one is replaced by Cancelled) at
  // once, and drops the messages queued for local receivers. The first reason stays. The
  // transport is not aborted here: the caller aborts its communicator there separately (a Send
  // blocked in the transport ends then). Waiting Recvs return without it.
  void Abort(const absl::Status& reason);

  // The messages local rank `src` has sent (begun to send) to each rank so far.
  Departure SentBy(int src) const;
  // Rank `departure.rank` has left: every Recv from it of a message it did not send (pending or
  // later) fails at once with FailedPrecondition naming both ranks, the count, and `reason`.
  // Ignored for a rank out of range; entries for ranks out of range are ignored.
  void SourceLeft(const Departure& departure, const absl::Status& reason);

  // How many Recvs of local rank `dst` wait now for a message from local rank `src` on this
  // daemon (tests and diagnostics: at most one while the client serialises each rank's calls).
  size_t WaitingLocalRecvs(int src, int dst) const;

 private:
  // A local Recv waiting for its message; lives on the receiver's stack.
  struct LocalWaiter {
    transport::ByteSpan data;
    bool claimed = false;  // a Send is copying into `data`; only it may complete this
    bool done = false;
    absl::Status result;
  };
  // One ordered pair (src, dst) as this daemon sees it.
  struct Pair {
    uint64_t sent = 0;      // Sends begun (src local)
    uint64_t received = 0;  // Recvs begun (dst local)
    // Both local: messages sent before their Recv began, numbered [received, sent) in order.
    std::deque<std::vector<std::byte>> queued;
    // Both local: waiting Recvs by message number (one at a time while the client serialises).
    absl::flat_hash_map<uint64_t, LocalWaiter*> waiting;
  };
  struct RemoteReceive;
  // A rank that left: how many messages it sent to each rank, and why it left.
  struct Left {
    absl::flat_hash_map<int, uint64_t> sent;
    absl::Status reason;
  };
  // The error of a Recv of message `number` from `src` to `dst` when `src` left without sending
  // it, else OK.
  absl::Status NeverSentLocked(int src, int dst, uint64_t number) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // InvalidArgument unless `rank` is a rank of the communicator (and, when `local`, of this
  // daemon); `role` names it in the message ("sender", "receiver").
  absl::Status CheckRank(const char* role, int rank, bool local) const;
  bool IsLocal(int rank) const { return daemon_of_[static_cast<size_t>(rank)] == layout_.self; }
  const std::string& AddressOf(int rank) const {
    return layout_.daemons[static_cast<size_t>(daemon_of_[static_cast<size_t>(rank)])].address;
  }

  absl::Status SendLocal(int src, int dst, transport::ConstByteSpan data, size_t element_bytes);
  absl::Status RecvLocal(int src, int dst, transport::ByteSpan data, absl::Time deadline,
                         size_t element_bytes);
  absl::Status SendRemote(int src, int dst, transport::ConstByteSpan data, absl::Time deadline,
                          const transport::MemoryRegion* region);
  absl::Status RecvRemote(int src, int dst, transport::ByteSpan data, absl::Time deadline,
                          size_t element_bytes, const transport::MemoryRegion* region);
  // Posts and takes the parts of message `number` of (src, dst) for RecvRemote. Sets `mismatch`
  // when it fails because the message is not what `data` expects (its length, its pieces).
  absl::Status ReceivePieces(RemoteReceive& receive, int src, int dst, uint64_t number,
                             transport::ByteSpan data, absl::Time deadline, size_t element_bytes,
                             const transport::MemoryRegion* region, bool& mismatch);
  // Waits for part `part` of `receive` (posted as `posted`) and returns its result, or the abort
  // reason once aborted.
  static absl::Status AwaitPiece(RemoteReceive& receive, size_t part, transport::PostedRecv& posted,
                                 absl::Time deadline);
  transport::Tag TagOf(int src, int dst, uint64_t number, uint32_t part) const;

  transport::Endpoint* const endpoint_;
  const uint64_t comm_;
  const Layout layout_;
  const size_t chunk_bytes_;
  std::vector<int> daemon_of_;  // daemon index of every rank, -1 where none hosts it

  mutable absl::Mutex mu_;
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  // Keyed by (src, dst); node-based, so a Pair stays put while its lock is released.
  absl::node_hash_map<std::pair<int, int>, Pair> pairs_ ABSL_GUARDED_BY(mu_);
  // Remote Recvs in progress, which Abort and SourceLeft wake.
  absl::flat_hash_set<RemoteReceive*> receiving_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, Left> left_ ABSL_GUARDED_BY(mu_);  // by rank
};

}  // namespace baton::collective
