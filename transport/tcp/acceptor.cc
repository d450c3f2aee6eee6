#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {
namespace {

// The source whose share of the handshakes an accepted connection takes: its remote IPv4
// address, or the /64 prefix of its IPv6 address (one host usually holds a whole /64).
std::string SourceAddress(const sockaddr_storage& from) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (from.ss_family == AF_INET) {
    const in_addr& address = reinterpret_cast<const sockaddr_in*>(&from)->sin_addr;
    if (inet_ntop(AF_INET, &address, text.data(), text.size()) != nullptr) return text.data();
  } else if (from.ss_family == AF_INET6) {
    in6_addr address = reinterpret_cast<const sockaddr_in6*>(&from)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&address)) {
      if (inet_ntop(AF_INET, &address.s6_addr[12], text.data(), text.size()) != nullptr) {
        return text.data();
      }
    } else {
      std::fill(std::begin(address.s6_addr) + 8, std::end(address.s6_addr), 0);
      if (inet_ntop(AF_INET6, &address, text.data(), text.size()) != nullptr) {
        return absl::StrCat(text.data(), "/64");
      }
    }
  }
  return "unknown";
}

}  // namespace

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
    sockaddr_storage from{};
    socklen_t from_length = sizeof(from);
    const int fd =
        accept4(listener_.fd.get(), reinterpret_cast<sockaddr*>(&from), &from_length, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      accept_error_log_.Log(spdlog::level::err, "tcp endpoint {}: accept failed: {}", address_,
                            BATON_ERRNO_STATUS("accept4").ToString());
      // E.g. out of fds: back off instead of spinning on a listener that stays readable.
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    ReapFinishedReaders();
    auto conn = std::make_shared<Conn>();
    conn->fd = FileDescriptor(fd);
    conn->source = SourceAddress(from);
    // Until it proves who it is, a connection gets a thread only while few others wait too, and
    // fewer still from the same address: one host cannot take every place.
    std::string refused;
    {
      absl::MutexLock lock(&mu_);
      auto from_source = handshaking_from_.find(conn->source);
      if (handshaking_ >= max_pending_handshakes_) {
        refused = "too many connections in their handshake";
      } else if (from_source != handshaking_from_.end() &&
                 from_source->second >= max_pending_handshakes_per_source_) {
        refused = absl::StrCat("too many connections from ", conn->source, " in their handshake");
      } else {
        ++handshaking_;
        ++handshaking_from_[conn->source];
        SetNoDelay(fd);  // frames go back to the peer on this connection too
        conn->reader = std::thread([this, conn] {
          SetThreadName("baton-tcp-read");
          ReadLoop(conn, /*accepted=*/true);
        });
        conns_.push_back(std::move(conn));
      }
    }
    if (!refused.empty()) {
      conn.reset();  // closed at once: a daemon dialling here tries again until its deadline
      NoteRefused(refused);
    }
  }
}

void TcpEndpoint::EndHandshakeLocked(const Conn& conn) {
  --handshaking_;
  auto it = handshaking_from_.find(conn.source);
  if (it != handshaking_from_.end() && --it->second <= 0) handshaking_from_.erase(it);
}

void TcpEndpoint::NoteRefused(const std::string& why) {
  const uint64_t refused = refused_connections_.fetch_add(1) + 1;
  refused_log_.Log(spdlog::level::warn,
                   "tcp endpoint {}: refused a connection: {} ({} refused so far)", address_, why,
                   refused);
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
  // Sent first by the Send that opened the connection (see ReadLoop for an accepted one).
  conn->first_grant = receive_credits_.Attach(conn->peer);
  conn->reader = std::thread([this, conn] {
    SetThreadName("baton-tcp-read");
    ReadLoop(conn, /*accepted=*/false);
  });
  conns_.push_back(conn);
}

absl::StatusOr<Admitted> TcpEndpoint::AdmitPeer(int fd) {
  return Admit(fd, address_, handshake_keys_, protection_, absl::Now() + handshake_timeout_);
}

}  // namespace baton::transport::tcp
