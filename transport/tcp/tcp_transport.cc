#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"
#include "transport/frame.h"
#include "transport/receive_matcher.h"
#include "transport/tcp/socket.h"

namespace baton::transport {
namespace {

// How long an accepted connection may take to introduce itself.
constexpr absl::Duration kHelloTimeout = absl::Seconds(30);
// Payload bytes that nobody wants, and the pieces of a consumed message (Endpoint::PostConsume),
// are read into a buffer of this size: small enough that a piece is still in the cache when its
// consumer reads it.
constexpr size_t kPieceBytes = 256 * 1024;
static_assert(kPieceBytes % Endpoint::kPieceAlignment == 0);

// A receive of at most this many bytes is read by the thread that waits for it (see
// TcpEndpoint::ReadForReceive); larger ones are left to the connection's reader thread, which
// reads them while the waiting thread sends, so that both directions of bulk data keep moving.
constexpr size_t kReadForReceiveMaxBytes = 64 * 1024;
// A thread reading for its receive looks at least this often whether the receive has failed
// (aborted, peer lost, shut down) or its message came over another connection.
constexpr absl::Duration kReadForReceiveSlice = absl::Milliseconds(20);

// This thread's eventfd, for being told that the receive it reads for has completed elsewhere;
// -1 if none could be made.
int ThreadEvent() {
  thread_local const FileDescriptor event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  return event.get();
}

void Signal(int event) {
  const uint64_t one = 1;
  (void)!write(event, &one, sizeof(one));  // a full counter is as good as a signal
}

void Drain(int event) {
  uint64_t count = 0;
  (void)!read(event, &count, sizeof(count));
}

absl::Status ShutDownError() { return absl::UnavailableError("endpoint shut down"); }

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(Listener listener, FileDescriptor wake, std::string address,
              const TcpOptions& options)
      : listener_(std::move(listener)),
        wake_(std::move(wake)),
        address_(std::move(address)),
        receive_spin_(options.receive_spin),
        reader_linger_(options.reader_linger),
        streams_per_peer_(static_cast<size_t>(options.streams_per_peer)),
        matcher_(options.max_unexpected_bytes_per_peer) {}
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
  std::vector<LinkStats> Stats() const override;

 private:
  // One TCP connection with a peer, whichever side opened it. Frames flow both ways: its reader
  // thread reads what the peer sends, and Sends to the peer write to it, one at a time. Carrying
  // both directions on one connection lets TCP's acknowledgements ride on data going the other
  // way: with a connection per direction, every small message cost a second packet, a bare
  // acknowledgement, which is as expensive to move through the kernel as the message itself.
  // `fd` is set under mu_ before `connecting` turns false; from then on it is written by the Send
  // that holds `busy`, read by the reader thread, and shut down, never closed, by others.
  struct Conn {
    FileDescriptor fd;
    std::string peer;   // known at once when we connect; from the hello when we accept
    bool ours = false;  // we connected (rather than accepted) it
    std::thread reader;
    // Guarded by mu_.
    bool connecting = false;  // being connected by the Send that reserved it (no fd yet)
    bool busy = false;        // a Send is writing to it
    bool finished = false;    // its reader has ended and its thread only has to return

    // The read side. Frames are read by one thread at a time, the one that holds `reading`: the
    // reader thread, or a thread waiting for a small receive from the peer, which reads for
    // itself (ReadForReceive) and so is woken by the kernel once instead of by the reader.
    absl::Mutex read_mu;
    bool reading ABSL_GUARDED_BY(read_mu) = false;
    int readers_waiting ABSL_GUARDED_BY(read_mu) = 0;  // threads reading for their receive
    absl::Time last_read_for_receive ABSL_GUARDED_BY(read_mu) = absl::InfinitePast();
    // Someone waits for what only the reader thread reads (a large receive, or a frame a waiting
    // thread left to it): the reader thread reads again without lingering.
    bool wanted ABSL_GUARDED_BY(read_mu) = false;
    bool reader_polling ABSL_GUARDED_BY(read_mu) = false;  // the reader thread waits in poll()
    absl::Status ended ABSL_GUARDED_BY(read_mu);           // why the connection ended, once it has
    FileDescriptor kick;  // eventfd that takes the reader out of poll()
    // Only the thread that holds `reading` touches these.
    std::optional<BufferedReader> in;    // set with fd
    std::optional<FrameHeader> pending;  // a frame header read but left for the reader thread
    std::vector<std::byte> scratch;
    AdaptiveSpin read_spin{absl::ZeroDuration()};  // how long a waiting thread spins (AwaitFrame)
  };
  class Recv;
  enum class FrameRead { kDone, kLeftToReader };

  // PostRecv and PostConsume: wraps the matcher's receive that `post` makes (given the callback
  // to run on arrival) in a Recv, read by the waiting thread when `length` is small.
  std::unique_ptr<PostedRecv> PostWith(
      const std::string& peer, absl::Time deadline, size_t length, ArrivalCallback on_arrival,
      absl::FunctionRef<std::unique_ptr<PostedRecv>(ArrivalCallback)> post);

  void ListenLoop();
  void ReapFinishedReaders() ABSL_LOCKS_EXCLUDED(mu_);
  // Sets up the read side of a connection whose fd is set, before anyone reads it.
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
  absl::StatusOr<std::string> ReadHello(int fd);
  // The reader thread's turn to read: waits while threads read for their receives (and
  // reader_linger_ after), then takes `reading`. False once the connection has ended.
  bool TakeReaderTurn(Conn& conn);
  // Reads one frame (or what `pending` left of one) and delivers it. With `for_receive` (a
  // thread reading for its own receive) it does not wait on room for unexpected messages, nor
  // read a payload over kReadForReceiveMaxBytes: such a frame is left to the reader thread. Only
  // the delivery into a posted receive may wait past `limit` (until that receive's deadline); a
  // frame that stays half-sent past both ends the connection as broken, since the stream can no
  // longer be kept in step. An error ends the connection.
  absl::StatusOr<FrameRead> ReadFrame(Conn& conn, bool for_receive, absl::Time limit);
  absl::Status ReadPayload(Conn& conn, const FrameHeader& header, ReceiveMatcher::Delivery delivery,
                           absl::Time limit);
  // Called by a thread about to wait for `recv`: reads the peer's connection itself until the
  // receive completes, fails or reaches its deadline, or the connection is not ours to read.
  // `briefly`: only while the connection's spin lasts (AwaitFrame), and not at all if another
  // thread is reading the connection.
  void ReadForReceive(Recv& recv, bool briefly);
  enum class Readable { kYes, kNotYet, kPollFailed };
  // For ReadForReceive, which holds the read turn of `conn`: waits until the connection is
  // readable, the receive arrived (over another connection: `event` fires), one slice passed or
  // `until`. Spins first (SpinUntil) while frames have been arriving within receive_spin_.
  Readable AwaitFrame(Conn& conn, Recv& recv, int event, absl::Time until);
  // Tells the reader thread of the connection from `peer` not to linger: a receive it alone reads
  // has been posted or is being waited for.
  void WantReader(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the linger of every connection's reader thread (see TcpOptions::reader_linger): called
  // by a send that waits for room, since the peer may be waiting to send to this endpoint too,
  // or to one that is, and nobody here may be about to read for a receive.
  void StopLingering() ABSL_LOCKS_EXCLUDED(mu_);
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
  // while there are fewer than streams_per_peer_ (or none).
  absl::StatusOr<std::shared_ptr<Conn>> AcquireStream(const std::string& peer, const Tag& tag,
                                                      size_t bytes, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<FileDescriptor> ConnectAndIntroduce(const std::string& peer, uint64_t comm,
                                                     absl::Time deadline);
  // Returns a stream after a Send; a broken one is dropped so that the next Send reconnects.
  void ReleaseStream(const std::string& peer, const std::shared_ptr<Conn>& stream, bool healthy)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CountSendLocked(const std::string& peer, uint64_t length, bool ok)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `messages` to `peer` as frames of `type` in one system call (SendAll for data frames,
  // which alone are counted in LinkStats).
  absl::Status SendFrames(const std::string& peer, FrameType type,
                          std::span<const OutMessage> messages, absl::Time deadline);
  // A ping or pong frame's payload, read after its header; a ping is queued for PongLoop, a pong
  // completes its RoundTrip.
  absl::Status ReadPingOrPong(Conn& conn, const FrameHeader& header, absl::Time limit);
  // Answers queued pings. Its own thread, so that no thread that reads a connection ever waits to
  // write one (the peer might be waiting for us to read).
  void PongLoop();
  void CountError(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);

  const Listener listener_;
  const FileDescriptor wake_;  // eventfd that stops ListenLoop
  const std::string address_;
  const absl::Duration receive_spin_;
  const absl::Duration reader_linger_;  // TcpOptions::reader_linger
  const size_t streams_per_peer_;
  ReceiveMatcher matcher_;
  std::thread listener_thread_;

  // Lock order: mu_ before the matcher's internal lock.
  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
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

  // Round trips: pings in flight by identifier, with the time their pong arrived (InfinitePast
  // until then), and pings from peers still to be answered.
  absl::Mutex pings_mu_;
  bool pings_stopping_ ABSL_GUARDED_BY(pings_mu_) = false;
  uint64_t next_ping_ ABSL_GUARDED_BY(pings_mu_) = 1;
  absl::flat_hash_map<uint64_t, absl::Time> pings_ ABSL_GUARDED_BY(pings_mu_);
  std::deque<std::pair<std::string, std::array<std::byte, kPingPayloadBytes>>> pongs_due_
      ABSL_GUARDED_BY(pings_mu_);
  std::thread pong_thread_;
};

TcpEndpoint::~TcpEndpoint() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;  // a pong being written stops too
  }
  {
    absl::MutexLock lock(&pings_mu_);
    pings_stopping_ = true;
  }
  if (pong_thread_.joinable()) pong_thread_.join();
  matcher_.Shutdown(ShutDownError());
  const uint64_t one = 1;
  if (write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("tcp endpoint {}: cannot wake the listener: errno {}", address_, errno);
  }
  if (listener_thread_.joinable()) listener_thread_.join();
  // No connection is accepted any more, and none is established (Sends fail once shutting_down_
  // is set). shutdown() wakes every reader with EOF and tells every peer that we are gone; the
  // fds are closed when their last owner lets go.
  std::list<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& conn : conns_) shutdown(conn->fd.get(), SHUT_RDWR);
    conns.swap(conns_);
  }
  // A reader thread may be waiting for its turn rather than in poll().
  for (const auto& conn : conns) {
    absl::MutexLock lock(&conn->read_mu);
    if (conn->ended.ok()) conn->ended = ShutDownError();
  }
  for (const auto& conn : conns) conn->reader.join();
}

void TcpEndpoint::ListenLoop() {
  while (true) {
    std::array<pollfd, 2> fds{pollfd{listener_.fd.get(), POLLIN, 0},
                              pollfd{wake_.get(), POLLIN, 0}};
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error(
          "tcp endpoint {}: poll on the listener failed: errno {}; not accepting any more",
          address_, errno);
      return;
    }
    if (fds[1].revents != 0) return;  // shutting down
    if (fds[0].revents == 0) continue;
    const int fd = accept4(listener_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      spdlog::error("tcp endpoint {}: accept failed: {}", address_,
                    BATON_ERRNO_STATUS("accept4").ToString());
      // E.g. out of fds: back off instead of spinning on a listener that stays readable.
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    ReapFinishedReaders();
    auto conn = std::make_shared<Conn>();
    conn->fd = FileDescriptor(fd);
    SetNoDelay(fd);  // frames go back to the peer on this connection too
    PrepareReadSide(*conn);
    absl::MutexLock lock(&mu_);
    conn->reader = std::thread([this, conn] {
      SetThreadName("baton-tcp-read");
      ReadLoop(conn, /*accepted=*/true);
    });
    conns_.push_back(std::move(conn));
  }
}

void TcpEndpoint::ReapFinishedReaders() {
  std::list<std::shared_ptr<Conn>> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if ((*it)->finished) finished.splice(finished.end(), conns_, it);
      it = next;
    }
  }
  // Their threads have nothing left to do but return.
  for (const auto& conn : finished) conn->reader.join();
}

void TcpEndpoint::StartReaderLocked(const std::shared_ptr<Conn>& conn) {
  ++connections_[conn->peer];
  matcher_.PeerConnected(conn->peer);
  conn->reader = std::thread([this, conn] {
    SetThreadName("baton-tcp-read");
    ReadLoop(conn, /*accepted=*/false);
  });
  conns_.push_back(conn);
}

void TcpEndpoint::ReadLoop(const std::shared_ptr<Conn>& conn, bool accepted) {
  const int fd = conn->fd.get();
  if (accepted) {
    absl::StatusOr<std::string> peer = ReadHello(fd);
    absl::MutexLock lock(&mu_);
    if (!peer.ok()) {
      shutdown(fd, SHUT_RDWR);
      if (!shutting_down_) {
        spdlog::error("tcp endpoint {}: dropping a connection without a valid hello: {}", address_,
                      peer.status().ToString());
      }
      conn->finished = true;
      return;
    }
    conn->peer = *std::move(peer);
    ++connections_[conn->peer];
    matcher_.PeerConnected(conn->peer);
    // Sends to the peer may use it from now on.
    out_[conn->peer].push_back(conn);
  }
  const std::string& peer = conn->peer;  // immutable from here on
  while (TakeReaderTurn(*conn)) {
    bool kicked = false;
    if (!conn->pending.has_value() && !conn->in->buffered()) {
      std::array<pollfd, 2> fds{pollfd{fd, POLLIN, 0}, pollfd{conn->kick.get(), POLLIN, 0}};
      const int n = poll(fds.data(), conn->kick.valid() ? 2 : 1, -1);
      const int poll_errno = errno;
      kicked = n > 0 && fds[1].revents != 0;
      if (kicked) Drain(conn->kick.get());
      if (n > 0 && fds[0].revents != 0) conn->in->NoteReadable();
      {
        absl::MutexLock lock(&conn->read_mu);
        conn->reader_polling = false;
      }
      if (n < 0 && poll_errno != EINTR) {
        // Cannot happen with valid fds; read anyway, which reports what is wrong.
        spdlog::warn("tcp endpoint {}: poll on the connection from peer {} failed: errno {}",
                     address_, peer, poll_errno);
      }
      kicked = kicked || n == 0 || (n < 0 && poll_errno == EINTR);
    }
    absl::StatusOr<FrameRead> frame =
        kicked ? FrameRead::kDone : ReadFrame(*conn, /*for_receive=*/false, absl::InfiniteFuture());
    absl::MutexLock lock(&conn->read_mu);
    conn->reading = false;
    if (!frame.ok() && conn->ended.ok()) conn->ended = frame.status();
  }
  // Tell the peer now, and make the next Send on this connection notice (`finished`); the fd
  // itself is closed when the connection's last owner lets go.
  shutdown(fd, SHUT_RDWR);
  absl::Status ended;
  {
    absl::MutexLock lock(&conn->read_mu);
    ended = conn->ended;
  }
  absl::MutexLock lock(&mu_);
  // Under mu_, so that a reconnection's PeerConnected cannot be overtaken by this PeerLost.
  if (--connections_[peer] == 0) {
    connections_.erase(peer);
    matcher_.PeerLost(peer, absl::UnavailableError(absl::StrCat("lost connection from peer ", peer,
                                                                ": ", ended.message())));
  }
  conn->finished = true;
}

bool TcpEndpoint::TakeReaderTurn(Conn& conn) {
  absl::MutexLock lock(&conn.read_mu);
  auto free = [&conn]() ABSL_SHARED_LOCKS_REQUIRED(conn.read_mu) {
    return !conn.ended.ok() || (!conn.reading && conn.readers_waiting == 0);
  };
  auto stop_lingering = [&conn]() ABSL_SHARED_LOCKS_REQUIRED(conn.read_mu) {
    return !conn.ended.ok() || conn.wanted;
  };
  while (true) {
    conn.read_mu.Await(absl::Condition(&free));
    if (!conn.ended.ok()) return false;
    const absl::Duration idle = absl::Now() - conn.last_read_for_receive;
    if (idle >= reader_linger_ || conn.wanted) break;
    conn.read_mu.AwaitWithTimeout(absl::Condition(&stop_lingering), reader_linger_ - idle);
  }
  conn.wanted = false;
  conn.reading = true;
  conn.reader_polling = !conn.pending.has_value() && !conn.in->buffered();
  return true;
}

absl::StatusOr<TcpEndpoint::FrameRead> TcpEndpoint::ReadFrame(Conn& conn, bool for_receive,
                                                              absl::Time limit) {
  const std::string& peer = conn.peer;
  FrameHeader header;
  if (conn.pending.has_value()) {
    header = *conn.pending;
    conn.pending.reset();
  } else {
    std::array<std::byte, kFrameHeaderBytes> buffer;
    size_t read = 0;
    if (absl::Status status = conn.in->Read(buffer, limit, &read); !status.ok()) {
      if (for_receive && read == 0 && absl::IsDeadlineExceeded(status)) {
        return FrameRead::kLeftToReader;  // nothing consumed: the stream is still in step
      }
      // EOF between frames is how a peer goes away; anything else is a broken link.
      if (read > 0 || !absl::IsUnavailable(status)) CountError(peer);
      return status;
    }
    absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(buffer);
    if (decoded.ok() && decoded->type == FrameType::kHello) {
      decoded = absl::DataLossError("unexpected hello frame on an introduced connection");
    }
    if (!decoded.ok()) {
      spdlog::error("tcp endpoint {}: closing the connection from peer {}: {}", address_, peer,
                    decoded.status().ToString());
      CountError(peer);
      return decoded.status();
    }
    header = *decoded;
  }
  if (header.type != FrameType::kData) {
    BATON_RETURN_IF_ERROR(ReadPingOrPong(conn, header, limit));
    return FrameRead::kDone;
  }
  if (!for_receive) {
    BATON_RETURN_IF_ERROR(ReadPayload(
        conn, header, matcher_.BeginDelivery(peer, header.tag, header.payload_bytes), limit));
    return FrameRead::kDone;
  }
  std::optional<ReceiveMatcher::Delivery> delivery;
  if (header.payload_bytes <= kReadForReceiveMaxBytes) {
    delivery = matcher_.TryBeginDelivery(peer, header.tag, header.payload_bytes);
  }
  if (!delivery.has_value()) {
    conn.pending = header;
    return FrameRead::kLeftToReader;
  }
  BATON_RETURN_IF_ERROR(ReadPayload(conn, header, *std::move(delivery), limit));
  return FrameRead::kDone;
}

absl::Status TcpEndpoint::ReadPayload(Conn& conn, const FrameHeader& header,
                                      ReceiveMatcher::Delivery delivery, absl::Time limit) {
  const std::string& peer = conn.peer;
  uint64_t left = header.payload_bytes;
  // Consumes the rest of a payload nobody wants, to keep the stream in step.
  auto drain = [&]() -> absl::Status {
    while (left > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, conn.scratch.size()));
      size_t read = 0;
      BATON_RETURN_IF_ERROR(conn.in->Read(ByteSpan(conn.scratch.data(), chunk), limit, &read));
      left -= chunk;
    }
    return absl::OkStatus();
  };

  if (delivery.discard()) {
    const absl::Status status = drain();
    matcher_.FinishDelivery(std::move(delivery), status);
    if (!status.ok()) CountError(peer);
    return status;
  }
  // Straight into the receiver's buffer when a receive is posted, or a piece at a time through
  // the scratch buffer to its consumer; the delivery says how long the receiver is willing to
  // wait and whether it has been aborted meanwhile.
  size_t read = 0;
  // A posted receive's own deadline bounds the read into its buffer; `limit` bounds the rest.
  const absl::Time deadline =
      delivery.deadline() == absl::InfiniteFuture() ? limit : delivery.deadline();
  auto cancelled = [&delivery] { return delivery.cancelled(); };
  absl::Status status;
  if (delivery.consuming()) {
    while (status.ok() && read < header.payload_bytes) {
      const size_t offset = read;
      const ByteSpan piece(conn.scratch.data(),
                           std::min<uint64_t>(header.payload_bytes - offset, conn.scratch.size()));
      status = conn.in->Read(piece, deadline, cancelled, &read);
      if (status.ok()) delivery.Consume(offset, piece);
    }
  } else {
    status = conn.in->Read(delivery.buffer(), deadline, cancelled, &read);
  }
  left -= read;
  if (status.ok()) {
    matcher_.FinishDelivery(std::move(delivery), absl::OkStatus());
    return absl::OkStatus();
  }
  if (absl::IsDeadlineExceeded(status) || absl::IsCancelled(status)) {
    // The receiver gave up, not the link: release it now, then skip the rest of the message.
    matcher_.FinishDelivery(std::move(delivery), absl::IsDeadlineExceeded(status)
                                                     ? RecvDeadlineExceeded(peer, header.tag)
                                                     : absl::CancelledError("receive cancelled"));
    const absl::Status drained = drain();
    if (!drained.ok()) CountError(peer);
    return drained;
  }
  CountError(peer);
  matcher_.FinishDelivery(std::move(delivery),
                          absl::UnavailableError(absl::StrCat("lost connection from peer ", peer,
                                                              ": ", status.message())));
  return status;
}

// A receive posted on the TCP endpoint. A small one is read by the thread that waits for it
// (ReadForReceive), which is told through its eventfd when the message arrives over another
// connection instead; waiting for a large one tells the reader thread not to linger.
class TcpEndpoint::Recv final : public PostedRecv {
 public:
  Recv(TcpEndpoint* endpoint, std::string peer, absl::Time deadline, bool read_for_receive)
      : endpoint_(endpoint),
        peer_(std::move(peer)),
        deadline_(deadline),
        read_for_receive_(read_for_receive) {}

  absl::Status Wait() override {
    if (!inner_->Test()) {
      if (read_for_receive_) {
        endpoint_->ReadForReceive(*this, /*briefly=*/false);
      } else {
        endpoint_->WantReader(peer_);
      }
    }
    return inner_->Wait();
  }
  bool Test() override { return inner_->Test(); }
  bool WaitBriefly() override {
    if (!inner_->Test() && read_for_receive_) endpoint_->ReadForReceive(*this, /*briefly=*/true);
    return inner_->Test();
  }

 private:
  friend class TcpEndpoint;
  // Runs in the delivering thread once the message is in place.
  void Arrived() {
    arrived_.store(true, std::memory_order_release);
    const int event = event_.load(std::memory_order_acquire);
    if (event >= 0 && event != ThreadEvent()) Signal(event);
  }

  TcpEndpoint* const endpoint_;
  const std::string peer_;
  const absl::Time deadline_;
  const bool read_for_receive_;
  std::atomic<int> event_{-1};        // the eventfd of the thread reading for this receive
  std::atomic<bool> arrived_{false};  // the message is in place (set before it completes)
  // The matcher's. Declared last, so destroyed first: its destructor may wait for a writer whose
  // arrival callback still uses event_.
  std::unique_ptr<PostedRecv> inner_;
};

std::unique_ptr<PostedRecv> TcpEndpoint::PostRecv(const std::string& peer, const Tag& tag,
                                                  ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) {
  return PostWith(peer, deadline, data.size(), std::move(on_arrival), [&](ArrivalCallback arrived) {
    return matcher_.Post(peer, tag, data, deadline, std::move(arrived));
  });
}

std::unique_ptr<PostedRecv> TcpEndpoint::PostConsume(const std::string& peer, const Tag& tag,
                                                     size_t length, absl::Time deadline,
                                                     PieceConsumer consume) {
  return PostWith(peer, deadline, length, nullptr, [&](ArrivalCallback arrived) {
    return matcher_.PostConsume(peer, tag, length, deadline, std::move(consume),
                                std::move(arrived));
  });
}

std::unique_ptr<PostedRecv> TcpEndpoint::PostWith(
    const std::string& peer, absl::Time deadline, size_t length, ArrivalCallback on_arrival,
    absl::FunctionRef<std::unique_ptr<PostedRecv>(ArrivalCallback)> post) {
  const bool read_for_receive = length <= kReadForReceiveMaxBytes;
  auto recv = std::make_unique<Recv>(this, peer, deadline, read_for_receive);
  if (!read_for_receive) {
    recv->inner_ = post(std::move(on_arrival));
    // Nobody reads for this receive but the reader thread, so it must not linger from now on:
    // the thread that posted it may first send a large message to the same peer, and the two
    // sends can only both finish once both sides read (an exchange).
    WantReader(peer);
    return recv;
  }
  recv->inner_ = post([recv = recv.get(), on_arrival = std::move(on_arrival)]() mutable {
    if (on_arrival) std::move(on_arrival)();
    recv->Arrived();
  });
  return recv;
}

std::shared_ptr<TcpEndpoint::Conn> TcpEndpoint::ConnFrom(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = out_.find(peer);
  if (it == out_.end()) return nullptr;
  return PreferredLocked(peer, it->second, [](const Conn& conn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !conn.connecting && !conn.finished && conn.kick.valid();  // mu_ is held
  });
}

std::shared_ptr<TcpEndpoint::Conn> TcpEndpoint::PreferredLocked(
    const std::string& peer, const std::vector<std::shared_ptr<Conn>>& conns,
    absl::FunctionRef<bool(const Conn&)> usable) const {
  const bool prefer_ours = address_ < peer;
  std::shared_ptr<Conn> found;
  for (const auto& conn : conns) {
    if (!usable(*conn)) continue;
    if (conn->ours == prefer_ours) return conn;
    if (found == nullptr) found = conn;
  }
  return found;
}

void TcpEndpoint::WantReader(const std::string& peer) {
  const std::shared_ptr<Conn> conn = ConnFrom(peer);
  if (conn == nullptr) return;
  absl::MutexLock lock(&conn->read_mu);
  conn->wanted = true;
}

void TcpEndpoint::StopLingering() {
  std::vector<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [peer, list] : out_) conns.insert(conns.end(), list.begin(), list.end());
  }
  for (const std::shared_ptr<Conn>& conn : conns) {
    absl::MutexLock lock(&conn->read_mu);
    conn->wanted = true;
  }
}

void TcpEndpoint::ReadForReceive(Recv& recv, bool briefly) {
  const std::shared_ptr<Conn> conn = ConnFrom(recv.peer_);
  const int event = ThreadEvent();
  if (conn == nullptr || event < 0) return;
  recv.event_.store(event, std::memory_order_release);
  const absl::Time begin = absl::Now();
  bool mine = false;
  {
    absl::MutexLock lock(&conn->read_mu);
    ++conn->readers_waiting;
    if (conn->reader_polling) Signal(conn->kick.get());
    auto free = [&conn, &recv]() ABSL_SHARED_LOCKS_REQUIRED(conn->read_mu) {
      return !conn->reading || !conn->ended.ok() || recv.arrived_.load(std::memory_order_acquire);
    };
    // Whoever reads now may deliver this very receive (it touches read_mu after every frame, so
    // the condition is looked at again); a failure of the receive shows within a slice.
    const absl::Time turn_until =
        briefly ? std::min(recv.deadline_, begin + receive_spin_) : recv.deadline_;
    for (absl::Time now = begin; !free() && now < turn_until && !recv.inner_->Test();
         now = absl::Now()) {
      conn->read_mu.AwaitWithTimeout(absl::Condition(&free),
                                     std::min(kReadForReceiveSlice, turn_until - now));
    }
    mine = !conn->reading && conn->ended.ok();
    if (mine) conn->reading = true;
  }
  absl::Status ended;
  bool left_to_reader = false;
  if (mine) {
    // A brief wait lasts the spin from its start, the wait for the turn included.
    const absl::Time until =
        briefly ? std::min(recv.deadline_, begin + conn->read_spin.next()) : recv.deadline_;
    while (!recv.inner_->Test()) {
      const absl::Time now = absl::Now();
      if (now >= until) break;
      if (!conn->pending.has_value() && !conn->in->buffered()) {
        const Readable readable = AwaitFrame(*conn, recv, event, until);
        if (readable == Readable::kPollFailed) break;  // leave it to the reader thread
        if (readable == Readable::kNotYet) continue;
        conn->in->NoteReadable();
      }
      absl::StatusOr<FrameRead> frame = ReadFrame(*conn, /*for_receive=*/true, recv.deadline_);
      if (!frame.ok()) {
        ended = frame.status();
        break;
      }
      if (*frame == FrameRead::kLeftToReader) {
        left_to_reader = true;
        break;
      }
      // Threads waiting for their turn re-check whether this frame was theirs.
      { absl::MutexLock lock(&conn->read_mu); }
    }
  }
  {
    absl::MutexLock lock(&conn->read_mu);
    if (mine) conn->reading = false;
    --conn->readers_waiting;
    conn->last_read_for_receive = absl::Now();
    if (left_to_reader) conn->wanted = true;
    if (!ended.ok() && conn->ended.ok()) conn->ended = ended;
  }
  recv.event_.store(-1, std::memory_order_release);
}

TcpEndpoint::Readable TcpEndpoint::AwaitFrame(Conn& conn, Recv& recv, int event, absl::Time until) {
  const int fd = conn.fd.get();
  const absl::Time start = absl::Now();
  // A thread that sleeps in poll() is woken by the kernel, which on a busy or virtual machine can
  // take longer than the message itself; spinning (yielding) keeps it on its core instead.
  pollfd peek{fd, POLLIN, 0};
  bool readable = false;
  // Each look is a system call, so it yields from the first (an error shows in ReadFrame).
  auto arrived_or_readable = [&] {
    if (recv.arrived_.load(std::memory_order_acquire)) return true;
    readable = poll(&peek, 1, 0) != 0;
    return readable;
  };
  const bool spun = SpinUntil(std::min(conn.read_spin.next(), until - start),
                              /*busy=*/absl::ZeroDuration(), arrived_or_readable);
  if (spun) {
    if (readable) conn.read_spin.Record(absl::Now() - start);
    return readable ? Readable::kYes : Readable::kNotYet;
  }
  std::array<pollfd, 2> fds{pollfd{fd, POLLIN, 0}, pollfd{event, POLLIN, 0}};
  const absl::Duration wait =
      std::clamp(until - absl::Now(), absl::ZeroDuration(), kReadForReceiveSlice);
  const int n =
      poll(fds.data(), fds.size(),
           static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)))));
  if (n < 0 && errno != EINTR) return Readable::kPollFailed;
  if (fds[1].revents != 0) Drain(event);
  if (n <= 0 || fds[0].revents == 0) {
    // The message came another way, or not within the spin (the event may be left over from an
    // earlier receive): in the latter case, stop spinning.
    if (!recv.arrived_.load(std::memory_order_acquire)) conn.read_spin.RecordOutlasted();
    return Readable::kNotYet;
  }
  conn.read_spin.Record(absl::Now() - start);
  return Readable::kYes;
}

absl::StatusOr<std::string> TcpEndpoint::ReadHello(int fd) {
  const absl::Time deadline = absl::Now() + kHelloTimeout;
  std::array<std::byte, kFrameHeaderBytes> buffer;
  size_t read = 0;
  BATON_RETURN_IF_ERROR(ReadFull(fd, buffer, deadline, &read));
  BATON_ASSIGN_OR_RETURN(const FrameHeader header, DecodeFrameHeader(buffer));
  if (header.type != FrameType::kHello || header.payload_bytes == 0) {
    return absl::DataLossError("the first frame is not a hello with the sender's address");
  }
  std::string peer(header.payload_bytes, '\0');
  BATON_RETURN_IF_ERROR(
      ReadFull(fd, std::as_writable_bytes(std::span(peer.data(), peer.size())), deadline, &read));
  return peer;
}

absl::Status TcpEndpoint::Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                               absl::Time deadline) {
  const OutMessage message{tag, data};
  return SendAll(peer, std::span(&message, 1), deadline);
}

absl::Status TcpEndpoint::SendAll(const std::string& peer, std::span<const OutMessage> messages,
                                  absl::Time deadline) {
  if (messages.empty()) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckSendAll(peer, messages));
  return SendFrames(peer, FrameType::kData, messages, deadline);
}

absl::Status TcpEndpoint::SendFrames(const std::string& peer, FrameType type,
                                     std::span<const OutMessage> messages, absl::Time deadline) {
  const Tag& tag = messages.back().tag;  // the one errors name
  size_t total = 0;
  for (const OutMessage& message : messages) {
    if (message.data.size() > kMaxFramePayloadBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("message of ", message.data.size(), " bytes to peer ", peer, " (",
                       TagToString(message.tag), ") exceeds the frame limit of ",
                       kMaxFramePayloadBytes, " bytes"));
    }
    total += kFrameHeaderBytes + message.data.size();
  }
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<Conn> stream, AcquireStream(peer, tag, total, deadline));
  const int fd = stream->fd.get();
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    closed = stream->finished;
  }
  if (closed) {
    // The peer went away since our last send (the connection's reader saw it go); what we sent
    // last may not have arrived, so this is an error rather than a silent reconnect. The next
    // Send connects afresh. (Until the reader has seen the end, a Send may still succeed.)
    ReleaseStream(peer, stream, /*healthy=*/false);
    CountError(peer);
    return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                               TagToString(tag), "): peer closed the connection"));
  }
  // Every frame's header and payload, in one write; on the stack for the usual one or two frames.
  using Header = std::array<std::byte, kFrameHeaderBytes>;
  constexpr size_t kOnStack = 2;
  std::array<Header, kOnStack> stack_headers;
  std::array<iovec, 2 * kOnStack> stack_iov;
  std::vector<Header> heap_headers;
  std::vector<iovec> heap_iov;
  std::span<Header> headers(stack_headers.data(), std::min(messages.size(), kOnStack));
  std::span<iovec> iov(stack_iov.data(), 2 * headers.size());
  if (messages.size() > kOnStack) {
    heap_headers.resize(messages.size());
    heap_iov.resize(2 * messages.size());
    headers = heap_headers;
    iov = heap_iov;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    EncodeFrameHeader(FrameHeader{type, messages[i].tag, messages[i].data.size()}, headers[i]);
    iov[2 * i] = iovec{headers[i].data(), headers[i].size()};
    iov[2 * i + 1] =
        iovec{const_cast<std::byte*>(messages[i].data.data()), messages[i].data.size()};
  }
  size_t written = 0;
  const absl::Status status = WriteFull(
      fd, iov, deadline, [this, &tag] { return SendCancelled(tag.comm); },
      [this] { StopLingering(); }, &written);
  // A frame cut short leaves the stream unusable, and so does a socket error; a frame that was
  // never started because the deadline passed or the communicator was aborted does not.
  ReleaseStream(peer, stream,
                status.ok() || (written == 0 &&
                                (absl::IsDeadlineExceeded(status) || absl::IsCancelled(status))));
  {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      if (type != FrameType::kData) return absl::OkStatus();
      for (const OutMessage& message : messages) CountSendLocked(peer, message.data.size(), true);
      return absl::OkStatus();
    }
    CountSendLocked(peer, 0, false);
    if (absl::IsCancelled(status)) {
      absl::Status blocking = SendBlockingErrorLocked(tag.comm);
      if (!blocking.ok()) return blocking;
    }
  }
  const std::string context = absl::StrCat("send to peer ", peer, " (", TagToString(tag), ")");
  if (absl::IsDeadlineExceeded(status)) {
    return absl::DeadlineExceededError(
        absl::StrCat(context, " timed out after ", written, " of ", total, " bytes"));
  }
  return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                             TagToString(tag), "): ", status.message()));
}

absl::StatusOr<absl::Duration> TcpEndpoint::RoundTrip(const std::string& peer,
                                                      absl::Time deadline) {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&pings_mu_);
    id = next_ping_++;
    pings_[id] = absl::InfinitePast();
  }
  // The identifier is opaque to the peer, which echoes its bytes: host byte order will do.
  std::array<std::byte, kPingPayloadBytes> payload;
  static_assert(sizeof(id) == kPingPayloadBytes);
  std::memcpy(payload.data(), &id, sizeof(id));
  const OutMessage ping{Tag{}, payload};
  const absl::Time start = absl::Now();
  const absl::Status sent = SendFrames(peer, FrameType::kPing, std::span(&ping, 1), deadline);
  absl::MutexLock lock(&pings_mu_);
  auto answered = [this, id]() ABSL_SHARED_LOCKS_REQUIRED(pings_mu_) {
    return pings_stopping_ || pings_[id] != absl::InfinitePast();
  };
  if (sent.ok()) pings_mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
  const absl::Time pong = pings_[id];
  pings_.erase(id);
  if (!sent.ok()) return sent;
  if (pong != absl::InfinitePast()) return pong - start;
  if (pings_stopping_) return ShutDownError();
  return absl::DeadlineExceededError(absl::StrCat("no answer from peer ", peer,
                                                  " to a ping within ",
                                                  absl::FormatDuration(absl::Now() - start)));
}

absl::Status TcpEndpoint::ReadPingOrPong(Conn& conn, const FrameHeader& header, absl::Time limit) {
  std::array<std::byte, kPingPayloadBytes> payload;
  size_t read = 0;
  if (absl::Status status = conn.in->Read(payload, limit, &read); !status.ok()) {
    CountError(conn.peer);
    return status;
  }
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&pings_mu_);
  if (header.type == FrameType::kPing) {
    // Bounded, whatever a peer sends: a ping beyond it goes unanswered (its sender times out).
    constexpr size_t kMaxPongsDue = 64;
    if (!pings_stopping_ && pongs_due_.size() < kMaxPongsDue) {
      pongs_due_.emplace_back(conn.peer, payload);
    }
    return absl::OkStatus();
  }
  uint64_t id = 0;
  std::memcpy(&id, payload.data(), sizeof(id));
  // A pong for a ping that gave up is dropped.
  if (auto it = pings_.find(id); it != pings_.end()) it->second = now;
  return absl::OkStatus();
}

void TcpEndpoint::PongLoop() {
  // Long enough to wait behind bulk data on the connection: a pong cut short would break it.
  constexpr absl::Duration kPongTimeout = absl::Seconds(30);
  absl::MutexLock lock(&pings_mu_);
  while (true) {
    auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(pings_mu_) {
      return pings_stopping_ || !pongs_due_.empty();
    };
    pings_mu_.Await(absl::Condition(&due));
    if (pings_stopping_) return;
    auto [peer, payload] = std::move(pongs_due_.front());
    pongs_due_.pop_front();
    pings_mu_.Unlock();
    const OutMessage pong{Tag{}, payload};
    const absl::Status sent =
        SendFrames(peer, FrameType::kPong, std::span(&pong, 1), absl::Now() + kPongTimeout);
    if (!sent.ok()) {
      spdlog::debug("tcp endpoint {}: no pong to peer {}: {}", address_, peer, sent.ToString());
    }
    pings_mu_.Lock();
  }
}

absl::StatusOr<std::shared_ptr<TcpEndpoint::Conn>> TcpEndpoint::AcquireStream(
    const std::string& peer, const Tag& tag, size_t bytes, absl::Time deadline) {
  const bool striped = bytes >= kStripeMinBytes && streams_per_peer_ > 1;
  std::shared_ptr<Conn> stream;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this, &peer, &tag]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!SendBlockingErrorLocked(tag.comm).ok()) return true;
      auto it = out_.find(peer);
      if (it == out_.end() || it->second.size() < streams_per_peer_) return true;
      return std::any_of(it->second.begin(), it->second.end(),
                         [](const auto& s) { return !s->busy; });
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("send to peer ", peer, " (", TagToString(tag),
                                                      ") timed out waiting for a free connection"));
    }
    BATON_RETURN_IF_ERROR(SendBlockingErrorLocked(tag.comm));
    std::vector<std::shared_ptr<Conn>>& streams = out_[peer];
    std::shared_ptr<Conn> idle;
    if (!striped) {
      idle = PreferredLocked(peer, streams, [](const Conn& conn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !conn.busy;  // mu_ is held
      });
    } else if (streams.size() >= streams_per_peer_) {
      // The next idle one in turn after the last striped send's.
      size_t& turn = stripe_turn_[peer];
      for (size_t k = 0; k < streams.size() && idle == nullptr; ++k) {
        const std::shared_ptr<Conn>& candidate = streams[(turn + k) % streams.size()];
        if (!candidate->busy) {
          idle = candidate;
          turn = (turn + k + 1) % streams.size();
        }
      }
    }
    if (idle != nullptr) {
      idle->busy = true;
      return idle;
    }
    stream = std::make_shared<Conn>();  // busy and connecting: other Sends wait for it
    stream->peer = peer;
    stream->ours = true;
    stream->connecting = true;
    stream->busy = true;
    streams.push_back(stream);
  }
  ReapFinishedReaders();
  absl::StatusOr<FileDescriptor> fd = ConnectAndIntroduce(peer, tag.comm, deadline);
  absl::MutexLock lock(&mu_);
  if (fd.ok() && shutting_down_) fd = ShutDownError();  // too late to start a reader
  if (!fd.ok()) {
    auto it = out_.find(peer);
    if (it != out_.end()) {
      std::erase(it->second, stream);
      if (it->second.empty()) out_.erase(it);
    }
    CountSendLocked(peer, 0, false);
    absl::Status blocking = SendBlockingErrorLocked(tag.comm);
    if (!blocking.ok()) return blocking;
    return absl::UnavailableError(
        absl::StrCat("send to peer ", peer, " (", TagToString(tag), "): ", fd.status().message()));
  }
  stream->fd = *std::move(fd);
  PrepareReadSide(*stream);
  stream->connecting = false;
  StartReaderLocked(stream);
  return stream;
}

absl::StatusOr<FileDescriptor> TcpEndpoint::ConnectAndIntroduce(const std::string& peer,
                                                                uint64_t comm,
                                                                absl::Time deadline) {
  auto cancelled = [this, comm] { return SendCancelled(comm); };
  BATON_ASSIGN_OR_RETURN(FileDescriptor fd, ConnectWithRetry(peer, deadline, cancelled));
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(FrameHeader{FrameType::kHello, Tag{}, address_.size()}, header);
  std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                           iovec{const_cast<char*>(address_.data()), address_.size()}};
  size_t written = 0;
  BATON_RETURN_IF_ERROR(
      Annotate(WriteFull(fd.get(), iov, deadline, cancelled, &written), "sending hello"));
  return fd;
}

void TcpEndpoint::ReleaseStream(const std::string& peer, const std::shared_ptr<Conn>& stream,
                                bool healthy) {
  absl::MutexLock lock(&mu_);
  stream->busy = false;
  if (healthy) return;
  // Keep the broken connection's retransmits: the counter must not go backwards.
  links_[peer].retransmits += TcpRetransmits(stream->fd.get());
  shutdown(stream->fd.get(), SHUT_RDWR);
  auto it = out_.find(peer);
  if (it == out_.end()) return;
  std::erase(it->second, stream);
  if (it->second.empty()) out_.erase(it);
}

void TcpEndpoint::Abort(uint64_t comm, const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    aborted_[comm] = reason.ok() ? absl::CancelledError("communicator aborted") : reason;
  }
  matcher_.Abort(comm, reason);
}

void TcpEndpoint::Forget(uint64_t comm) {
  {
    absl::MutexLock lock(&mu_);
    aborted_.erase(comm);
  }
  matcher_.Forget(comm);
}

std::vector<LinkStats> TcpEndpoint::Stats() const {
  absl::flat_hash_map<std::string, LinkStats> links = matcher_.RecvLinkStats();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [peer, tx] : links_) {
      LinkStats& link = links[peer];
      link.peer = peer;
      link.tx_bytes = tx.tx_bytes;
      link.tx_messages = tx.tx_messages;
      link.errors = tx.errors;
      link.retransmits = tx.retransmits;
    }
    for (const auto& [peer, streams] : out_) {
      LinkStats& link = links[peer];
      link.peer = peer;
      for (const auto& stream : streams) {
        if (!stream->connecting) link.retransmits += TcpRetransmits(stream->fd.get());
      }
    }
  }
  std::vector<LinkStats> result;
  result.reserve(links.size());
  for (auto& [peer, link] : links) result.push_back(std::move(link));
  std::sort(result.begin(), result.end(),
            [](const LinkStats& a, const LinkStats& b) { return a.peer < b.peer; });
  return result;
}

absl::Status TcpEndpoint::SendBlockingErrorLocked(uint64_t comm) const {
  if (shutting_down_) return ShutDownError();
  if (auto it = aborted_.find(comm); it != aborted_.end()) return it->second;
  return absl::OkStatus();
}

bool TcpEndpoint::SendCancelled(uint64_t comm) const {
  absl::MutexLock lock(&mu_);
  return !SendBlockingErrorLocked(comm).ok();
}

void TcpEndpoint::CountSendLocked(const std::string& peer, uint64_t length, bool ok) {
  LinkStats& link = links_[peer];
  link.peer = peer;
  if (ok) {
    link.tx_bytes += length + kFrameHeaderBytes;
    ++link.tx_messages;
  } else {
    ++link.errors;
  }
}

void TcpEndpoint::CountError(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  LinkStats& link = links_[peer];
  link.peer = peer;
  ++link.errors;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Endpoint>> NewTcpEndpoint(const TcpOptions& options) {
  BATON_ASSIGN_OR_RETURN(HostPort listen_address, SplitHostPort(options.listen_address));
  BATON_ASSIGN_OR_RETURN(Listener listener, ListenTcp(listen_address));
  FileDescriptor wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return BATON_ERRNO_STATUS("eventfd");
  const std::string& host =
      options.advertise_host.empty() ? listen_address.host : options.advertise_host;
  const std::string address = JoinHostPort(host, listener.port);
  if (options.receive_spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("receive_spin must not be negative");
  }
  if (options.reader_linger < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reader_linger must not be negative");
  }
  if (options.streams_per_peer < 1 || options.streams_per_peer > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams_per_peer must be between 1 and 16, got ", options.streams_per_peer));
  }
  auto endpoint =
      std::make_unique<TcpEndpoint>(std::move(listener), std::move(wake), address, options);
  endpoint->Start();
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

}  // namespace baton::transport
