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
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

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

}  // namespace baton::transport::tcp
