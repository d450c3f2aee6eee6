#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <list>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"
#include "transport/frame.h"
#include "transport/receive_matcher.h"
#include "transport/tcp/socket.h"

namespace baton::transport {
namespace {

// Connections per peer that Sends use. The receive side already treats a peer as connected while
// any connection with it is up, so raising this only changes how Send picks a stream.
constexpr size_t kStreamsPerPeer = 1;
// How long an accepted connection may take to introduce itself.
constexpr absl::Duration kHelloTimeout = absl::Seconds(30);
// Payload bytes that nobody wants are read into a scratch buffer of this size.
constexpr size_t kDiscardChunkBytes = 64 * 1024;

absl::Status ShutDownError() { return absl::UnavailableError("endpoint shut down"); }

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(Listener listener, FileDescriptor wake, std::string address,
              uint64_t max_unexpected_bytes_per_peer)
      : listener_(std::move(listener)),
        wake_(std::move(wake)),
        address_(std::move(address)),
        matcher_(max_unexpected_bytes_per_peer) {}
  ~TcpEndpoint() override;

  // Starts accepting connections; called once, right after construction.
  void Start() {
    listener_thread_ = std::thread([this] {
      SetThreadName("baton-accept");
      ListenLoop();
    });
  }

  std::string address() const override { return address_; }
  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override;
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override {
    return matcher_.Post(peer, tag, data, deadline, std::move(on_arrival));
  }
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
  };

  void ListenLoop();
  void ReapFinishedReaders() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts an established connection with its peer and starts its reader.
  void StartReaderLocked(const std::shared_ptr<Conn>& conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one connection until it ends; an accepted one first has to introduce its peer.
  void ReadLoop(const std::shared_ptr<Conn>& conn, bool accepted);
  absl::StatusOr<std::string> ReadHello(int fd);
  // Reads frames until the connection ends; returns why it ended.
  absl::Status ReadFrames(BufferedReader& reader, const std::string& peer,
                          std::vector<std::byte>& scratch);
  absl::Status ReadPayload(BufferedReader& reader, const std::string& peer,
                           const FrameHeader& header, std::vector<std::byte>& scratch);

  // The error that stops sending on `comm` now (shut down or aborted), or OK.
  absl::Status SendBlockingErrorLocked(uint64_t comm) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool SendCancelled(uint64_t comm) const ABSL_LOCKS_EXCLUDED(mu_);
  // Reserves an idle connection to `peer` (connecting one if there are fewer than
  // kStreamsPerPeer).
  absl::StatusOr<std::shared_ptr<Conn>> AcquireStream(const std::string& peer, const Tag& tag,
                                                      absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<FileDescriptor> ConnectAndIntroduce(const std::string& peer, uint64_t comm,
                                                     absl::Time deadline);
  // Returns a stream after a Send; a broken one is dropped so that the next Send reconnects.
  void ReleaseStream(const std::string& peer, const std::shared_ptr<Conn>& stream, bool healthy)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CountSendLocked(const std::string& peer, uint64_t length, bool ok)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountError(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);

  const Listener listener_;
  const FileDescriptor wake_;  // eventfd that stops ListenLoop
  const std::string address_;
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
  // Established connections per peer address (accepted ones once introduced).
  absl::flat_hash_map<std::string, int> connections_ ABSL_GUARDED_BY(mu_);
  // tx counters and errors; rx counters and `up` come from matcher_.
  absl::flat_hash_map<std::string, LinkStats> links_ ABSL_GUARDED_BY(mu_);
};

TcpEndpoint::~TcpEndpoint() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
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
  std::vector<std::byte> scratch(kDiscardChunkBytes);
  BufferedReader reader(fd);
  const absl::Status ended = ReadFrames(reader, peer, scratch);
  // Tell the peer now, and make the next Send on this connection notice (PeerHasClosed); the fd
  // itself is closed when the connection's last owner lets go.
  shutdown(fd, SHUT_RDWR);
  absl::MutexLock lock(&mu_);
  // Under mu_, so that a reconnection's PeerConnected cannot be overtaken by this PeerLost.
  if (--connections_[peer] == 0) {
    connections_.erase(peer);
    matcher_.PeerLost(peer, absl::UnavailableError(absl::StrCat("lost connection from peer ", peer,
                                                                ": ", ended.message())));
  }
  conn->finished = true;
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

absl::Status TcpEndpoint::ReadFrames(BufferedReader& reader, const std::string& peer,
                                     std::vector<std::byte>& scratch) {
  std::array<std::byte, kFrameHeaderBytes> buffer;
  while (true) {
    size_t read = 0;
    if (absl::Status status = reader.Read(buffer, absl::InfiniteFuture(), &read); !status.ok()) {
      // EOF between frames is how a peer goes away; anything else is a broken link.
      if (read > 0 || !absl::IsUnavailable(status)) CountError(peer);
      return status;
    }
    absl::StatusOr<FrameHeader> header = DecodeFrameHeader(buffer);
    if (header.ok() && header->type != FrameType::kData) {
      header = absl::DataLossError("unexpected hello frame on an introduced connection");
    }
    if (!header.ok()) {
      spdlog::error("tcp endpoint {}: closing the connection from peer {}: {}", address_, peer,
                    header.status().ToString());
      CountError(peer);
      return header.status();
    }
    BATON_RETURN_IF_ERROR(ReadPayload(reader, peer, *header, scratch));
  }
}

absl::Status TcpEndpoint::ReadPayload(BufferedReader& reader, const std::string& peer,
                                      const FrameHeader& header, std::vector<std::byte>& scratch) {
  uint64_t left = header.payload_bytes;
  // Consumes the rest of a payload nobody wants, to keep the stream in step.
  auto drain = [&]() -> absl::Status {
    while (left > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, scratch.size()));
      size_t read = 0;
      BATON_RETURN_IF_ERROR(
          reader.Read(ByteSpan(scratch.data(), chunk), absl::InfiniteFuture(), &read));
      left -= chunk;
    }
    return absl::OkStatus();
  };

  ReceiveMatcher::Delivery delivery = matcher_.BeginDelivery(peer, header.tag, left);
  if (delivery.discard()) {
    const absl::Status status = drain();
    matcher_.FinishDelivery(std::move(delivery), status);
    if (!status.ok()) CountError(peer);
    return status;
  }
  // Straight into the receiver's buffer when a receive is posted; the delivery says how long the
  // receiver is willing to wait and whether it has been aborted meanwhile.
  size_t read = 0;
  const absl::Status status = reader.Read(
      delivery.buffer(), delivery.deadline(), [&delivery] { return delivery.cancelled(); }, &read);
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

absl::Status TcpEndpoint::Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                               absl::Time deadline) {
  if (data.size() > kMaxFramePayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("message of ", data.size(), " bytes to peer ", peer, " (", TagToString(tag),
                     ") exceeds the frame limit of ", kMaxFramePayloadBytes, " bytes"));
  }
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<Conn> stream, AcquireStream(peer, tag, deadline));
  const int fd = stream->fd.get();
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    closed = stream->finished;
  }
  if (closed || PeerHasClosed(fd)) {
    // The peer went away since our last send (its reader saw the end, or the peer has shut the
    // connection down); what we sent last may not have arrived, so this is an error rather than
    // a silent reconnect. The next Send connects afresh.
    ReleaseStream(peer, stream, /*healthy=*/false);
    CountError(peer);
    return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                               TagToString(tag), "): peer closed the connection"));
  }
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(FrameHeader{FrameType::kData, tag, data.size()}, header);
  std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                           iovec{const_cast<std::byte*>(data.data()), data.size()}};
  size_t written = 0;
  const absl::Status status = WriteFull(
      fd, iov, deadline, [this, &tag] { return SendCancelled(tag.comm); }, &written);
  // A frame cut short leaves the stream unusable; one never started does not.
  ReleaseStream(peer, stream, status.ok() || written == 0);
  {
    absl::MutexLock lock(&mu_);
    CountSendLocked(peer, data.size(), status.ok());
    if (status.ok()) return absl::OkStatus();
    if (absl::IsCancelled(status)) {
      absl::Status blocking = SendBlockingErrorLocked(tag.comm);
      if (!blocking.ok()) return blocking;
    }
  }
  const std::string context = absl::StrCat("send to peer ", peer, " (", TagToString(tag), ")");
  if (absl::IsDeadlineExceeded(status)) {
    return absl::DeadlineExceededError(absl::StrCat(context, " timed out after ", written, " of ",
                                                    header.size() + data.size(), " bytes"));
  }
  return absl::UnavailableError(absl::StrCat("lost connection to peer ", peer, " (",
                                             TagToString(tag), "): ", status.message()));
}

absl::StatusOr<std::shared_ptr<TcpEndpoint::Conn>> TcpEndpoint::AcquireStream(
    const std::string& peer, const Tag& tag, absl::Time deadline) {
  std::shared_ptr<Conn> stream;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this, &peer, &tag]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!SendBlockingErrorLocked(tag.comm).ok()) return true;
      auto it = out_.find(peer);
      if (it == out_.end() || it->second.size() < kStreamsPerPeer) return true;
      return std::any_of(it->second.begin(), it->second.end(),
                         [](const auto& s) { return !s->busy; });
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("send to peer ", peer, " (", TagToString(tag),
                                                      ") timed out waiting for a free connection"));
    }
    BATON_RETURN_IF_ERROR(SendBlockingErrorLocked(tag.comm));
    std::vector<std::shared_ptr<Conn>>& streams = out_[peer];
    // When both sides connected to each other at once, both must send on the same connection for
    // the acknowledgements to ride on data: the one opened by the endpoint whose address sorts
    // first.
    const bool prefer_ours = address_ < peer;
    std::shared_ptr<Conn> idle;
    for (const auto& candidate : streams) {
      if (candidate->busy) continue;
      if (idle == nullptr || candidate->ours == prefer_ours) idle = candidate;
      if (candidate->ours == prefer_ours) break;
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
  auto endpoint = std::make_unique<TcpEndpoint>(std::move(listener), std::move(wake), address,
                                                options.max_unexpected_bytes_per_peer);
  endpoint->Start();
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

}  // namespace baton::transport
