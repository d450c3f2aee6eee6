#pragma once

// The transport interface: how one daemon's data plane exchanges tagged messages with other
// daemons. Algorithms in collective/ see only this header; daemon/ and tests choose the
// implementation (tcp/, inmemory/, later shm/, cuda/, verbs/). Control traffic never goes here.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton::transport {

using ByteSpan = std::span<std::byte>;
using ConstByteSpan = std::span<const std::byte>;

// Identifies one message between two endpoints. A message is matched to a receive by its sender
// and its whole tag; two messages with the same sender and tag must not be in flight at once.
struct Tag {
  uint64_t comm = 0;  // the communicator's 64-bit tag
  uint64_t seq = 0;   // the operation's sequence number within the communicator
  uint32_t step = 0;  // the algorithm's step within the operation
  uint32_t part = 0;  // the chunk within the step

  friend bool operator==(const Tag&, const Tag&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Tag& t) {
    return H::combine(std::move(h), t.comm, t.seq, t.step, t.part);
  }
};

// Renders a tag for error messages: "comm 0123abcd op 7 step 2 part 0".
std::string TagToString(const Tag& tag);

// One message of Endpoint::SendAll.
struct OutMessage {
  Tag tag;
  ConstByteSpan data;
};

// InvalidArgument unless `messages` (to `peer`) all belong to one communicator, as SendAll needs.
absl::Status CheckSendAll(const std::string& peer, std::span<const OutMessage> messages);

// Counters of one link (this endpoint <-> one peer). Bytes include framing.
struct LinkStats {
  std::string peer;  // the peer endpoint's address
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_messages = 0;
  uint64_t rx_messages = 0;
  uint64_t errors = 0;
  uint64_t retransmits = 0;  // segments the kernel retransmitted (TCP); 0 where not applicable
  bool up = false;           // a connection with the peer is currently established
};

// A receive posted with Endpoint::PostRecv; the message is written into its buffer as it arrives,
// while the poster does other work. Not thread-safe: one thread waits for it.
class PostedRecv {
 public:
  PostedRecv() = default;
  PostedRecv(const PostedRecv&) = delete;
  PostedRecv& operator=(const PostedRecv&) = delete;
  // Withdraws the receive unless it has completed. If its message is being written into the
  // buffer at that moment, waits for the writer to stop (it checks for cancellation at least
  // every 20 ms), so the buffer may be reused as soon as this returns.
  virtual ~PostedRecv() = default;

  // Waits until the message has been written into the buffer or the receive has failed, and
  // returns what Endpoint::Recv would. Later calls return the same result.
  virtual absl::Status Wait() = 0;

  // True once Wait would return without blocking (as MPI_Test). Never blocks.
  virtual bool Test() = 0;
  // Waits no longer than the transport would spin for the message before it sleeps (TCP: its
  // receive_spin, while messages have been arriving within it), and returns Test(). A caller that
  // has something to do before it may sleep (PiggybackEndpoint's flush) does it if this is false.
  virtual bool WaitBriefly() { return Test(); }
};

// One daemon's data-plane endpoint. Peers are named by their endpoint address (what address()
// returns on the peer). All methods are thread-safe; any number of threads may send and receive
// concurrently, to the same or different peers.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // The address other endpoints use to reach this one.
  virtual std::string address() const = 0;

  // Sends `data` tagged `tag` to `peer`, connecting first if needed. Returns once the bytes are
  // handed to the transport (they may still be in flight). Errors: Unavailable naming the peer when
  // the link is lost or cannot be established, DeadlineExceeded at `deadline`, or the abort reason
  // when tag.comm has been aborted.
  virtual absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                            absl::Time deadline) = 0;

  // Sends `messages` to `peer` in order, as Send would one after the other; they must belong to
  // one communicator (InvalidArgument otherwise, before anything is sent). A transport may hand
  // them over together: TCP writes them with one system call, so that a small message travels in
  // the segment of the next one instead of costing a packet of its own. Errors as Send's, naming
  // the last message; after an error some of the messages may have been sent.
  virtual absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                               absl::Time deadline);

  // Receives the message tagged `tag` from `peer` into `data`, which must be exactly as long as the
  // message. Errors: FailedPrecondition when the lengths differ (both are named) or a receive
  // with the same peer and tag is already posted, Unavailable naming the peer when its link is
  // lost, DeadlineExceeded naming the peer and tag at `deadline`, or the abort reason when
  // tag.comm has been aborted.
  absl::Status Recv(const std::string& peer, const Tag& tag, ByteSpan data, absl::Time deadline) {
    return PostRecv(peer, tag, data, deadline, nullptr)->Wait();
  }

  // Posts the receive that Recv would make and returns without waiting: a message that arrives
  // for a posted receive goes straight into `data` (no copy through an unexpected-message
  // buffer), so an algorithm posts its receives before the data can arrive. `data` must stay
  // valid until the returned receive is waited for or destroyed. Never null.
  //
  // `on_arrival` (may be null) runs once the whole message is in `data`, before Wait can return
  // or the destructor finish, in whichever thread delivered it (this one, if the message was
  // already there), with no lock of the endpoint held: it may call Abort. It does not run when
  // the receive fails. It lets a caller react to a message while it waits for others.
  using ArrivalCallback = absl::AnyInvocable<void() &&>;
  virtual std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag,
                                               ByteSpan data, absl::Time deadline,
                                               ArrivalCallback on_arrival) = 0;

  // Posts a receive whose message is handed to `consume` as it arrives instead of being written
  // into a buffer: in pieces, in order, each with its offset in the message, in whichever thread
  // reads it, with no lock of the endpoint held. Every piece but the last is a multiple of
  // kPieceAlignment bytes, so no piece splits an element. `length` is the message's length; the
  // receive completes (and fails) as PostRecv's into a buffer of that many bytes would, once
  // `consume` has returned for the last piece; a receive that fails may have handed over part of
  // the message. `consume` must not block: the transport reads nothing else meanwhile.
  //
  // What it is for: a stream transport reads each piece into a small buffer of its own (TCP: 256
  // KiB), so a consumer that folds the pieces into its data (a reduction) finds them in the cache,
  // instead of reading a whole message back from memory after the transport wrote it there. This
  // default receives into a buffer of `length` bytes and hands it over whole on arrival.
  static constexpr size_t kPieceAlignment = 64;
  using PieceConsumer = absl::AnyInvocable<void(size_t offset, ConstByteSpan piece)>;
  virtual std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag,
                                                  size_t length, absl::Time deadline,
                                                  PieceConsumer consume);

  // Times one small message to `peer` and its answer, over the connections the data travels on
  // (TCP: a ping frame, answered by the peer's endpoint with a pong). What the tuner's link model
  // takes as a message's latency. Errors: Unavailable when the peer cannot be reached,
  // DeadlineExceeded at `deadline`, Unimplemented where the transport has no such message.
  virtual absl::StatusOr<absl::Duration> RoundTrip(const std::string& peer, absl::Time deadline);
  // Fails every pending and future Send and Recv on communicator `comm` with `reason` (which must
  // not be OK), and drops its unexpected messages, until Forget(comm).
  virtual void Abort(uint64_t comm, const absl::Status& reason) = 0;

  // Drops all state kept for communicator `comm` (abort reason, unexpected messages).
  virtual void Forget(uint64_t comm) = 0;

  // A snapshot of every link this endpoint has had traffic on.
  virtual std::vector<LinkStats> Stats() const = 0;
};

}  // namespace baton::transport
