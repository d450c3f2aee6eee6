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
  // The reader thread gives way to a thread that waits for a receive on the connection: it parks
  // the payload it is reading, and the waiting thread reads on.
  auto wanted = [&conn] { return conn->turn_wanted.load(std::memory_order_acquire) > 0; };
  const absl::FunctionRef<bool()> give_way = wanted;
  const ReadTurn turn{.give_way = &give_way};
  while (TakeReaderTurn(*conn)) {
    bool kicked = false;
    if (!conn->pending.has_value() && !conn->in->buffered()) {
      // A receive's payload parked half-read is looked at again by its deadline and every slice
      // (it may have been aborted), even if nothing more arrives.
      const bool receive_parked = conn->in_frame != nullptr &&
                                  conn->in_frame->delivery.has_value() &&
                                  !conn->in_frame->delivery->discard();
      const int timeout_ms =
          receive_parked
              ? ProgressEngine::PollTimeoutMs(std::min(
                    conn->in_frame->delivery->deadline() - absl::Now(), kReadForReceiveSlice))
              : -1;
      std::array<pollfd, 2> fds{pollfd{fd, POLLIN, 0}, pollfd{conn->kick.get(), POLLIN, 0}};
      const int n = poll(fds.data(), conn->kick.valid() ? 2 : 1, timeout_ms);
      const int poll_errno = errno;
      kicked = n > 0 && fds[1].revents != 0;
      if (kicked) ProgressEngine::Drain(conn->kick.get());
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
      kicked = kicked || (n == 0 && !receive_parked) || (n < 0 && poll_errno == EINTR);
    }
    absl::StatusOr<FrameRead> frame = kicked ? FrameRead::kDone : ReadFrame(*conn, turn);
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
    // Nobody takes the turn once the connection has ended; whoever holds it gives it back.
    conn->read_mu.Await(absl::Condition(
        +[](bool* reading) { return !*reading; }, &conn->reading));
    ended = conn->ended;
  }
  if (conn->in_frame != nullptr) {
    // A payload parked half-read: its receive fails with the connection.
    if (conn->in_frame->delivery.has_value()) {
      matcher_.FinishDelivery(std::move(*conn->in_frame->delivery),
                              absl::UnavailableError(absl::StrCat("lost connection from peer ",
                                                                  peer, ": ", ended.message())));
    }
    conn->in_frame.reset();
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
        answers_awaited_.load(std::memory_order_acquire) > 0) {
      break;
    }
    conn.read_mu.AwaitWithTimeout(absl::Condition(&stop_lingering), reader_linger_ - idle);
  }
  conn.wanted = false;
  conn.reading = true;
  conn.reader_polling = !conn.pending.has_value() && !conn.in->buffered();
  return true;
}

absl::StatusOr<TcpEndpoint::FrameRead> TcpEndpoint::ReadFrame(Conn& conn, const ReadTurn& turn) {
  if (conn.in_frame != nullptr) return ReadPayload(conn, turn);
  const std::string& peer = conn.peer;
  const bool for_receive = turn.for_receive;
  const absl::Time limit = turn.limit;
  FrameHeader header;
  if (conn.pending.has_value()) {
    header = *conn.pending;
    conn.pending.reset();
  } else {
    std::array<std::byte, kFrameHeaderBytes> buffer;
    size_t read = 0;
    if (absl::Status status = conn.in->Read(buffer, limit, &read); !status.ok()) {
      if (read == 0 && absl::IsDeadlineExceeded(status)) {
        return FrameRead::kNothing;  // nothing consumed: the stream is still in step
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
  // Never waits: the sender's credit bounds what may be kept unexpected (flow_control.h).
  ReceiveMatcher::Delivery delivery =
      matcher_.BeginDelivery(peer, header.tag, header.payload_bytes);
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
  conn.in_frame = std::make_unique<InFrame>(
      *conn.in, header, conn.open.has_value() ? &*conn.open : nullptr, std::move(delivery));
  return ReadPayload(conn, turn);
}

void TcpEndpoint::ReadWhileFull(Conn& conn, absl::Time deadline,
                                absl::FunctionRef<bool()> cancelled, SendReading& state) {
  // The other connections' reader threads read meanwhile: what the peer needs before it reads
  // this connection may come over another one (a ring).
  StopLingering(&conn);
  // Not introduced yet (only its reader thread reads it), or left to the reader thread.
  if (!conn.kick.valid() || state.done) return;
  {
    absl::MutexLock lock(&conn.read_mu);
    if (!state.wanting) {
      state.wanting = true;
      ++conn.readers_waiting;
      conn.turn_wanted.fetch_add(1, std::memory_order_release);
      if (conn.reader_polling) ProgressEngine::Signal(conn.kick.get());
    }
  }
  const int fd = conn.fd.get();
  while (!cancelled()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) return;
    if (!state.reading) {
      // Whoever reads it now (its reader thread, a waiting thread) gives the turn back soon: wait
      // a little for it, then look whether the socket has room meanwhile.
      absl::MutexLock lock(&conn.read_mu);
      auto free = [&conn]() ABSL_SHARED_LOCKS_REQUIRED(conn.read_mu) {
        return !conn.reading || !conn.ended.ok();
      };
      conn.read_mu.AwaitWithTimeout(absl::Condition(&free),
                                    std::min(deadline - now, absl::Milliseconds(1)));
      if (!conn.reading && conn.ended.ok()) state.reading = conn.reading = true;
    }
    const bool buffered = conn.pending.has_value() || conn.in->buffered();
    if (!state.reading || !buffered) {
      pollfd watch{fd, static_cast<short>(POLLOUT | (state.reading ? POLLIN : 0)), 0};
      // Without the turn, only a look (the loop waits for the turn above).
      const absl::Duration wait = state.reading
                                      ? std::min(deadline - absl::Now(), kReadForReceiveSlice)
                                      : absl::ZeroDuration();
      const int n = poll(&watch, 1, ProgressEngine::PollTimeoutMs(wait));
      if (n < 0 && errno != EINTR) return;  // the write reports what is wrong
      if (n <= 0) continue;
      // Room, or an error the write reports.
      if ((watch.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) != 0) return;
      if (!state.reading) continue;
      conn.in->NoteReadable();
    }
    // Whatever has arrived, without waiting for more of a payload.
    const ReadTurn turn{.for_receive = true, .park = absl::Now(), .limit = deadline};
    absl::StatusOr<FrameRead> frame = ReadFrame(conn, turn);
    absl::MutexLock lock(&conn.read_mu);  // threads waiting for their turn look again
    if (!frame.ok() || *frame == FrameRead::kLeftToReader) {
      // The connection ended, or the next frame is the reader thread's: this send reads no more
      // (and no longer keeps the reader thread from its turn).
      if (!frame.ok() && conn.ended.ok()) conn.ended = frame.status();
      if (frame.ok()) conn.wanted = true;
      conn.reading = false;
      --conn.readers_waiting;
      conn.turn_wanted.fetch_sub(1, std::memory_order_release);
      state = SendReading{.done = true};
      return;
    }
  }
}

void TcpEndpoint::ReleaseTurnAfterSend(Conn& conn, const SendReading& state) {
  if (!state.wanting) return;
  absl::MutexLock lock(&conn.read_mu);
  --conn.readers_waiting;
  conn.turn_wanted.fetch_sub(1, std::memory_order_release);
  if (!state.reading) return;
  conn.reading = false;
  // The reader thread lingers, as after a thread that read for its receive: the sender is about to
  // wait for its own receive, likely the payload parked here, and reads on itself.
  conn.last_read_for_receive = absl::Now();
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

absl::StatusOr<TcpEndpoint::FrameRead> TcpEndpoint::ReadPayload(Conn& conn, const ReadTurn& turn) {
  InFrame& frame = *conn.in_frame;
  const std::string& peer = conn.peer;
  const FrameHeader& header = frame.header;
  PayloadReader& body = frame.body;
  // Ends the frame: its delivery, if it still has one, gets `delivered`.
  auto finish = [&](const absl::Status& delivered) {
    if (frame.delivery.has_value()) matcher_.FinishDelivery(std::move(*frame.delivery), delivered);
    conn.in_frame.reset();
  };
  // Whether the reading stopped for the receiver (it was aborted, or its deadline passed) rather
  // than for the turn; a discarded payload has no receiver.
  auto receiving = [&] { return frame.delivery.has_value() && !frame.delivery->discard(); };
  auto receiver_cancelled = [&] { return receiving() && frame.delivery->cancelled(); };
  auto stop_check = [&] {
    return receiver_cancelled() || (turn.give_way != nullptr && (*turn.give_way)());
  };
  const absl::FunctionRef<bool()> stop = stop_check;
  while (true) {
    // Straight into the receiver's buffer, or a piece at a time through the scratch buffer to its
    // consumer, or (nobody wants it) through the scratch buffer to be dropped, so that the
    // stream stays in step.
    const absl::Time deadline =
        receiving() ? std::min(turn.park, frame.delivery->deadline()) : turn.park;
    absl::Status status;
    if (!receiving()) {
      while (status.ok() && body.left() > 0) {
        size_t read = 0;
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(body.left(), kPieceBytes));
        status = body.Read(ByteSpan(conn.scratch).first(chunk), deadline, &stop, &read);
      }
    } else if (frame.delivery->consuming()) {
      // Each piece is whole sealed records, opened before the consumer gets them; a checksum is
      // only known at the end, and fails the receive then (tcp_transport.h).
      while (status.ok() && (body.left() > 0 || frame.piece_filled > 0)) {
        const ByteSpan piece(conn.scratch.data(),
                             std::min<uint64_t>(body.left() + frame.piece_filled, kPieceBytes));
        size_t read = 0;
        status = body.Read(piece.subspan(frame.piece_filled), deadline, &stop, &read);
        frame.piece_filled += read;
        if (!status.ok()) break;
        const size_t offset = header.payload_bytes - body.left() - frame.piece_filled;
        frame.delivery->Consume(offset, piece);
        frame.piece_filled = 0;
      }
    } else {
      size_t read = 0;
      const ByteSpan buffer = frame.delivery->buffer();
      status =
          body.Read(buffer.subspan(header.payload_bytes - body.left()), deadline, &stop, &read);
    }
    if (status.ok()) status = body.Finish(deadline, &stop);
    if (!body.intact()) {
      // The payload is not what was sent (or someone alters the stream): the error ends the
      // connection. A link that corrupts data is an error even where nobody wanted the data.
      status = IntegrityFailure(peer, header);
      finish(status);
      return status;
    }
    if (status.ok()) {
      finish(absl::OkStatus());
      return FrameRead::kDone;
    }
    const bool timed_out = absl::IsDeadlineExceeded(status);
    if (!timed_out && !absl::IsCancelled(status)) {
      CountError(peer);
      finish(absl::UnavailableError(
          absl::StrCat("lost connection from peer ", peer, ": ", status.message())));
      return status;
    }
    if (receiver_cancelled() ||
        (timed_out && receiving() && absl::Now() >= frame.delivery->deadline())) {
      // The receiver gave up, not the link: release it now, then drop the rest of the message.
      matcher_.FinishDelivery(std::move(*frame.delivery),
                              timed_out ? RecvDeadlineExceeded(peer, header.tag)
                                        : absl::CancelledError("receive cancelled"));
      frame.delivery.reset();
      continue;
    }
    return FrameRead::kParked;  // the turn ended: whoever reads next reads on
  }
}

}  // namespace baton::transport::tcp
