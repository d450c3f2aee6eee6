#pragma once

// Unix SOCK_SEQPACKET sockets for the session socket: small messages that arrive whole, the
// peer's credentials from the kernel (SO_PEERCRED: not what the peer claims), and file
// descriptors passed with SCM_RIGHTS. Every descriptor is close-on-exec.

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton {

// Who is on the other end of a connected unix socket, as the kernel saw it at connect().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Binds and listens on `path` (replacing a stale socket file there) with file mode `mode`. The
// socket is non-blocking: accept when poll says a connection waits.
absl::StatusOr<int> ListenUnix(const std::string& path, int mode);
// Connects to the socket at `path`.
absl::StatusOr<int> ConnectUnix(const std::string& path);
absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd);

// Sends one message, with `pass_fd` attached unless it is -1. Never blocks: a peer whose socket
// is full gets Unavailable (a peer that does not read its replies is not waited for).
absl::Status SendPacket(int fd, const void* data, size_t bytes, int pass_fd = -1);

// The most descriptors one message carries.
inline constexpr size_t kMaxPassedFds = 32;

// Sends one message with the descriptors `pass_fds` (at most kMaxPassedFds) attached.
absl::Status SendPacketWithFds(int fd, const void* data, size_t bytes,
                               std::span<const int> pass_fds);

// Receives one message into `data` (at most `capacity` bytes; a longer one is an error, as is
// more than one passed descriptor). A passed descriptor is stored in `*received_fd`, else -1
// (the caller owns it). Returns the message's length, 0 when the peer has closed. Waits at most
// until `deadline` (DeadlineExceeded), and not at all for a non-blocking socket with nothing
// to read (Unavailable).
absl::StatusOr<size_t> RecvPacket(int fd, void* data, size_t capacity, int* received_fd,
                                  absl::Time deadline = absl::InfiniteFuture());

// The same, accepting up to `max_fds` (<= kMaxPassedFds) descriptors, stored in order in
// `received_fds` (the caller owns them). More than `max_fds` is an error, and closes them all.
absl::StatusOr<size_t> RecvPacketWithFds(int fd, void* data, size_t capacity, size_t max_fds,
                                         std::vector<int>* received_fds,
                                         absl::Time deadline = absl::InfiniteFuture());

}  // namespace baton
