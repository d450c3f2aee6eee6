#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/payload_reader.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

void TcpEndpoint::ReadLoop(const std::shared_ptr<Conn>& conn, bool accepted) {
  const int fd = conn->fd.get();
  if (accepted) {
    absl::StatusOr<Admitted> admitted = AdmitPeer(fd);
    absl::MutexLock lock(&mu_);
    EndHandshakeLocked(*conn);
    if (admitted.ok() && connections_[admitted->peer] >= max_connections_per_peer_) {
      admitted = absl::ResourceExhaustedError(
          absl::StrCat("peer ", admitted->peer, " already holds ", max_connections_per_peer_,
                       " connections with this endpoint"));
    }
    if (!admitted.ok()) {
      shutdown(fd, SHUT_RDWR);
      if (!shutting_down_) NoteRefused(admitted.status().ToString());
      conn->finished = true;
      return;
    }
    conn->peer = std::move(admitted->peer);
    if (admitted->sealed.has_value()) {
      conn->seal.emplace(std::move(admitted->sealed->seal));
      conn->open.emplace(std::move(admitted->sealed->open));
    }
    // Only now: a connection that never proves itself costs no buffer and no eventfd.
    PrepareReadSide(*conn);
    ++connections_[conn->peer];
    matcher_.PeerConnected(conn->peer);
    conn->first_grant = receive_credits_.Attach(conn->peer);
  }
  const std::string& peer = conn->peer;  // immutable from here on
  if (accepted) {
    // The first frame on the connection from this end, before any Send may use it: the epoch
    // of the credit it carries tells the peer which credit its data on it is charged to. A write
    // that fails shows in the read below.
    (void)WriteFirstGrant(*conn, absl::Now() + handshake_timeout_);
    absl::MutexLock lock(&mu_);
    // Sends to the peer may use it from now on.
    out_[peer].push_back(conn);
  }
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
        peer_error_log_.Log(spdlog::level::warn,
                            "tcp endpoint {}: poll on the connection from peer {} failed: errno {}",
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
  receive_credits_.Detach(peer);
  // Under mu_, so that a reconnection's PeerConnected cannot be overtaken by this PeerLost.
  if (--connections_[peer] == 0) {
    connections_.erase(peer);
    const absl::Status lost = absl::UnavailableError(
        absl::StrCat("lost connection from peer ", peer, ": ", ended.message()));
    send_credits_.Retire(peer);
    matcher_.PeerLost(peer, lost);
    WritesLost(peer, lost);
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
    if (idle >= reader_linger_ || conn.wanted ||
        credit_waiters_.load(std::memory_order_acquire) > 0) {
      break;
    }
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
    if (decoded.ok() &&
        (decoded->type == FrameType::kHello || decoded->type == FrameType::kChallenge ||
         decoded->type == FrameType::kProof)) {
      decoded = absl::DataLossError("unexpected handshake frame on an introduced connection");
    } else if (decoded.ok()) {
      // Nobody may slip a frame of their own into a sealed or authenticated connection.
      if (absl::Status fits = FitsConnection(*decoded, conn.open ? &*conn.open : nullptr);
          !fits.ok()) {
        decoded = fits;
      }
    }
    if (!decoded.ok()) {
      CountError(peer);
      // The stream is out of step or someone writes into it: what follows cannot be trusted.
      const absl::Status error = absl::DataLossError(
          absl::StrCat("a frame from peer ", peer, " is not valid: ", decoded.status().message()));
      DataLostFrom(peer, error);
      return error;
    }
    header = *decoded;
  }
  if (header.type == FrameType::kWriteAck) {
    BATON_RETURN_IF_ERROR(ReadWriteAck(conn, header, limit));
    return FrameRead::kDone;
  }
  if (header.type == FrameType::kWrite) {
    // Into a region, never a receive: the reader thread's (a thread reading for its receive
    // would have to read both of the write's frames within its short limit).
    if (for_receive) {
      conn.pending = header;
      return FrameRead::kLeftToReader;
    }
    BATON_RETURN_IF_ERROR(ReadWrite(conn, header, limit));
    return FrameRead::kDone;
  }
  if (header.type == FrameType::kCredit || header.type == FrameType::kClearToSend) {
    BATON_RETURN_IF_ERROR(ReadCreditFrame(conn, header, limit));
    return FrameRead::kDone;
  }
  if (header.type != FrameType::kData) {
    BATON_RETURN_IF_ERROR(ReadPingOrPong(conn, header, limit));
    return FrameRead::kDone;
  }
  if (for_receive && header.payload_bytes > kReadForReceiveMaxBytes) {
    conn.pending = header;
    return FrameRead::kLeftToReader;
  }
  // Never waits: the sender's credit bounds what may be kept unexpected (flow_control.h).
  BATON_RETURN_IF_ERROR(ReadPayload(
      conn, header, matcher_.BeginDelivery(peer, header.tag, header.payload_bytes), limit));
  return FrameRead::kDone;
}

absl::Status TcpEndpoint::ReadControlPayload(Conn& conn, const FrameHeader& header, ByteSpan into,
                                             absl::Time limit) {
  PayloadReader body(*conn.in, header, conn.open.has_value() ? &*conn.open : nullptr);
  size_t read = 0;
  absl::Status status = body.Read(into, limit, nullptr, &read);
  if (status.ok()) status = body.Finish(limit, nullptr);
  if (!body.intact()) return IntegrityFailure(conn.peer, header);
  if (!status.ok()) CountError(conn.peer);
  return status;
}

absl::Status TcpEndpoint::ReadPayload(Conn& conn, const FrameHeader& header,
                                      ReceiveMatcher::Delivery delivery, absl::Time limit) {
  const std::string& peer = conn.peer;
  PayloadReader body(*conn.in, header, conn.open.has_value() ? &*conn.open : nullptr);
  // What a read that failed, or finished the payload, means for the link: a payload that is not
  // what was sent (the stream can no longer be trusted, and the error ends the connection), or
  // a broken link.
  auto verdict = [&](absl::Status status) {
    if (!body.intact()) return IntegrityFailure(peer, header);
    if (!status.ok()) CountError(peer);
    return status;
  };
  // Consumes the rest of a payload nobody wants, and what follows it, to keep the stream in step.
  auto drain = [&] { return body.Skip(conn.scratch, limit); };

  if (delivery.violation()) {
    // The peer sent more than its credit: it does not follow the protocol, and what it sends
    // next may be dropped too, so its receives fail now rather than wait for it, and its
    // connections close (an honest peer never gets here).
    matcher_.FinishDelivery(std::move(delivery), absl::OkStatus());
    CountError(peer);
    absl::Status error = absl::DataLossError(
        absl::StrCat("peer ", peer, " sent a message (", TagToString(header.tag), ") of ",
                     header.payload_bytes, " bytes beyond the credit it was granted; dropped it"));
    DataLostFrom(peer, error);
    return error;
  }
  if (delivery.discard()) {
    // Nobody wanted it, but a link that corrupts data (or someone who alters it) is an error all
    // the same.
    absl::Status status = verdict(drain());
    matcher_.FinishDelivery(std::move(delivery), status);
    return status;
  }
  // Straight into the receiver's buffer when a receive is posted, or a piece at a time through
  // the scratch buffer to its consumer; the delivery says how long the receiver is willing to
  // wait and whether it has been aborted meanwhile.
  // A posted receive's own deadline bounds the read into its buffer; `limit` bounds the rest.
  const absl::Time deadline =
      delivery.deadline() == absl::InfiniteFuture() ? limit : delivery.deadline();
  auto cancelled_check = [&delivery] { return delivery.cancelled(); };
  const absl::FunctionRef<bool()> cancelled = cancelled_check;
  absl::Status status;
  if (delivery.consuming()) {
    // Each piece is whole sealed records, opened before the consumer gets them; a checksum is
    // only known at the end, and fails the receive then (tcp_transport.h).
    while (status.ok() && body.left() > 0) {
      const size_t offset = header.payload_bytes - body.left();
      const ByteSpan piece(conn.scratch.data(),
                           std::min<uint64_t>(body.left(), conn.scratch.size()));
      size_t read = 0;
      status = body.Read(piece, deadline, &cancelled, &read);
      if (status.ok()) delivery.Consume(offset, piece);
    }
  } else {
    size_t read = 0;
    status = body.Read(delivery.buffer(), deadline, &cancelled, &read);
  }
  if (status.ok()) status = body.Finish(deadline, &cancelled);
  if (!body.intact()) {
    status = IntegrityFailure(peer, header);
    matcher_.FinishDelivery(std::move(delivery), status);
    return status;
  }
  if (status.ok()) {
    matcher_.FinishDelivery(std::move(delivery), absl::OkStatus());
    return absl::OkStatus();
  }
  if (absl::IsDeadlineExceeded(status) || absl::IsCancelled(status)) {
    // The receiver gave up, not the link: release it now, then skip the rest of the message.
    matcher_.FinishDelivery(std::move(delivery), absl::IsDeadlineExceeded(status)
                                                     ? RecvDeadlineExceeded(peer, header.tag)
                                                     : absl::CancelledError("receive cancelled"));
    return verdict(drain());
  }
  CountError(peer);
  matcher_.FinishDelivery(std::move(delivery),
                          absl::UnavailableError(absl::StrCat("lost connection from peer ", peer,
                                                              ": ", status.message())));
  return status;
}

}  // namespace baton::transport::tcp
