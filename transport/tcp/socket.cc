#include "transport/tcp/socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "transport/progress.h"

namespace baton::transport {
namespace {

// While a cancel check is pending, poll() wakes at least this often to run it.
constexpr absl::Duration kCancelCheckInterval = absl::Milliseconds(20);
constexpr absl::Duration kInitialConnectBackoff = absl::Milliseconds(5);
constexpr absl::Duration kMaxConnectBackoff = absl::Milliseconds(200);

// Waits until `fd` has one of `events` (or an error/hang-up). OK when ready. Without a cancel
// check (`cancelled` null) an infinite wait sleeps in poll() until the fd is ready; with one,
// poll() wakes every kCancelCheckInterval to run it.
absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     const absl::FunctionRef<bool()>* cancelled, const char* what) {
  while (true) {
    if (cancelled != nullptr && (*cancelled)()) {
      return absl::CancelledError(absl::StrCat(what, " cancelled"));
    }
    const bool infinite = deadline == absl::InfiniteFuture();
    int timeout_ms = -1;
    if (!infinite) {
      absl::Duration wait = deadline - absl::Now();
      if (cancelled != nullptr) wait = std::min(wait, kCancelCheckInterval);
      timeout_ms = ProgressEngine::PollTimeoutMs(wait);
    } else if (cancelled != nullptr) {
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(kCancelCheckInterval));
    }
    pollfd pfd{fd, events, 0};
    const int n = poll(&pfd, 1, timeout_ms);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return BATON_ERRNO_STATUS("poll");
    if (n == 0 && !infinite && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
    }
  }
}

// One non-blocking connect attempt to one resolved address, bounded by `deadline`.
absl::StatusOr<FileDescriptor> ConnectOnce(const addrinfo& ai, absl::Time deadline,
                                           const absl::FunctionRef<bool()>* cancelled) {
  FileDescriptor fd(
      socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) return BATON_ERRNO_STATUS("socket");
  if (connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return BATON_ERRNO_STATUS("connect");
    BATON_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, cancelled, "connect"));
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
      return BATON_ERRNO_STATUS("getsockopt(SO_ERROR)");
    }
    if (error != 0) return ErrnoStatus(error, "connect", __FILE__, __LINE__);
  }
  SetNoDelay(fd.get());
  return fd;
}

}  // namespace

void FileDescriptor::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

absl::StatusOr<HostPort> SplitHostPort(absl::string_view address) {
  HostPort result;
  absl::string_view rest;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "': missing ']'"));
    }
    result.host = std::string{address.substr(1, close - 1)};
    rest = address.substr(close + 1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address '", address, "': expected host:port"));
    }
    result.host = std::string{address.substr(0, colon)};
    rest = address.substr(colon);
  }
  int port = -1;
  if (rest.size() < 2 || rest.front() != ':' ||
      std::from_chars(rest.data() + 1, rest.data() + rest.size(), port).ptr !=
          rest.data() + rest.size() ||
      port < 0 || port > 65535 || result.host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", address, "': expected host:port with port 0-65535"));
  }
  result.port = std::string{rest.substr(1)};
  return result;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<Listener> ListenTcp(const HostPort& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  if (const int rc = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &resolved);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve listen address ", address.host,
                                                   ":", address.port, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(resolved, &freeaddrinfo);
  Listener listener;
  listener.fd.Reset(
      socket(resolved->ai_family, resolved->ai_socktype | SOCK_CLOEXEC, resolved->ai_protocol));
  if (!listener.fd.valid()) return BATON_ERRNO_STATUS("socket");
  const int one = 1;
  BATON_POSIX_RETURN_IF_ERROR(
      setsockopt(listener.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  if (bind(listener.fd.get(), resolved->ai_addr, resolved->ai_addrlen) != 0) {
    return Annotate(BATON_ERRNO_STATUS("bind"),
                    absl::StrCat("listening on ", address.host, ":", address.port));
  }
  BATON_POSIX_RETURN_IF_ERROR(listen(listener.fd.get(), SOMAXCONN));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  BATON_POSIX_RETURN_IF_ERROR(
      getsockname(listener.fd.get(), reinterpret_cast<sockaddr*>(&bound), &len));
  listener.port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return listener;
}

absl::StatusOr<FileDescriptor> ConnectWithRetry(const std::string& address, absl::Time deadline,
                                                absl::FunctionRef<bool()> cancelled) {
  BATON_ASSIGN_OR_RETURN(HostPort host_port, SplitHostPort(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  absl::Duration backoff = kInitialConnectBackoff;
  absl::Status last_error;
  while (true) {
    addrinfo* resolved = nullptr;
    // Resolved on every attempt: a restarted peer may come back elsewhere under the same name.
    if (const int rc =
            getaddrinfo(host_port.host.c_str(), host_port.port.c_str(), &hints, &resolved);
        rc != 0) {
      last_error = absl::UnavailableError(absl::StrCat("cannot resolve: ", gai_strerror(rc)));
    } else {
      std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(resolved, &freeaddrinfo);
      for (const addrinfo* ai = resolved; ai != nullptr; ai = ai->ai_next) {
        absl::StatusOr<FileDescriptor> fd = ConnectOnce(*ai, deadline, &cancelled);
        if (fd.ok() || absl::IsCancelled(fd.status())) return fd;
        last_error = fd.status();
      }
    }
    if (cancelled())
      return absl::CancelledError(absl::StrCat("connect to ", address, " cancelled"));
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", address, " by the deadline: ", last_error.message()));
    }
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, kMaxConnectBackoff);
  }
}

namespace {

absl::Status WriteFullImpl(int fd, std::span<iovec> iov, absl::Time deadline,
                           const absl::FunctionRef<bool()>* cancelled,
                           const absl::FunctionRef<void()>* on_full, size_t* written) {
  while (!iov.empty() && iov.front().iov_len == 0) iov = iov.subspan(1);
  while (!iov.empty()) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    // sendmsg takes at most IOV_MAX pieces (EMSGSIZE beyond); the loop sends the rest.
    msg.msg_iovlen = std::min<size_t>(iov.size(), IOV_MAX);
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (on_full != nullptr) (*on_full)();
        BATON_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, cancelled, "write"));
        continue;
      }
      return BATON_ERRNO_STATUS("sendmsg");
    }
    *written += static_cast<size_t>(n);
    size_t left = static_cast<size_t>(n);
    while (!iov.empty() && left >= iov.front().iov_len) {
      left -= iov.front().iov_len;
      iov = iov.subspan(1);
    }
    if (left > 0) {
      iov.front().iov_base = static_cast<std::byte*>(iov.front().iov_base) + left;
      iov.front().iov_len -= left;
    }
    while (!iov.empty() && iov.front().iov_len == 0) iov = iov.subspan(1);
  }
  return absl::OkStatus();
}

absl::Status ReadFullImpl(int fd, ByteSpan buffer, absl::Time deadline,
                          const absl::FunctionRef<bool()>* cancelled, size_t* read) {
  while (!buffer.empty()) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n > 0) {
      *read += static_cast<size_t>(n);
      buffer = buffer.subspan(static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return absl::UnavailableError("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BATON_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, cancelled, "read"));
      continue;
    }
    return BATON_ERRNO_STATUS("recv");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline, size_t* written) {
  return WriteFullImpl(fd, iov, deadline, nullptr, nullptr, written);
}

absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled, size_t* written) {
  return WriteFullImpl(fd, iov, deadline, &cancelled, nullptr, written);
}

absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled, absl::FunctionRef<void()> on_full,
                       size_t* written) {
  return WriteFullImpl(fd, iov, deadline, &cancelled, &on_full, written);
}

absl::Status ReadFull(int fd, ByteSpan buffer, absl::Time deadline, size_t* read) {
  return ReadFullImpl(fd, buffer, deadline, nullptr, read);
}

absl::Status ReadFull(int fd, ByteSpan buffer, absl::Time deadline,
                      absl::FunctionRef<bool()> cancelled, size_t* read) {
  return ReadFullImpl(fd, buffer, deadline, &cancelled, read);
}

absl::Status BufferedReader::Read(ByteSpan buffer, absl::Time deadline, size_t* read) {
  return ReadImpl(buffer, deadline, nullptr, read);
}

absl::Status BufferedReader::Read(ByteSpan buffer, absl::Time deadline,
                                  absl::FunctionRef<bool()> cancelled, size_t* read) {
  return ReadImpl(buffer, deadline, &cancelled, read);
}

absl::Status BufferedReader::ReadImpl(ByteSpan buffer, absl::Time deadline,
                                      const absl::FunctionRef<bool()>* cancelled, size_t* read) {
  const size_t buffered = std::min(end_ - begin_, buffer.size());
  if (buffered > 0) std::memcpy(buffer.data(), ahead_.data() + begin_, buffered);
  begin_ += buffered;
  *read += buffered;
  buffer = buffer.subspan(buffered);
  if (buffer.empty()) return absl::OkStatus();
  begin_ = end_ = 0;
  if (drained_) {
    BATON_RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, cancelled, "read"));
    drained_ = false;
  }
  if (buffer.size() >= kCapacity) return ReadFullImpl(fd_, buffer, deadline, cancelled, read);
  while (end_ < buffer.size()) {
    const size_t room = kCapacity - end_;
    const ssize_t n = recv(fd_, ahead_.data() + end_, room, MSG_DONTWAIT);
    if (n > 0) {
      end_ += static_cast<size_t>(n);
      drained_ = static_cast<size_t>(n) < room;
      continue;
    }
    if (n == 0) return absl::UnavailableError("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return BATON_ERRNO_STATUS("recv");
    BATON_RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, cancelled, "read"));
  }
  std::memcpy(buffer.data(), ahead_.data(), buffer.size());
  begin_ = buffer.size();
  *read += buffer.size();
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  const int one = 1;
  // Best effort: without it the transport is slower, not wrong.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

uint64_t TcpRetransmits(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return 0;
  return info.tcpi_total_retrans;
}

}  // namespace baton::transport
