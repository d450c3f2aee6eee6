#include "daemon/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"

namespace baton::daemon {

bool NotifySystemd(absl::string_view state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || *path == '\0') return true;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if (length >= sizeof(address.sun_path)) return false;
  std::memcpy(address.sun_path, path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t sent =
      sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&address),
             static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length));
  close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

std::optional<absl::Duration> SystemdWatchdogInterval() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (usec == nullptr) return std::nullopt;
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid != nullptr) {
    int64_t watched = 0;
    if (!absl::SimpleAtoi(pid, &watched) || watched != getpid()) return std::nullopt;
  }
  int64_t micros = 0;
  if (!absl::SimpleAtoi(usec, &micros) || micros <= 0) return std::nullopt;
  return absl::Microseconds(micros);
}

}  // namespace baton::daemon
