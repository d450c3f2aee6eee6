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

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/crc32c.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {
namespace {

using Header = std::array<std::byte, kFrameHeaderBytes>;
// Frames whose headers (and trailers) a send keeps on the stack: the usual one or two.
constexpr size_t kOnStack = 2;

// Every frame's header and payload, in one write.
absl::Status WriteFrames(int fd, FrameType type, std::span<const OutMessage> messages,
                         absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                         absl::FunctionRef<void()> on_full, size_t* written) {
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
  return WriteFull(fd, iov, deadline, cancelled, on_full, written);
}

// Data frames with their checksums. Each payload's CRC32C is computed a piece at a time just
// before the piece is written, so that the kernel copies it out of the cache the CRC brought it
// into: over the whole payload first, a large one was read from memory twice, and a 64 MiB send
// took half as long again as without checksums instead of a quarter
// (docs/bench/2026-12-02-checksum.md). Small frames still go out together, in one write per
// kPieceBytes of payload. The caller's buffers stay unchanged until Send returns, so what the CRC
// covers is what goes on the wire.
absl::Status WriteChecksummedFrames(int fd, FrameType type, std::span<const OutMessage> messages,
                                    absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                                    absl::FunctionRef<void()> on_full, size_t* written) {
  using Trailer = std::array<std::byte, kFrameChecksumBytes>;
  // Where the headers and trailers stay until they are written.
  std::array<Header, kOnStack> stack_headers;
  std::array<Trailer, kOnStack> stack_trailers;
  std::vector<Header> heap_headers;
  std::vector<Trailer> heap_trailers;
  std::span<Header> headers(stack_headers.data(), std::min(messages.size(), kOnStack));
  std::span<Trailer> trailers(stack_trailers.data(), headers.size());
  if (messages.size() > kOnStack) {
    heap_headers.resize(messages.size());
    heap_trailers.resize(messages.size());
    headers = heap_headers;
    trailers = heap_trailers;
  }
  absl::InlinedVector<iovec, 3 * kOnStack> batch;  // what the next write sends
  size_t batch_payload = 0;
  auto flush = [&]() -> absl::Status {
    absl::Status status = WriteFull(fd, std::span(batch), deadline, cancelled, on_full, written);
    batch.clear();
    batch_payload = 0;
    return status;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const ConstByteSpan data = messages[i].data;
    EncodeFrameHeader(FrameHeader{type, messages[i].tag, data.size(), /*checksum=*/true},
                      headers[i]);
    batch.push_back(iovec{headers[i].data(), headers[i].size()});
    uint32_t crc = 0;
    for (size_t offset = 0; offset < data.size(); offset += kPieceBytes) {
      const ConstByteSpan piece = data.subspan(offset, std::min(kPieceBytes, data.size() - offset));
      crc = Crc32c(crc, piece);
      batch.push_back(iovec{const_cast<std::byte*>(piece.data()), piece.size()});
      batch_payload += piece.size();
      if (batch_payload >= kPieceBytes) BATON_RETURN_IF_ERROR(flush());
    }
    EncodeFrameChecksum(crc, trailers[i]);
    batch.push_back(iovec{trailers[i].data(), trailers[i].size()});
  }
  return flush();
}

// Frames on a sealed connection (frame.h): each payload sealed a record at a time into a buffer
// of the sending thread's, written whenever the next record would not fit, so that the kernel
// copies each record out of the cache that sealing it brought it into, and small frames go out
// together. (Per thread rather than per connection: a daemon has far more connections than
// threads that send.) The connection must be dropped unless this succeeds: records sealed but
// not sent would put the two ends' record numbers out of step.
absl::Status WriteSealedFrames(int fd, FrameType type, std::span<const OutMessage> messages,
                               RecordCipher& cipher, absl::Time deadline,
                               absl::FunctionRef<bool()> cancelled,
                               absl::FunctionRef<void()> on_full, size_t* written) {
  // Room for the largest record with its frame's header.
  thread_local std::vector<std::byte> out(kFrameHeaderBytes + kSealedRecordBytes + kSealTagBytes);
  size_t used = 0;
  auto flush = [&]() -> absl::Status {
    std::array<iovec, 1> iov{iovec{out.data(), used}};
    used = 0;
    return WriteFull(fd, iov, deadline, cancelled, on_full, written);
  };
  for (const OutMessage& message : messages) {
    const ConstByteSpan data = message.data;
    Header header;
    EncodeFrameHeader(
        FrameHeader{.type = type, .tag = message.tag, .payload_bytes = data.size(), .sealed = true},
        header);
    const uint64_t records = SealedRecords(data.size());
    for (uint64_t record = 0; record < records; ++record) {
      const size_t offset = record * kSealedRecordBytes;
      const ConstByteSpan piece =
          data.subspan(offset, std::min(kSealedRecordBytes, data.size() - offset));
      const size_t bytes = (record == 0 ? header.size() : 0) + piece.size() + kSealTagBytes;
      if (used + bytes > out.size()) BATON_RETURN_IF_ERROR(flush());
      if (record == 0) {
        std::memcpy(out.data() + used, header.data(), header.size());
        used += header.size();
      }
      cipher.Begin(header);
      cipher.Update(piece, out.data() + used);
      used += piece.size();
      BATON_ASSIGN_OR_RETURN(const AeadTag tag, cipher.Seal());
      std::memcpy(out.data() + used, tag.data(), tag.size());
      used += tag.size();
    }
  }
  return flush();
}

// Frames on an authenticated connection (frame.h): each payload goes out from the caller's buffer
// as it is, as WriteChecksummedFrames sends it, a record at a time, each followed by the tag
// computed over it just before it is written (so the kernel copies it out of the cache GHASH
// brought it into), and small frames together. The caller's buffers stay unchanged until Send
// returns, so what a tag covers is what goes on the wire. As for sealed frames, the connection
// must be dropped unless this succeeds.
absl::Status WriteAuthenticatedFrames(int fd, FrameType type, std::span<const OutMessage> messages,
                                      RecordCipher& cipher, absl::Time deadline,
                                      absl::FunctionRef<bool()> cancelled,
                                      absl::FunctionRef<void()> on_full, size_t* written) {
  size_t records = 0;
  for (const OutMessage& message : messages) records += SealedRecords(message.data.size());
  // Where the headers and tags stay until they are written (sized once: the iovecs point in).
  absl::InlinedVector<Header, kOnStack> headers(messages.size());
  absl::InlinedVector<AeadTag, kOnStack> tags(records);
  absl::InlinedVector<iovec, 3 * kOnStack> batch;  // what the next write sends
  size_t batch_payload = 0;
  auto flush = [&]() -> absl::Status {
    absl::Status status = WriteFull(fd, std::span(batch), deadline, cancelled, on_full, written);
    batch.clear();
    batch_payload = 0;
    return status;
  };
  size_t next_tag = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ConstByteSpan data = messages[i].data;
    EncodeFrameHeader(FrameHeader{.type = type,
                                  .tag = messages[i].tag,
                                  .payload_bytes = data.size(),
                                  .authenticated = true},
                      headers[i]);
    batch.push_back(iovec{headers[i].data(), headers[i].size()});
    for (uint64_t record = 0; record < SealedRecords(data.size()); ++record) {
      const size_t offset = record * kSealedRecordBytes;
      const ConstByteSpan piece =
          data.subspan(offset, std::min(kSealedRecordBytes, data.size() - offset));
      cipher.Begin(headers[i]);
      cipher.Authenticate(piece);
      AeadTag& tag = tags[next_tag++];
      BATON_ASSIGN_OR_RETURN(tag, cipher.Seal());
      if (!piece.empty()) {
        batch.push_back(iovec{const_cast<std::byte*>(piece.data()), piece.size()});
      }
      batch.push_back(iovec{tag.data(), tag.size()});
      batch_payload += piece.size();
      if (batch_payload >= kPieceBytes) BATON_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

}  // namespace

absl::Status WriteFramesOn(Connection& stream, FrameType type, std::span<const OutMessage> messages,
                           bool checksum, absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                           absl::FunctionRef<void()> on_full, size_t* written) {
  const int fd = stream.fd.get();
  if (stream.seal.has_value() && stream.seal->encrypts()) {
    return WriteSealedFrames(fd, type, messages, *stream.seal, deadline, cancelled, on_full,
                             written);
  }
  if (stream.seal.has_value()) {
    return WriteAuthenticatedFrames(fd, type, messages, *stream.seal, deadline, cancelled, on_full,
                                    written);
  }
  if (checksum) {
    return WriteChecksummedFrames(fd, type, messages, deadline, cancelled, on_full, written);
  }
  return WriteFrames(fd, type, messages, deadline, cancelled, on_full, written);
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
  // The operation whose bytes this send writes (data frames only: a ping belongs to none).
  std::optional<OperationId> operation;
  if (type == FrameType::kData) operation.emplace(tag.comm, tag.seq);
  // A connection found dead before this send wrote a byte on it (the peer closed it, or went
  // away and came back) is replaced by a new one, within the deadline; a few times at most, since
  // each new connection has just passed the handshake with the peer.
  constexpr int kMaxFreshConnections = 4;
  std::shared_ptr<Conn> stream;
  size_t written = 0;
  absl::Status status;
  bool sealed = false;  // the connection's frames are records: sealed or authenticated
  SendCredit credit;
  for (int fresh = 0;;) {
    absl::StatusOr<std::shared_ptr<Conn>> acquired =
        AcquireStream(peer, tag, operation, total, deadline);
    if (!acquired.ok()) {
      if (credit.paid_epoch.has_value()) {
        send_credits_.Refund(peer, *credit.paid_epoch, credit.charge);
      }
      return acquired.status();
    }
    stream = *std::move(acquired);
    sealed = stream->seal.has_value();
    // Only data and write frames carry a checksum, and never sealed or authenticated ones
    // (frame.h).
    const bool checksum =
        checksum_ && (type == FrameType::kData || type == FrameType::kWrite) && !sealed;
    bool dead = false;
    bool same_operation = false;
    {
      absl::MutexLock lock(&mu_);
      dead = stream->finished;
      same_operation = operation.has_value() && stream->last_operation == operation;
    }
    if (dead && (same_operation || fresh == kMaxFreshConnections)) {
      // The peer went away since this operation's last send on the connection (its reader saw
      // it go): what the operation sent there may not have arrived, so this is an error rather
      // than a silent reconnect.
      ReleaseStream(peer, stream, /*healthy=*/false);
      if (credit.paid_epoch.has_value())
        send_credits_.Refund(peer, *credit.paid_epoch, credit.charge);
      CountError(peer);
      return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                                 TagToString(tag),
                                                 "): peer closed the connection"));
    }
    if (!dead && !WriteFirstGrant(*stream, deadline).ok()) dead = true;
    if (dead) {
      ReleaseStream(peer, stream, /*healthy=*/false);
      ++fresh;
      continue;
    }
    if (type == FrameType::kData) {
      absl::StatusOr<CreditAction> action = TakeCredit(peer, stream, messages, deadline, credit);
      if (!action.ok()) {
        CountError(peer);
        return action.status();
      }
      if (*action == CreditAction::kRetry) continue;
      if (*action == CreditAction::kDead) {
        ++fresh;
        continue;
      }
      if (*action == CreditAction::kOneByOne) {
        for (const OutMessage& message : messages) {
          BATON_RETURN_IF_ERROR(SendFrames(peer, type, std::span(&message, 1), deadline));
        }
        return absl::OkStatus();
      }
    }
    size_t frame_bytes = total;
    for (const OutMessage& message : messages) {
      if (sealed) frame_bytes += kSealTagBytes * SealedRecords(message.data.size());
      if (checksum) frame_bytes += kFrameChecksumBytes;
    }
    auto cancelled = [this, &tag] { return SendCancelled(tag.comm); };
    SendReading reading;
    auto on_full = [&] { ReadWhileFull(*stream, deadline, cancelled, reading); };
    status =
        WriteFramesOn(*stream, type, messages, checksum, deadline, cancelled, on_full, &written);
    ReleaseTurnAfterSend(*stream, reading);
    if (!status.ok() && credit.write_epoch.has_value()) {
      // Credit back for the frames whose header did not go out whole: the receiver never charged
      // them. (One whose header went out is charged there, and its charge comes back with a grant
      // once the receiver drops what it read of it.)
      uint64_t unsent = 0;
      size_t start = 0;
      for (const OutMessage& message : messages) {
        if (written < start + kFrameHeaderBytes) unsent += CreditCharge(message.data.size());
        start += kFrameHeaderBytes + message.data.size() +
                 (sealed ? kSealTagBytes * SealedRecords(message.data.size()) : 0) +
                 (checksum ? kFrameChecksumBytes : 0);
      }
      send_credits_.Refund(peer, *credit.write_epoch, unsent);
      credit.write_epoch.reset();
    }
    if (absl::IsUnavailable(status) && written == 0 && !same_operation &&
        fresh < kMaxFreshConnections) {
      // The connection had failed (reset by the peer) before a byte of this send went out.
      ReleaseStream(peer, stream, /*healthy=*/false);
      ++fresh;
      continue;
    }
    total = frame_bytes;
    break;
  }
  // A frame cut short leaves the stream unusable, and so does a socket error; a frame that was
  // never started because the deadline passed or the communicator was aborted does not, unless
  // it was sealed already (the record numbers would be out of step).
  ReleaseStream(peer, stream,
                status.ok() || (written == 0 && !sealed &&
                                (absl::IsDeadlineExceeded(status) || absl::IsCancelled(status))),
                written > 0 ? operation : std::nullopt);
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

absl::StatusOr<std::shared_ptr<TcpEndpoint::Conn>> TcpEndpoint::AcquireStream(
    const std::string& peer, const Tag& tag, std::optional<OperationId> operation, size_t bytes,
    absl::Time deadline) {
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
    if (absl::Status dropped = DropDeadStreamsLocked(peer, operation, tag); !dropped.ok()) {
      CountSendLocked(peer, 0, false);
      return dropped;
    }
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
  absl::StatusOr<Introduced> introduced = ConnectAndIntroduce(peer, tag.comm, deadline);
  absl::MutexLock lock(&mu_);
  if (introduced.ok() && shutting_down_) introduced = ShutDownError();  // too late for a reader
  if (!introduced.ok()) {
    auto it = out_.find(peer);
    if (it != out_.end()) {
      std::erase(it->second, stream);
      if (it->second.empty()) out_.erase(it);
    }
    CountSendLocked(peer, 0, false);
    absl::Status blocking = SendBlockingErrorLocked(tag.comm);
    if (!blocking.ok()) return blocking;
    // A peer that took the whole deadline (to accept, or to answer the handshake) is a timeout
    // like any other; anything else means it cannot be reached.
    const std::string message = absl::StrCat("send to peer ", peer, " (", TagToString(tag),
                                             "): ", introduced.status().message());
    if (absl::IsDeadlineExceeded(introduced.status())) return absl::DeadlineExceededError(message);
    return absl::UnavailableError(message);
  }
  stream->fd = std::move(introduced->fd);
  if (introduced->sealed.has_value()) {
    stream->seal.emplace(std::move(introduced->sealed->seal));
    stream->open.emplace(std::move(introduced->sealed->open));
  }
  PrepareReadSide(*stream);
  stream->connecting = false;
  StartReaderLocked(stream);
  return stream;
}

absl::StatusOr<TcpEndpoint::Introduced> TcpEndpoint::ConnectAndIntroduce(const std::string& peer,
                                                                         uint64_t comm,
                                                                         absl::Time deadline) {
  auto cancelled = [this, comm] { return SendCancelled(comm); };
  // A peer that is busy (its limits on connections in the handshake are reached) or restarting
  // closes the connection before the handshake ends: dial again, with backoff, until the
  // deadline, as ConnectWithRetry does for a refused connect.
  constexpr absl::Duration kInitialBackoff = absl::Milliseconds(5);
  constexpr absl::Duration kMaxBackoff = absl::Milliseconds(200);
  absl::Duration backoff = kInitialBackoff;
  // A peer that restarted at the same address has a new key: fetch it again, once.
  bool refreshed = false;
  bool refresh = false;
  while (true) {
    BATON_ASSIGN_OR_RETURN(FileDescriptor fd, ConnectWithRetry(peer, deadline, cancelled));
    HandshakeKey key = kNoHandshakeKey;
    if (handshake_keys_ != nullptr) {
      absl::StatusOr<HandshakeKey> issued = handshake_keys_->ToConnect(peer, refresh, deadline);
      if (!issued.ok()) return Annotate(issued.status(), "getting the peer's handshake key");
      key = *issued;
    }
    refresh = false;
    absl::StatusOr<std::optional<SealedStream>> sealed =
        Introduce(fd.get(), address_, peer, key, protection_, deadline, cancelled);
    if (sealed.ok()) return Introduced{std::move(fd), *std::move(sealed)};
    if (absl::IsPermissionDenied(sealed.status()) && !refreshed && handshake_keys_ != nullptr) {
      refreshed = refresh = true;
      continue;
    }
    if (!absl::IsUnavailable(sealed.status())) return Annotate(sealed.status(), "handshake");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return Annotate(sealed.status(),
                      "handshake (the peer closed every connection by the deadline)");
    }
    if (cancelled()) return absl::CancelledError(absl::StrCat("connect to ", peer, " cancelled"));
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void TcpEndpoint::ReleaseStream(const std::string& peer, const std::shared_ptr<Conn>& stream,
                                bool healthy, std::optional<OperationId> written_operation) {
  absl::MutexLock lock(&mu_);
  stream->busy = false;
  if (written_operation.has_value()) stream->last_operation = written_operation;
  if (!healthy) DropStreamLocked(peer, stream);
}

void TcpEndpoint::DropStreamLocked(const std::string& peer, const std::shared_ptr<Conn>& stream) {
  // Keep the broken connection's retransmits: the counter must not go backwards.
  lost_retransmits_[peer] += TcpRetransmits(stream->fd.get());
  shutdown(stream->fd.get(), SHUT_RDWR);
  auto it = out_.find(peer);
  if (it == out_.end()) return;
  std::erase(it->second, stream);
  if (it->second.empty()) out_.erase(it);
}

absl::Status TcpEndpoint::DropDeadStreamsLocked(const std::string& peer,
                                                std::optional<OperationId> operation,
                                                const Tag& tag) {
  auto it = out_.find(peer);
  if (it == out_.end()) return absl::OkStatus();
  std::vector<std::shared_ptr<Conn>> dead;
  bool lost_operation = false;
  for (const std::shared_ptr<Conn>& conn : it->second) {
    if (!conn->finished || conn->busy) continue;
    dead.push_back(conn);
    lost_operation = lost_operation || (operation.has_value() && conn->last_operation == operation);
  }
  for (const std::shared_ptr<Conn>& conn : dead) DropStreamLocked(peer, conn);
  if (!lost_operation) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                             TagToString(tag), "): peer closed the connection"));
}

}  // namespace baton::transport::tcp
