#include "daemon/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

TEST(SystemdNotifyTest, SendsTheStateToNotifySocket) {
  char dir[] = "/tmp/baton-notify-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/notify";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ASSERT_TRUE(NotifySystemd("READY=1\nSTATUS=serving"));
  char buffer[256] = {};
  const ssize_t n = recv(fd, buffer, sizeof(buffer) - 1, MSG_DONTWAIT);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "READY=1\nSTATUS=serving");
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifySystemd("READY=1")) << "outside systemd it is a no-op";
  close(fd);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(SystemdNotifyTest, WatchdogIntervalOnlyForThisProcess) {
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  EXPECT_FALSE(SystemdWatchdogInterval().has_value());
  setenv("WATCHDOG_USEC", "30000000", 1);
  EXPECT_EQ(SystemdWatchdogInterval(), absl::Seconds(30));
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(SystemdWatchdogInterval(), absl::Seconds(30));
  setenv("WATCHDOG_PID", "1", 1);
  EXPECT_FALSE(SystemdWatchdogInterval().has_value()) << "meant for another process";
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  setenv("WATCHDOG_USEC", "soon", 1);
  EXPECT_FALSE(SystemdWatchdogInterval().has_value());
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
}

}  // namespace
}  // namespace baton::daemon
