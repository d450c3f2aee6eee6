#pragma once

// The transport interface: how one daemon's data plane exchanges tagged messages with other
// daemons. Algorithms in collective/ see only this header; daemon/ and tests choose the
// implementation (tcp/, inmemory/, later shm/, cuda/, verbs/). Control traffic never goes here.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/memory.h"

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

class MemoryRegion;
class Endpoint;

// One message of Endpoint::SendAll.
struct OutMessage {
  Tag tag;
  ConstByteSpan data;
  // The registered region (Endpoint::RegisterMemory) that holds `data`, if it lies in one: what a
  // transport that moves registered memory only (verbs) needs to send it without a copy. Null
  // for memory that is not registered, which such a transport copies (small messages).
  const MemoryRegion* region = nullptr;
};

// InvalidArgument unless `messages` (to `peer`) all belong to one communicator, as SendAll needs.
absl::Status CheckSendAll(const std::string& peer, std::span<const OutMessage> messages);

// A counter of one link that only some transports have, e.g. TCP's "retransmits" (segments the
// kernel retransmitted on the link's connections).
struct LinkCounter {
  std::string name;  // snake_case, unique within one LinkStats
  uint64_t value = 0;
  friend bool operator==(const LinkCounter&, const LinkCounter&) = default;
};

// Counters of one link (this endpoint <-> one peer). Bytes count the payload plus the
// transport's own per-message overhead (TCP: its 40-byte frame header; in memory: none), so
// that they tell how much the link carried.
struct LinkStats {
  std::string peer;  // the peer endpoint's address
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_messages = 0;
  uint64_t rx_messages = 0;
  uint64_t errors = 0;
  bool up = false;  // a connection with the peer is currently established
  // Counters particular to the transport (TCP: "retransmits"), sorted by name.
  std::vector<LinkCounter> counters;

  // The counter called `name`; 0 when the transport has none of that name.
  uint64_t Counter(std::string_view name) const {
    for (const LinkCounter& counter : counters) {
      if (counter.name == name) return counter.value;
    }
    return 0;
  }
};

// A span of memory registered with an endpoint (Endpoint::RegisterMemory), which sends and
// receives can name (Endpoint::SendRegion, Endpoint::PostRecvRegion): a transport that must pin
// or map memory before it moves it (verbs, CUDA IPC) does so once per region instead of once per
// message. Destroying it deregisters the memory; no send or receive naming it may be in progress
// then. Host memory over TCP or in memory needs no registration: HostMemoryRegion only records
// the span. Not copyable; thread-safe (immutable).
class MemoryRegion {
 public:
  MemoryRegion(ByteSpan bytes, MemoryKind kind) : bytes_(bytes), kind_(kind) {}
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  virtual ~MemoryRegion() = default;

  ByteSpan bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }

  // This memory's registration with `endpoint`: the region itself, unless it stands for several
  // registrations of the same bytes (RoutingEndpoint registers a buffer with each of its
  // transports' endpoints and sends through the one that carries the peer); null when the
  // memory is not registered there (that endpoint cannot move its kind).
  virtual const MemoryRegion* RegistrationWith(const Endpoint* /*endpoint*/) const { return this; }

  // The `length` bytes at `offset`; InvalidArgument naming both and the region's size unless
  // they lie inside the region.
  absl::StatusOr<ByteSpan> Slice(size_t offset, size_t length) const;

 private:
  const ByteSpan bytes_;
  const MemoryKind kind_;
};

// Registers nothing: the region of a transport that moves host memory as it is.
std::unique_ptr<MemoryRegion> HostMemoryRegion(ByteSpan bytes);

// Part of a registered region, as a send or receive names it.
struct RegionSlice {
  const MemoryRegion* region = nullptr;
  size_t offset = 0;
  size_t length = 0;
};

// The bytes `slice` names, for a transport that moves host memory as it is: InvalidArgument
// (naming `peer`) when it names no region, memory of another kind, or bytes outside its region.
absl::StatusOr<ByteSpan> HostRegionBytes(const std::string& peer, const RegionSlice& slice);

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

// A receive that failed before it was posted: Wait returns `status` (not OK), Test is true.
std::unique_ptr<PostedRecv> FailedRecv(absl::Status status);

// ---- Posted sends and one-sided writes: what an RDMA transport needs --------------------------

// A send posted with Endpoint::PostSend, or a write posted with Endpoint::PostWrite. Its buffer
// belongs to the transport until the send completes: the caller must neither change nor free it
// before Wait has returned or Test has returned true. Not thread-safe: one thread waits for it.
// It must be destroyed before its endpoint.
class PostedSend {
 public:
  PostedSend() = default;
  PostedSend(const PostedSend&) = delete;
  PostedSend& operator=(const PostedSend&) = delete;
  // Does not withdraw the send: unless it has completed, waits until the transport no longer
  // reads its buffer (at the latest at the send's deadline, by which a transport stops reading
  // it) and drops the result, so the message may or may not arrive. TCP and the in-memory
  // transport read the buffer only within PostSend and PostWrite: theirs return at once.
  virtual ~PostedSend() = default;

  // Waits until the send has completed or failed. OK: the transport no longer needs the buffer
  // (TCP: the bytes are in the kernel; in memory: delivered; a write: the receiver took it into
  // its region). Errors as Send's, and a write's refusal by its receiver (Endpoint::PostWrite).
  // Later calls return the same result.
  virtual absl::Status Wait() = 0;

  // True once Wait would return without blocking (as MPI_Test). Never blocks.
  virtual bool Test() = 0;
};

// A send that completed or failed before it was handed back: Wait returns `status`, Test is
// true.
std::unique_ptr<PostedSend> CompletedSend(absl::Status status);

// Describes a region that a receiver exposed to one peer for one-sided writes
// (Endpoint::ExposeRegion), in a fixed-size form that the receiver sends the writer in a message
// of its own. Encoded: the bytes "BTRR", version 1, three zero bytes, then address, length and
// key, each 8 bytes little-endian (kEncodedBytes in all).
struct RemoteRegion {
  static constexpr size_t kEncodedBytes = 32;
  using Encoded = std::array<std::byte, kEncodedBytes>;

  // Where the region starts in the receiver's memory, for a transport that writes by address
  // (verbs: the virtual address its key covers); 0 where writes name the key alone (TCP, in
  // memory).
  uint64_t address = 0;
  uint64_t length = 0;  // bytes
  // What grants the write (verbs: the rkey; TCP and in memory: 64 random bits drawn for this
  // exposure alone, never 0).
  uint64_t key = 0;

  Encoded Encode() const;
  // InvalidArgument unless `bytes` is what Encode makes: its size, magic and version, reserved
  // bytes zero, and an address that the length does not carry past 2^64.
  static absl::StatusOr<RemoteRegion> Decode(ConstByteSpan bytes);

  friend bool operator==(const RemoteRegion&, const RemoteRegion&) = default;
};

// What the write that completes an exposed region tells its receiver (RDMA WRITE WITH
// IMMEDIATE).
struct WriteNotice {
  uint32_t immediate = 0;  // the value the writer gave PostWrite's `notify`
  // The bytes the writer wrote into the region in all: the notifying write's and those of every
  // write it posted to the region before it.
  uint64_t bytes = 0;
  friend bool operator==(const WriteNotice&, const WriteNotice&) = default;
};

// A part of a registered region that a receiver exposed to one peer, for one communicator, to
// write into one-sided (Endpoint::ExposeRegion, Endpoint::PostWrite): RDMA's rendezvous, in
// which the receiver hands the sender a key and the sender writes straight into its memory.
// One-shot: once the write carrying a notification (and every write its writer posted to the
// region before it) has landed, the region is revoked, and so it is when its communicator is
// aborted, at its deadline, or when it is destroyed; the writes that reach it after that are
// refused, and fail on the writer's side. Keys never outlive the receive that handed them out.
// Not thread-safe: one thread waits for it. It must be destroyed before its endpoint.
class ExposedRegion {
 public:
  ExposedRegion() = default;
  ExposedRegion(const ExposedRegion&) = delete;
  ExposedRegion& operator=(const ExposedRegion&) = delete;
  // Revokes the region, then waits until no write into it is in progress any more (a transport
  // that writes into it checks at least every 20 ms whether it was revoked), so that the memory
  // may be reused or freed as soon as this returns.
  virtual ~ExposedRegion() = default;

  // What the writer needs to write into the region: send it to the peer (Encode).
  virtual const RemoteRegion& descriptor() const = 0;

  // Waits until the notifying write and every write its writer posted to the region before it
  // have landed, and returns its notice. Errors: the abort reason of the communicator,
  // Unavailable naming the peer when its link is lost, DataLoss when what it wrote was altered
  // on the way, DeadlineExceeded naming the peer at the exposure's deadline. Returns only once
  // no write into the region is in progress. Later calls return the same result.
  virtual absl::StatusOr<WriteNotice> Wait() = 0;

  // True once Wait would return without blocking. Never blocks.
  virtual bool Test() = 0;
};

// An exposure that failed before it was made: its descriptor is all zero (a key no transport
// hands out), Wait returns `status` (not OK), Test is true.
std::unique_ptr<ExposedRegion> FailedExposure(absl::Status status);

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

  // PostRecv of a part of a registered region (Endpoint::RegisterMemory), which must lie inside
  // it and be memory this transport moves: InvalidArgument otherwise, before anything is posted
  // (the receive's Wait returns it). Otherwise as PostRecv of that part. This default checks the
  // slice and passes its bytes on; a transport that needs its registration (verbs: the key)
  // overrides it. PostSend below is the send side.
  virtual std::unique_ptr<PostedRecv> PostRecvRegion(const std::string& peer, const Tag& tag,
                                                     const RegionSlice& slice, absl::Time deadline,
                                                     ArrivalCallback on_arrival);

  // Registers `bytes` of memory `kind` for this endpoint's sends and receives (SendRegion,
  // PostRecvRegion, OutMessage::region), once per buffer: a transport that must pin or map memory
  // before it moves it (verbs, CUDA IPC) does so here and not per message. The daemon registers
  // every buffer its data plane moves when it maps or allocates it, and destroys the region
  // (deregisters) before it unmaps or frees it; no send or receive naming it may be in progress
  // then. InvalidArgument for a kind this endpoint cannot move. This default registers host
  // memory as it is (HostMemoryRegion), for transports that move host memory directly.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(ByteSpan bytes,
                                                                       MemoryKind kind);

  // Whether sends and receives with `peer` may name memory of `kind` (registered with this
  // endpoint) directly: the question the operation runner asks before it stages device memory
  // through host memory. True for device memory only where the transport moves it itself
  // (GPUDirect RDMA, CUDA IPC). This default: host memory only.
  virtual bool MovesDirectly(const std::string& peer, MemoryKind kind) const;

  // ---- Posted sends, one-sided writes and connection data: what an RDMA transport needs ------
  //
  // A transport that moves registered memory without copying it (verbs) completes a send when
  // the network has read the buffer, writes one-sided into a region the receiver exposed, and
  // sets its links up from data exchanged per pair of endpoints; these calls let it. Send above
  // stays for small control messages in unregistered memory.

  // Posts the send of a part of a registered region, as Send of that part would send it, and
  // returns a handle that completes once the transport no longer needs the bytes: only then may
  // the caller change or free them. The slice must lie inside its region and be memory this
  // transport moves: InvalidArgument otherwise (the handle's Wait returns it), before anything is
  // sent. Never null. TCP writes the bytes into the kernel before it returns (completed); the
  // in-memory transport delivers them before it returns. This default does the same over Send.
  virtual std::unique_ptr<PostedSend> PostSend(const std::string& peer, const Tag& tag,
                                               const RegionSlice& slice, absl::Time deadline);
  // PostSend and its Wait.
  absl::Status SendRegion(const std::string& peer, const Tag& tag, const RegionSlice& slice,
                          absl::Time deadline) {
    return PostSend(peer, tag, slice, deadline)->Wait();
  }

  // Exposes a part of a registered region to `peer`, for communicator `comm` only, to write into
  // with PostWrite until `deadline` (see ExposedRegion). The slice must lie inside its region and
  // be memory this transport moves: InvalidArgument otherwise, as the returned exposure's Wait
  // says; the abort reason when `comm` is aborted. Never null. This default: Unimplemented.
  virtual std::unique_ptr<ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                                      const RegionSlice& slice,
                                                      absl::Time deadline);

  // Writes `source` (a part of a registered region, as PostSend's) into the region `target` that
  // `peer` exposed to this endpoint for `comm`, at `target_offset`; with `notify`, completes the
  // exposure with that immediate value once this write and every write posted to it before have
  // landed (WriteNotice). Several writes may fill one region at offsets, the last notifying.
  // The receiver refuses a write outside the region's bounds (InvalidArgument), or under a key
  // that is unknown, revoked, or exposed to another peer or for another communicator
  // (PermissionDenied): never a byte outside the region. The returned handle (never null)
  // completes once the receiver took the bytes into its region or refused them, with errors
  // naming the peer; otherwise as PostSend's (the deadline, a lost peer, the abort reason of
  // `comm`). A write that fails may leave the exposure's notice unsent: its receiver's Wait then
  // fails at its deadline or abort. This default: Unimplemented.
  virtual std::unique_ptr<PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                                const RegionSlice& source,
                                                const RemoteRegion& target, size_t target_offset,
                                                std::optional<uint32_t> notify,
                                                absl::Time deadline);

  // Connection data: what this endpoint's link with `peer` needs the peer's endpoint to know
  // before they exchange messages (verbs: its queue pair's number and the first packet sequence
  // number), which the daemons carry over their authenticated control plane
  // (docs/transport.md) and hand to the peer's Connect. The same data while the endpoint lives.
  // This default: empty, nothing to exchange.
  virtual absl::StatusOr<std::string> ConnectionData(const std::string& peer);
  // Sets up the link with `peer` from the data the peer's endpoint made for this one
  // (ConnectionData(this endpoint's address) there). Again with the same data: OK, nothing
  // changes; with other data (the peer restarted): the link is set up anew. InvalidArgument when
  // the data is not what such an endpoint makes. This default: OK for empty data only.
  virtual absl::Status Connect(const std::string& peer, std::string_view remote_data);

  // Fails every pending and future Send and Recv on communicator `comm` with `reason` (which must
  // not be OK), and drops its unexpected messages, until Forget(comm).
  virtual void Abort(uint64_t comm, const absl::Status& reason) = 0;

  // Drops all state kept for communicator `comm` (abort reason, unexpected messages, Restrict).
  virtual void Forget(uint64_t comm) = 0;

  // Accepts messages of communicator `comm` only from `peers` (the other endpoints of its plan)
  // from now on, until Forget(comm): a message from any other endpoint is read and dropped as it
  // arrives, and counted in the link's "refused_messages" counter, and the messages of `comm`
  // already kept from others are dropped. A transport authenticates who sent a message (TCP: the
  // data handshake); this makes being authenticated not enough to take part in a communicator.
  // Until it is called, messages of `comm` from any peer are kept for it.
  virtual void Restrict(uint64_t comm, std::span<const std::string> peers) = 0;

  // A snapshot of every link this endpoint has had traffic on.
  virtual std::vector<LinkStats> Stats() const = 0;
};

// One transport address a daemon advertises to its peers: which transport, and the address of
// its endpoint on it (what that endpoint's address() returns).
struct TransportAddress {
  std::string transport;  // Transport::name()
  std::string address;
  friend bool operator==(const TransportAddress&, const TransportAddress&) = default;
};

// What a transport is told about a daemon when it decides whether it can reach it: its node,
// locality and advertised transports (in its own order of preference).
struct PeerInfo {
  std::string node_name;
  std::vector<std::string> locality;  // coarse to fine, e.g. {"pod-a", "rack-07"}; may be empty
  std::vector<TransportAddress> transports;

  // The address advertised for transport `name`, or null.
  const TransportAddress* Find(std::string_view name) const;
};

// One kind of data-plane link (TCP, in memory; later shared memory, CUDA IPC, verbs): a factory
// of endpoints that also says which peers it can reach and registers memory for them. The
// daemon registers its transports in order of preference and picks one per peer
// (transport/selector.h). Implementations are final and made by their folder's factory
// (NewTcpTransport, InMemoryFabric::NewTransport). Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;

  // The name daemons advertise it by: "tcp", "inmemory".
  virtual std::string_view name() const = 0;

  // Starts listening and returns the endpoint; its address() is what this daemon advertises for
  // the transport. Errors: the listener's (e.g. the address is taken), or FailedPrecondition
  // when the transport listens once only and already has.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Listen() = 0;

  // Whether this transport can carry messages between the daemon `self` and `peer` (NCCL's
  // canConnect): at least, `peer` advertises an address for it; a shared-memory transport also
  // needs both on one node. Cheap; never blocks; does not connect.
  virtual bool CanReach(const PeerInfo& self, const PeerInfo& peer) const = 0;
};

}  // namespace baton::transport
