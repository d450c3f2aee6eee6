#include "common/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton {
namespace {

absl::StatusOr<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path of ", path.size(),
                                                   " bytes (1 to ", sizeof(address.sun_path) - 1,
                                                   " are possible)"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

}  // namespace

absl::StatusOr<int> ListenUnix(const std::string& path, int mode) {
  BATON_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return BATON_ERRNO_STATUS("socket(AF_UNIX)");
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("bind to ", path));
    close(fd);
    return status;
  }
  if (chmod(path.c_str(), static_cast<mode_t>(mode)) != 0 || listen(fd, 128) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("listen on ", path));
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return BATON_ERRNO_STATUS("socket(AF_UNIX)");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("connect to ", path));
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return BATON_ERRNO_STATUS("getsockopt(SO_PEERCRED)");
  }
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

absl::Status SendPacket(int fd, const void* data, size_t bytes, int pass_fd) {
  if (pass_fd < 0) return SendPacketWithFds(fd, data, bytes, {});
  return SendPacketWithFds(fd, data, bytes, std::span<const int>(&pass_fd, 1));
}

absl::Status SendPacketWithFds(int fd, const void* data, size_t bytes,
                               std::span<const int> pass_fds) {
  if (pass_fds.size() > kMaxPassedFds) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxPassedFds, " descriptors go in one session message"));
  }
  iovec iov{const_cast<void*>(data), bytes};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))] = {};
  if (!pass_fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(pass_fds.size() * sizeof(int));
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(pass_fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(header), pass_fds.data(), pass_fds.size() * sizeof(int));
  }
  while (true) {
    const ssize_t sent = sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes)) return absl::OkStatus();
    if (sent >= 0) return absl::InternalError("a session message was sent in part");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::UnavailableError("the peer of a session socket does not read");
    }
    return BATON_ERRNO_STATUS("sendmsg on a session socket");
  }
}

absl::StatusOr<size_t> RecvPacket(int fd, void* data, size_t capacity, int* received_fd,
                                  absl::Time deadline) {
  *received_fd = -1;
  std::vector<int> fds;
  absl::StatusOr<size_t> got = RecvPacketWithFds(fd, data, capacity, 1, &fds, deadline);
  if (got.ok() && !fds.empty()) *received_fd = fds.front();
  return got;
}

absl::StatusOr<size_t> RecvPacketWithFds(int fd, void* data, size_t capacity, size_t max_fds,
                                         std::vector<int>* received_fds, absl::Time deadline) {
  received_fds->clear();
  if (deadline != absl::InfiniteFuture()) {
    pollfd poller{fd, POLLIN, 0};
    while (true) {
      const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      const int ready = poll(&poller, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
      if (ready > 0) break;
      if (ready == 0) return absl::DeadlineExceededError("no reply on the session socket");
      if (errno != EINTR) return BATON_ERRNO_STATUS("poll of a session socket");
    }
  }
  iovec iov{data, capacity};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  // Room for more descriptors than allowed, so that extra ones are received (and closed) rather
  // than left half-delivered.
  alignas(cmsghdr) char control[CMSG_SPACE((kMaxPassedFds + 4) * sizeof(int))] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::UnavailableError("nothing to read");
    return BATON_ERRNO_STATUS("recvmsg on a session socket");
  }
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed_fd;
      std::memcpy(&passed_fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      received_fds->push_back(passed_fd);
    }
  }
  const bool truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (truncated || received_fds->size() > max_fds) {
    const size_t passed = received_fds->size();
    for (int passed_fd : *received_fds) close(passed_fd);
    received_fds->clear();
    return absl::InvalidArgumentError(truncated
                                          ? "a session message longer than its kind allows"
                                          : absl::StrCat("a session message with ", passed,
                                                         " descriptors (at most ", max_fds, ")"));
  }
  return static_cast<size_t>(got);
}

}  // namespace baton
