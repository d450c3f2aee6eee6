// A daemon that is killed or restarted comes back on the same addresses: its peers reconnect to
// it (a new handshake) for the next communicator, instead of failing that communicator's first
// operation on the connection the old instance left behind.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/local_cluster.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::BlockPlacement;
using testing::MustConnect;
using testing::NewCommId;
using testing::TestCluster;

// The daemons' options, for the first start and every restart: a lost operation fails well
// within the test's time.
const std::vector<std::string>& ExtraArgs() {
  static const auto* args = new std::vector<std::string>{"--op-timeout=20s"};
  return *args;
}

// `daemon` started again as LocalTestCluster started it, but on the addresses its first instance
// bound (its socket, peer and data addresses), logging to the same file. Stopped when destroyed
// (and with the test process).
class RestartedDaemon {
 public:
  RestartedDaemon(const client::LocalDaemon& daemon, const std::string& dir) {
    const std::string ready = absl::StrCat(dir, "/", daemon.node_name, ".restarted.ready");
    std::error_code error;
    std::filesystem::remove(ready, error);
    std::vector<std::string> args = {
        "--node-name=" + daemon.node_name,
        "--socket=" + daemon.socket,
        "--peer-listen=" + daemon.peer_address,
        "--data-listen=" + daemon.data_address,
        "--metrics-listen=127.0.0.1:0",
        "--advertise-host=127.0.0.1",
        "--ready-file=" + ready,
        "--tls-cert=" + daemon.tls_cert,
        "--tls-key=" + daemon.tls_key,
        "--tls-ca=" + daemon.tls_ca,
    };
    args.insert(args.end(), ExtraArgs().begin(), ExtraArgs().end());
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      if (freopen(daemon.log.c_str(), "a", stderr) == nullptr) _exit(1);
      std::vector<char*> argv = {const_cast<char*>(BATOND_PATH)};
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(BATOND_PATH, argv.data());
      _exit(127);
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!std::filesystem::exists(ready, error) && client::IsRunning(pid_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ready_ = std::filesystem::exists(ready, error);
  }
  ~RestartedDaemon() { Stop(SIGTERM); }
  RestartedDaemon(const RestartedDaemon&) = delete;
  RestartedDaemon& operator=(const RestartedDaemon&) = delete;

  bool ready() const { return ready_; }

  // Sends `signal` and waits until the daemon has exited.
  void Stop(int signal) {
    if (pid_ <= 0) return;
    kill(pid_, signal);
    client::StopProcess(pid_, absl::Seconds(10));
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
  bool ready_ = false;
};

// Stops `pid` with `signal` and waits until it has exited.
void Kill(pid_t pid, int signal) {
  kill(pid, signal);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client::IsRunning(pid) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_FALSE(client::IsRunning(pid));
}

// A new communicator of one rank on each of the two daemons; its first operation, an all-reduce,
// must succeed and be right.
void FirstOperationOfANewCommunicatorSucceeds(const TestCluster& cluster, int round) {
  const std::string id = NewCommId(cluster);
  ASSERT_FALSE(id.empty());
  testing::RunRanks(cluster, id, 2, BlockPlacement(cluster, 2), [&](int rank, Communicator& comm) {
    std::vector<float> data(4096, static_cast<float>(rank + 1));
    const Status reduced =
        comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(reduced.ok()) << "round " << round << ", rank " << rank << ": " << reduced;
    EXPECT_TRUE(testing::ElementsAre(data.data(), data.size(), [](size_t) { return 3.0f; }))
        << "round " << round << ", rank " << rank;
  });
}

TEST(PeerRestartTest, ARestartedPeerIsReconnectedNotReported) {
  TestCluster cluster(2, ExtraArgs());
  ASSERT_TRUE(cluster.ok());
  FirstOperationOfANewCommunicatorSucceeds(cluster, 0);
  const client::LocalDaemon b = cluster.daemons()[1];
  Kill(b.pid, SIGKILL);
  std::unique_ptr<RestartedDaemon> restarted;
  for (int round = 1; round <= 4; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    restarted = nullptr;  // the previous instance, if any, stops before the next starts
    restarted = std::make_unique<RestartedDaemon>(b, cluster.dir());
    ASSERT_TRUE(restarted->ready()) << b.log;
    FirstOperationOfANewCommunicatorSucceeds(cluster, round);
    if (::testing::Test::HasFailure()) break;
    // Killed, then stopped cleanly, in turn: the peer sees a reset or a goodbye.
    restarted->Stop(round % 2 == 0 ? SIGKILL : SIGTERM);
  }
}

}  // namespace
}  // namespace baton
