// One party cannot fill a limit that every job needs: a host that holds idle connections to the
// data ports, or a local user that holds idle connections to the session socket, gets its own
// share and no more, and the log stays short however fast it tries again.

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/session_protocol.h"
#include "tests/integration/test_cluster.h"
#include "tests/testing/raw_session.h"

namespace baton {
namespace {

using testing::BlockPlacement;
using testing::MustConnect;
using testing::NewCommId;
using testing::TestCluster;

// Lines of `path` that contain `text` (all lines when empty).
size_t CountLines(const std::string& path, const std::string& text = "") {
  std::ifstream in(path);
  std::string line;
  size_t count = 0;
  while (std::getline(in, line)) count += line.find(text) != std::string::npos ? 1 : 0;
  return count;
}

// A TCP connection to `address` ("127.0.0.1:port") from the loopback address `source`, another
// host as far as the daemon can tell; -1 if it could not connect within a second.
int ConnectFrom(const char* source, const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  timeval timeout{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  inet_pton(AF_INET, address.substr(0, address.rfind(':')).c_str(), &to.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One all-reduce on a new communicator of one rank on each daemon; it must succeed and be right.
void AllReduceAcross(const TestCluster& cluster) {
  const std::string id = NewCommId(cluster);
  ASSERT_FALSE(id.empty());
  testing::RunRanks(cluster, id, 2, BlockPlacement(cluster, 2), [](int rank, Communicator& comm) {
    std::vector<float> data(1024, static_cast<float>(rank + 1));
    const Status reduced =
        comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(reduced.ok()) << "rank " << rank << ": " << reduced;
    EXPECT_TRUE(testing::ElementsAre(data.data(), data.size(), [](size_t) { return 3.0f; }));
  });
}

// A host (127.0.0.2) keeps 64 idle connections open to each daemon's data port, opening a new
// one whenever one is closed: as many as the daemons once let wait in the handshake in all. Two
// daemons that have never connected still connect and reduce (the host gets its share of the
// places, and a daemon turned away tries again), and the daemons log the refusals a few times,
// not once each.
TEST(ConnectionLimitsTest, OneHostsIdleDataConnectionsDoNotKeepDaemonsApart) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  constexpr int kHeld = 64;
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::atomic<uint64_t> opened{0};
  std::thread host([&] {
    std::vector<int> held(2 * kHeld, -1);
    while (!stop.load()) {
      for (size_t i = 0; i < held.size(); ++i) {
        if (held[i] >= 0) {
          pollfd pfd{held[i], POLLIN, 0};
          char byte;
          if (poll(&pfd, 1, 0) == 1 && recv(held[i], &byte, 1, MSG_DONTWAIT) <= 0) {
            close(held[i]);
            held[i] = -1;
          }
        }
        if (held[i] < 0) {
          held[i] = ConnectFrom("127.0.0.2", cluster.daemons()[i % 2].data_address);
          opened += held[i] >= 0 ? 1 : 0;
        }
      }
      ++rounds;
      // Paced, so that the flood of refused connections does not starve the daemons of CPU.
      absl::SleepFor(absl::Milliseconds(50));
    }
    for (int fd : held) {
      if (fd >= 0) close(fd);
    }
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (rounds.load() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(rounds.load(), 2);
  AllReduceAcross(cluster);
  AllReduceAcross(cluster);
  stop = true;
  host.join();
  // The host kept trying: far more connections than it could hold.
  EXPECT_GT(opened.load(), uint64_t{2 * kHeld});
  for (const client::LocalDaemon& daemon : cluster.daemons()) {
    EXPECT_GE(CountLines(daemon.log, "refused a connection"), 1u) << daemon.log;
    EXPECT_LE(CountLines(daemon.log, "refused a connection"), 10u) << daemon.log;
  }
}

// The session socket reachable by other users, as a daemon's socket is on a shared node.
void OpenToEveryone(const TestCluster& cluster) {
  ASSERT_EQ(chmod(cluster.dir().c_str(), 0711), 0);
  ASSERT_EQ(chmod(session::SessionSocketPath(cluster.socket(0)).c_str(), 0666), 0);
}

// In a child that became uid and gid 65534 (nobody): holds kHeld connections to the session
// socket `path` open without a session, says so ('h' on `report`), waits for `go`, opens and
// closes `flood` more, says so ('f'), and exits once `go` closes. Raw system calls only (the
// child of a multithreaded process).
[[noreturn]] void RunNobody(const char* path, int report, int go, int held_count, int flood) {
  if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path, sizeof(address.sun_path) - 1);
  auto connect_one = [&address] {
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  };
  int held = 0;
  for (int i = 0; i < held_count; ++i) held += connect_one() >= 0 ? 1 : 0;  // kept open
  char byte = held == held_count ? 'h' : 'x';
  if (write(report, &byte, 1) != 1) _exit(3);
  if (read(go, &byte, 1) != 1) _exit(4);
  for (int i = 0; i < flood; ++i) {
    const int fd = connect_one();
    if (fd >= 0) close(fd);
  }
  byte = 'f';
  if (write(report, &byte, 1) != 1) _exit(5);
  while (read(go, &byte, 1) > 0) {
  }
  _exit(0);
}

// A local user (nobody) holds 200 connections to the session socket without opening a session,
// more than the daemon once let wait in all, then opens and closes 3,000 more as fast as it can:
// root still opens sessions, and the daemon logs the refusals a few times, not once each.
TEST(ConnectionLimitsTest, OneUsersIdleSessionConnectionsDoNotKeepOthersOut) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run a second user";
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  OpenToEveryone(cluster);
  const std::string path = session::SessionSocketPath(cluster.socket(0));
  const std::string& log = cluster.daemons()[0].log;
  int report[2];
  int go[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    close(go[1]);
    RunNobody(path.c_str(), report[1], go[0], /*held_count=*/200, /*flood=*/3000);
  }
  close(report[1]);
  close(go[0]);
  // However the test ends, the child is told to go and waited for.
  struct Reaper {
    pid_t child;
    int report;
    int go;
    ~Reaper() {
      if (go >= 0) close(go);
      close(report);
      int status = 0;
      if (child > 0) waitpid(child, &status, 0);
    }
  } reaper{child, report[0], go[1]};
  char byte = 0;
  ASSERT_EQ(read(report[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'h') << "nobody could not connect 200 times";
  absl::StatusOr<std::unique_ptr<testing::RawSession>> session =
      testing::RawSession::Connect(cluster.socket(0));
  EXPECT_TRUE(session.ok()) << session.status();
  if (std::unique_ptr<Client> client = MustConnect(cluster.socket(0)); client != nullptr) {
    EXPECT_TRUE(client->CreateCommId().ok());
  }
  byte = 'g';
  ASSERT_EQ(write(go[1], &byte, 1), 1);
  ASSERT_EQ(read(report[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'f');
  // The daemon accepts in order: once a connection made after the flood is answered, every
  // connection of the flood has been accepted and refused (or served).
  session = testing::RawSession::Connect(cluster.socket(0));
  EXPECT_TRUE(session.ok()) << session.status();
  close(go[1]);
  reaper.go = -1;
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  reaper.child = -1;  // reaped
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  // Refused, and said so, but only a few times.
  EXPECT_GE(CountLines(log, "session socket: refused"), 1u) << log;
  EXPECT_LE(CountLines(log, "session socket"), 10u) << log;
  EXPECT_LE(CountLines(log), 60u) << log;
}

}  // namespace
}  // namespace baton
