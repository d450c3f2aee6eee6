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
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

void TcpEndpoint::ListenLoop() {
  while (true) {
    std::array<pollfd, 2> fds{pollfd{listener_.fd.get(), POLLIN, 0},
                              pollfd{wake_.get(), POLLIN, 0}};
    // Wakes now and then to join the readers of connections that ended (refused ones above all),
    // so that their descriptors go even when nobody connects or sends any more.
    constexpr int kReapEveryMs = 500;
    const int ready = poll(fds.data(), fds.size(), kReapEveryMs);
    if (ready == 0) {
      ReapFinishedReaders();
      continue;
    }
    if (ready < 0) {
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
    // Until it proves who it is, a connection gets a thread only while few others wait too.
    if (handshaking_.fetch_add(1) >= max_pending_handshakes_) {
      handshaking_.fetch_sub(1);
      ::close(fd);
      NoteRefused("too many connections in their handshake");
      continue;
    }
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

void TcpEndpoint::NoteRefused(const std::string& why) {
  // Anyone who reaches the port can cause these: the first, then one in 1024.
  const uint64_t refused = refused_connections_.fetch_add(1) + 1;
  if (refused == 1 || refused % 1024 == 0) {
    spdlog::warn("tcp endpoint {}: refused a connection: {} ({} refused so far)", address_, why,
                 refused);
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

absl::StatusOr<Admitted> TcpEndpoint::AdmitPeer(int fd) {
  return Admit(fd, address_, handshake_keys_, seal_, absl::Now() + handshake_timeout_);
}

}  // namespace baton::transport::tcp
