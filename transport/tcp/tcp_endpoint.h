#pragma once

// The TCP endpoint: one listener, the connections with each peer (Connection), and the threads
// that read them. Internal to transport/tcp/; NewTcpEndpoint (tcp_transport.h) is the way in.
// Its members are defined by responsibility, as gloo's tcp/ splits the same job:
//   tcp_endpoint.cc       lifetime, Abort/Forget, counters
//   acceptor.cc           the listener thread, admitting accepted connections, reaping
//   connection_reader.cc  the read turn and reading frames off a connection
//   posted_recv.cc        posted receives and the waiting thread that reads for its own
//   stream_pool.cc        sending: framing, the connections per peer, connecting
//   round_trip.cc         ping/pong (RoundTrip) and the pong thread
//   remote_write.cc       one-sided writes (ExposeRegion, PostWrite) and the write-ack thread
//   credit_flow.cc        flow control: credit and clear-to-send frames, and the credit thread

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_limiter.h"
#include "common/thread_name.h"
#include "transport/exposure_table.h"
#include "transport/progress.h"
#include "transport/receive_matcher.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/remote_write.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace baton::transport::tcp {

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(Listener listener, FileDescriptor wake, std::string address,
              const TcpOptions& options)
      : listener_(std::move(listener)),
        wake_(std::move(wake)),
        address_(std::move(address)),
        own_progress_(options.progress == nullptr
                          ? std::make_unique<ProgressEngine>(
                                ProgressEngine::Options{.spin = options.receive_spin})
                          : nullptr),
        progress_(options.progress == nullptr ? own_progress_.get() : options.progress),
        receive_spin_(progress_->spin()),
        reader_linger_(options.reader_linger),
        streams_per_peer_(static_cast<size_t>(options.streams_per_peer)),
        handshake_keys_(options.handshake_keys),
        handshake_timeout_(options.handshake_timeout),
        max_pending_handshakes_(options.max_pending_handshakes),
        max_pending_handshakes_per_source_(
            std::min(options.max_pending_handshakes_per_source, options.max_pending_handshakes)),
        max_connections_per_peer_(2 * options.streams_per_peer +
                                  options.spare_connections_per_peer),
        checksum_(options.checksum),
        protection_(AskedProtection(options)),
        receive_credits_(options.max_unexpected_bytes_per_peer, options.max_unexpected_bytes_total),
        matcher_(kFrameHeaderBytes, &receive_credits_) {}
  ~TcpEndpoint() override;

  // Starts accepting connections; called once, right after construction.
  void Start() {
    listener_thread_ = std::thread([this] {
      SetThreadName("baton-accept");
      ListenLoop();
    });
    pong_thread_ = std::thread([this] {
      SetThreadName("baton-pong");
      PongLoop();
    });
    StartWrites();
    credit_thread_ = std::thread([this] {
      SetThreadName("baton-credit");
      CreditLoop();
    });
  }

  std::string address() const override { return address_; }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                       absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override;
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override;
  absl::StatusOr<absl::Duration> RoundTrip(const std::string& peer, absl::Time deadline) override;
  void Abort(uint64_t comm, const absl::Status& reason) override;
  void Forget(uint64_t comm) override;
  void Restrict(uint64_t comm, std::span<const std::string> peers) override {
    matcher_.Restrict(comm, peers);
  }
  std::vector<LinkStats> Stats() const override;
  // One-sided writes (remote_write.cc).
  std::unique_ptr<ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                              const RegionSlice& slice,
                                              absl::Time deadline) override;
  std::unique_ptr<PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                        const RegionSlice& source, const RemoteRegion& target,
                                        size_t target_offset, std::optional<uint32_t> notify,
                                        absl::Time deadline) override;

  // TcpReceivesReading (tcp_transport.h): the readers_waiting of the connections with `peer`.
  int ReceivesReading(const std::string& peer) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Conn = Connection;
  class Recv;
  // What a read turn's ReadFrame did: read a frame (kDone), left one to the reader thread
  // (kLeftToReader: its header is in `pending`), read part of a payload and parked the rest
  // (kParked: conn.in_frame), or found no whole header yet (kNothing: nothing consumed).
  enum class FrameRead { kDone, kLeftToReader, kParked, kNothing };
  // How the thread that holds a connection's read turn reads it.
  struct ReadTurn {
    // A thread reading for its own receive, or while its send waits for room: it leaves a
    // one-sided write (two frames) to the reader thread.
    bool for_receive = false;
    // A data payload not read whole by then is parked for the next turn. A receive's own
    // deadline ends its delivery (RecvDeadlineExceeded) and the rest is dropped.
    absl::Time park = absl::InfiniteFuture();
    // A frame header begun, and a control frame, must be whole by then, or the connection ends
    // as broken (the stream could no longer be kept in step).
    absl::Time limit = absl::InfiniteFuture();
    // Parks a payload as soon as this returns true (looked at whenever the socket runs dry);
    // may be null.
    const absl::FunctionRef<bool()>* give_way = nullptr;
  };

  // PostRecv and PostConsume: wraps the matcher's receive that `post` makes (given the callback
  // to run on arrival) in a Recv, read by the thread that waits for it.
  std::unique_ptr<PostedRecv> PostWith(
      const std::string& peer, absl::Time deadline, ArrivalCallback on_arrival,
      absl::FunctionRef<std::unique_ptr<PostedRecv>(ArrivalCallback)> post);

  void ListenLoop();
  void ReapFinishedReaders() ABSL_LOCKS_EXCLUDED(mu_);
  // Sets up the read side of a connection whose fd is set, before anyone reads it (for an
  // accepted one: once it is admitted, before it joins out_).
  void PrepareReadSide(Conn& conn) const {
    conn.kick = FileDescriptor(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    conn.in.emplace(conn.fd.get());
    conn.scratch.resize(kPieceBytes);
    conn.read_spin = AdaptiveSpin(receive_spin_);
  }
  // Counts an established connection with its peer and starts its reader.
  void StartReaderLocked(const std::shared_ptr<Conn>& conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one connection until it ends; an accepted one first has to introduce its peer.
  void ReadLoop(const std::shared_ptr<Conn>& conn, bool accepted);
  // The accepted connection's handshake: the peer's address once it proved its key, and the
  // connection's ciphers if it is sealed.
  absl::StatusOr<Admitted> AdmitPeer(int fd);
  // Counts a connection closed before it was admitted (and logs now and then).
  void NoteRefused(const std::string& why);
  // An accepted connection's handshake has ended, admitted or not: frees its place among the
  // handshakes in progress (in all and from its source).
  void EndHandshakeLocked(const Conn& conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reader thread's turn to read: waits while threads read for their receives (and
  // reader_linger_ after), then takes `reading`. False once the connection has ended.
  bool TakeReaderTurn(Conn& conn);
  // Reads one frame (or what `pending` or `in_frame` left of one) and delivers it, never waiting
  // for room (flow control bounds what a peer may send ahead), within `turn`. An error ends the
  // connection.
  absl::StatusOr<FrameRead> ReadFrame(Conn& conn, const ReadTurn& turn);
  // Reads the whole payload of a small control frame (ping, pong, credit, clear-to-send, write
  // descriptor, write ack: their size is fixed, frame.h) into `into`, exactly as long, opening or
  // verifying its records. A payload that is not what was sent is an integrity failure; any
  // other error is counted on the link.
  absl::Status ReadControlPayload(Conn& conn, const FrameHeader& header, ByteSpan into,
                                  absl::Time limit);
  // Reads on the payload of conn.in_frame, within `turn`: kDone once it is delivered (or dropped),
  // kParked if the turn ends first. An error fails the delivery and ends the connection.
  absl::StatusOr<FrameRead> ReadPayload(Conn& conn, const ReadTurn& turn);
  // A send whose connection's buffer is full reads what the peer sends on that connection
  // meanwhile, without waiting for any of it (an exchange of large messages then moves both ways
  // without a hand-off to the reader thread), until the socket takes more, `deadline` or
  // `cancelled()`. It asks for the read turn the first time and keeps it, once it has it, until
  // ReleaseTurnAfterSend.
  struct SendReading {
    bool wanting = false;  // counted in readers_waiting
    bool reading = false;  // holds the read turn
    bool done = false;     // reads no more (the connection ended, or a frame is the reader's)
  };
  void ReadWhileFull(Conn& conn, absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                     SendReading& state);
  void ReleaseTurnAfterSend(Conn& conn, const SendReading& state);
  // Called by a thread about to wait for `recv`, of whatever size: reads the peer's connection
  // itself until the receive completes, fails or reaches its deadline, or the connection is not
  // ours to read (the one progress mechanism, transport/progress.h).
  // `briefly`: only while the connection's spin lasts (AwaitFrame), and not at all if another
  // thread is reading the connection.
  void ReadForReceive(Recv& recv, bool briefly);
  enum class Readable { kYes, kNotYet, kPollFailed };
  // For ReadForReceive, which holds the read turn of `conn`: waits (ProgressEngine::Await) until
  // the connection is readable, the receive arrived (over another connection), one slice passed
  // or `until`.
  Readable AwaitFrame(Conn& conn, Recv& recv, absl::Time until);
  // Ends the linger of every connection's reader thread (see TcpOptions::reader_linger) but
  // `except`'s: called by a send that waits for room (and reads `except` itself), since the peer
  // may be waiting to send to this endpoint too, or to one that is, and nobody here may be about
  // to read for a receive.
  void StopLingering(const Conn* except = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Of `conns` (`peer`'s) that `usable` accepts: when both sides connected to each other at once,
  // the one opened by the endpoint whose address sorts first, so that both send on it and the
  // acknowledgements ride on data; else any. Null if none.
  std::shared_ptr<Conn> PreferredLocked(const std::string& peer,
                                        const std::vector<std::shared_ptr<Conn>>& conns,
                                        absl::FunctionRef<bool(const Conn&)> usable) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The connection `peer` sends on (see AcquireStream), if one is established.
  std::shared_ptr<Conn> ConnFrom(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);

  // The error that stops sending on `comm` now (shut down or aborted), or OK.
  absl::Status SendBlockingErrorLocked(uint64_t comm) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool SendCancelled(uint64_t comm) const ABSL_LOCKS_EXCLUDED(mu_);
  // Reserves an idle connection to `peer` for `bytes` of frames: the preferred one (see
  // PreferredLocked) for less than kStripeMinBytes, else the next in turn, connecting one more
  // while there are fewer than streams_per_peer_ (or none). Drops dead connections first
  // (DropDeadStreamsLocked, for `operation`: the data frames' operation, none for a ping).
  absl::StatusOr<std::shared_ptr<Conn>> AcquireStream(const std::string& peer, const Tag& tag,
                                                      std::optional<OperationId> operation,
                                                      size_t bytes, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A connection to `peer` that has passed the handshake, and its ciphers if it is sealed.
  struct Introduced {
    FileDescriptor fd;
    std::optional<SealedStream> sealed;
  };
  absl::StatusOr<Introduced> ConnectAndIntroduce(const std::string& peer, uint64_t comm,
                                                 absl::Time deadline);
  // Returns a stream after a Send; a broken one is dropped so that the next Send reconnects.
  // `written_operation`: the operation of the data frames the Send wrote bytes of, if any.
  void ReleaseStream(const std::string& peer, const std::shared_ptr<Conn>& stream, bool healthy,
                     std::optional<OperationId> written_operation = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops `stream` from the connections Sends to `peer` use (keeping its retransmits).
  void DropStreamLocked(const std::string& peer, const std::shared_ptr<Conn>& stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `peer`'s connections whose reader has ended (the peer closed them, or restarted) and
  // that no Send holds, so that a Send connects afresh instead of failing on one. Unavailable
  // (naming `tag`), after dropping them, when one of them last carried a data frame of
  // `operation`: what the operation sent on it may not have arrived, and the operation fails
  // rather than go on as if it had.
  absl::Status DropDeadStreamsLocked(const std::string& peer, std::optional<OperationId> operation,
                                     const Tag& tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountSendLocked(const std::string& peer, uint64_t length, bool ok)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `messages` to `peer` as frames of `type` in one system call (SendAll for data frames,
  // which alone are counted in LinkStats).
  absl::Status SendFrames(const std::string& peer, FrameType type,
                          std::span<const OutMessage> messages, absl::Time deadline);
  // Flow control (credit_flow.cc). What SendFrames does about credit for data frames once it
  // holds `stream`: write them (the credit is taken, or the clear-to-send), try again (the
  // stream is released: credit was waited for, or the connection ended before the peer's first
  // credit frame came), or send the messages one at a time (the stream is released).
  enum class CreditAction { kWrite, kRetry, kDead, kOneByOne };
  struct SendCredit {
    std::optional<uint64_t> paid_epoch;   // credit waited for and taken in this epoch
    std::optional<uint64_t> write_epoch;  // the credit of the write about to happen
    uint64_t charge = 0;
    bool cleared = false;  // the clear-to-send of a rendezvous message is taken
  };
  absl::StatusOr<CreditAction> TakeCredit(const std::string& peer,
                                          const std::shared_ptr<Conn>& stream,
                                          std::span<const OutMessage> messages, absl::Time deadline,
                                          SendCredit& credit);
  // The epoch of the peer's credit on `conn` (its first credit frame): Unavailable if the
  // connection ends first, DeadlineExceeded (naming the peer and `tag`) or the abort reason.
  absl::StatusOr<uint64_t> AwaitCreditEpoch(Conn& conn, const Tag& tag, absl::Time deadline);
  // Writes `conn.first_grant`, if it is still to be sent, on `conn`, which the caller holds.
  absl::Status WriteFirstGrant(Conn& conn, absl::Time deadline);
  // A credit or clear-to-send frame's payload, read after its header, handed to send_credits_.
  absl::Status ReadCreditFrame(Conn& conn, const FrameHeader& header, absl::Time limit);
  // Sends what receive_credits_ has to send (grants and clear-to-sends), until shutdown. Its own
  // thread, for the reason PongLoop has one.
  void CreditLoop();

  // A ping or pong frame's payload, read after its header; a ping is queued for PongLoop, a pong
  // completes its RoundTrip.
  absl::Status ReadPingOrPong(Conn& conn, const FrameHeader& header, absl::Time limit);
  // Answers queued pings. Its own thread, so that no thread that reads a connection ever waits to
  // write one (the peer might be waiting for us to read).
  void PongLoop();
  void CountError(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // A message from `peer` with `header` failed its checksum, or a record of it did not open (a
  // sealed or authenticated frame): counts an error and a checksum or seal failure, logs, and
  // returns the error of its receive.
  absl::Status IntegrityFailure(const std::string& peer, const FrameHeader& header)
      ABSL_LOCKS_EXCLUDED(mu_);
  // What `peer` sent can no longer be trusted to be whole (`error`, DataLoss): fails its pending
  // receives and those posted until it connects again with `error` (ReceiveMatcher::PeerLost),
  // and closes every connection with it. Logs.
  void DataLostFrom(const std::string& peer, const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);

  const Listener listener_;
  const FileDescriptor wake_;  // eventfd that stops ListenLoop
  const std::string address_;
  // The daemon's progress engine (TcpOptions::progress), or the endpoint's own.
  const std::unique_ptr<ProgressEngine> own_progress_;
  ProgressEngine* const progress_;
  const absl::Duration receive_spin_;   // progress_->spin()
  const absl::Duration reader_linger_;  // TcpOptions::reader_linger
  const size_t streams_per_peer_;
  HandshakeKeys* const handshake_keys_;  // may be null
  const absl::Duration handshake_timeout_;
  const int max_pending_handshakes_;
  const int max_pending_handshakes_per_source_;
  const int max_connections_per_peer_;
  const bool checksum_;          // TcpOptions::checksum
  const Protection protection_;  // TcpOptions::seal, TcpOptions::authenticate
  // Connections refused (no room, a failed handshake, a peer over its connections), and the lines
  // that anyone who reaches the port can cause: logged at most a few times a minute each.
  std::atomic<uint64_t> refused_connections_{0};
  LogLimiter refused_log_{5, absl::Minutes(1)};
  LogLimiter accept_error_log_{5, absl::Minutes(1)};
  LogLimiter peer_error_log_{20, absl::Minutes(1)};
  // Flow control: what this endpoint grants its peers (charged by matcher_, so declared first),
  // and what they grant it.
  ReceiveCredits receive_credits_;
  SendCredits send_credits_;
  std::thread credit_thread_;
  // Sends waiting for credit or a clear-to-send, and round trips waiting for their pong: while
  // there are any, no reader lingers (the frames they wait for come on any connection with the
  // peer, and only the reader threads read those nobody reads for).
  std::atomic<int> answers_awaited_{0};
  // Counts one such wait in answers_awaited_ while it lives.
  class AnswerWait {
   public:
    explicit AnswerWait(std::atomic<int>& awaited) : awaited_(awaited) {
      awaited_.fetch_add(1, std::memory_order_acq_rel);
    }
    AnswerWait(const AnswerWait&) = delete;
    AnswerWait& operator=(const AnswerWait&) = delete;
    ~AnswerWait() { awaited_.fetch_sub(1, std::memory_order_acq_rel); }

   private:
    std::atomic<int>& awaited_;
  };
  ReceiveMatcher matcher_;
  std::thread listener_thread_;

  // Lock order: mu_ before the matcher's internal lock.
  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Accepted connections still in their handshake, in all and per source address.
  int handshaking_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> handshaking_from_ ABSL_GUARDED_BY(mu_);
  // The send side's copy of the abort reasons (the receive side's live in matcher_).
  absl::flat_hash_map<uint64_t, absl::Status> aborted_ ABSL_GUARDED_BY(mu_);
  // The connections Sends to each peer use: those we opened and those the peer opened.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Conn>>> out_ ABSL_GUARDED_BY(mu_);
  // Every connection with a reader thread, until the thread is joined.
  std::list<std::shared_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
  // Per peer: where the next striped send starts looking in out_[peer].
  absl::flat_hash_map<std::string, size_t> stripe_turn_ ABSL_GUARDED_BY(mu_);
  // Established connections per peer address (accepted ones once introduced).
  absl::flat_hash_map<std::string, int> connections_ ABSL_GUARDED_BY(mu_);
  // tx counters and errors; rx counters and `up` come from matcher_.
  absl::flat_hash_map<std::string, LinkStats> links_ ABSL_GUARDED_BY(mu_);
  // Per peer: what the kernel retransmitted on connections since dropped (the counter must not
  // go backwards when a connection goes).
  absl::flat_hash_map<std::string, uint64_t> lost_retransmits_ ABSL_GUARDED_BY(mu_);
  // Per peer: messages whose checksum did not match (kChecksumFailuresCounter).
  absl::flat_hash_map<std::string, uint64_t> checksum_failures_ ABSL_GUARDED_BY(mu_);
  // Per peer: messages with a sealed or authenticated record that did not open
  // (kSealFailuresCounter).
  absl::flat_hash_map<std::string, uint64_t> seal_failures_ ABSL_GUARDED_BY(mu_);

  // Round trips: pings in flight by identifier, with the time their pong arrived (InfinitePast
  // until then), and pings from peers still to be answered.
  absl::Mutex pings_mu_;
  bool pings_stopping_ ABSL_GUARDED_BY(pings_mu_) = false;
  uint64_t next_ping_ ABSL_GUARDED_BY(pings_mu_) = 1;
  absl::flat_hash_map<uint64_t, absl::Time> pings_ ABSL_GUARDED_BY(pings_mu_);
  std::deque<std::pair<std::string, std::array<std::byte, kPingPayloadBytes>>> pongs_due_
      ABSL_GUARDED_BY(pings_mu_);
  std::thread pong_thread_;

  // ---- One-sided writes (remote_write.cc) -------------------------------------------------
  class Write;  // PostWrite's PostedSend
  // Starts the write-ack thread (Start); fails the writes waiting for answers, stops the thread
  // and fails the exposed regions (the destructor).
  void StartWrites();
  void StopWrites();
  // A write's two frames (frame.h), the first's header read: reads its bytes into the region it
  // names if the exposure table lets it (else drops them) and queues the answer. Errors end the
  // connection, as ReadFrame's.
  absl::Status ReadWrite(Conn& conn, const FrameHeader& header, absl::Time limit);
  // A write ack: completes the write it answers, if it is still waited for.
  absl::Status ReadWriteAck(Conn& conn, const FrameHeader& header, absl::Time limit);
  void QueueWriteAck(const std::string& peer, const Tag& tag, WriteRefusal refusal)
      ABSL_LOCKS_EXCLUDED(writes_mu_);
  // Sends queued acks. Its own thread, as PongLoop: no thread that reads a connection waits to
  // write one.
  void WriteAckLoop();
  // `peer` is lost (`status`): fails its exposures and the writes to it waiting for an answer.
  void WritesLost(const std::string& peer, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(writes_mu_);
  // Abort and Forget of `comm`, for exposures and writes.
  void AbortWrites(uint64_t comm, const absl::Status& reason) ABSL_LOCKS_EXCLUDED(writes_mu_);
  void ForgetWrites(uint64_t comm);

  ExposureTable exposures_;
  WriteTally tally_;
  struct PendingWrite {
    std::string peer;
    uint64_t comm = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    std::optional<absl::Status> result = std::nullopt;  // once answered or failed
  };
  struct AckDue {
    std::string peer;
    WriteAck ack;
  };
  // Lock order: mu_ before writes_mu_ (never the other way round).
  absl::Mutex writes_mu_;
  bool writes_stopping_ ABSL_GUARDED_BY(writes_mu_) = false;
  uint64_t next_write_ ABSL_GUARDED_BY(writes_mu_) = 1;
  absl::flat_hash_map<uint64_t, PendingWrite> writes_ ABSL_GUARDED_BY(writes_mu_);
  std::deque<AckDue> acks_due_ ABSL_GUARDED_BY(writes_mu_);
  std::thread ack_thread_;
};

}  // namespace baton::transport::tcp
