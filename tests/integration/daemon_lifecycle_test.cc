// batond as a process: refuses a socket another daemon owns, and on SIGTERM fails in-flight
// operations with a clear error and removes its socket.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(DaemonLifecycleTest, ASecondDaemonOnTheSameSocketRefusesToStart) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  const std::string log = cluster.dir() + "/second.log";
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stderr);
    execl(BATOND_PATH, BATOND_PATH, ("--socket=" + cluster.daemons()[0].socket).c_str(),
          "--peer-listen=127.0.0.1:0", "--data-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
          nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string message = ReadFile(log);
  EXPECT_NE(message.find("already owns"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(cluster.daemons()[0].pid)), std::string::npos) << message;
  // The first daemon still serves.
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
  EXPECT_TRUE(client->CreateCommId().ok());
}

// One all-reduce of `count` floats, one rank on each daemon of `cluster`.
void AllReduceOnce(TestCluster& cluster, size_t count) {
  const int size = static_cast<int>(cluster.daemons().size());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
      auto comm = client->Join(id, size, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data(count, 1.0f);
      ASSERT_TRUE(
          (*comm)
              ->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum)
              .ok());
    });
  }
  for (auto& t : ranks) t.join();
}

TEST(DaemonLifecycleTest, HealthReadinessAndMetricsAreServedOverHttp) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  const std::string http = cluster.daemons()[0].metrics_address;
  EXPECT_EQ(testing::HttpGet(http, "/healthz"), "200\nok\n");
  EXPECT_EQ(testing::HttpGet(http, "/readyz"), "200\nready\n");
  EXPECT_EQ(testing::HttpGet(http, "/nope").substr(0, 3), "404");

  // One all-reduce of 1000 floats between the two daemons, then the counters show it.
  AllReduceOnce(cluster, 1000);
  const std::string metrics = testing::HttpGet(http, "/metrics");
  ASSERT_EQ(metrics.substr(0, 3), "200") << metrics;
  const std::string labels = "{local_node=\"node-0\",peer_node=\"node-1\",transport=\"tcp\"}";
  // Two daemons, 4000 bytes: the tuner picks doubling. Each daemon sends its 32-byte operation
  // signature, then its whole 4000-byte buffer to the other, each message with a 40-byte frame
  // header.
  EXPECT_NE(metrics.find("baton_link_transmitted_bytes_total" + labels + " 4112"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("baton_link_transmitted_messages_total" + labels + " 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("baton_collectives_completed_total{local_node=\"node-0\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find("baton_collective_duration_seconds_count{algorithm=\"doubling\",local_node="
                   "\"node-0\",op=\"all_reduce\",outcome=\"ok\"} 1"),
      std::string::npos)
      << metrics;
}

// After an operation (peer connections, link probes and a metrics scrape behind it) each daemon
// exits well within a second of SIGTERM. Before, stopping took 1-3 s (the HTTP server's accept
// loop polls for 2 s at a time; the last gRPC channel shut gRPC down and waited on its timers),
// once 9 s.
TEST(DaemonLifecycleTest, SigtermStopsPromptlyAfterWork) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  AllReduceOnce(cluster, 1 << 20);
  ASSERT_EQ(testing::HttpGet(cluster.daemons()[0].metrics_address, "/metrics").substr(0, 3), "200");
  for (const auto& daemon : cluster.daemons()) {
    const absl::Time start = absl::Now();
    EXPECT_TRUE(client::StopProcess(daemon.pid, absl::Seconds(10)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << daemon.log;
  }
}

// With stop_with_caller (as TestCluster sets it) the daemons stop when the thread that started
// them ends, as they would when a killed test process takes its threads with it; without it
// they outlive their starter, as `baton local up` needs.
TEST(DaemonLifecycleTest, DaemonsStopWithTheirStarterOnlyWhenAskedTo) {
  for (bool stop_with_caller : {true, false}) {
    SCOPED_TRACE(stop_with_caller ? "stop_with_caller" : "outliving");
    char dir[] = "/tmp/baton-it-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    client::LocalClusterOptions options;
    options.dir = dir;
    options.nodes = 1;
    options.batond = BATOND_PATH;
    options.stop_with_caller = stop_with_caller;
    absl::StatusOr<std::vector<client::LocalDaemon>> daemons;
    std::thread([&] { daemons = client::StartLocalCluster(options); }).join();
    ASSERT_TRUE(daemons.ok()) << daemons.status();
    const pid_t pid = (*daemons)[0].pid;
    // Stopping takes a moment; surviving is judged after half a second.
    const absl::Time deadline =
        absl::Now() + (stop_with_caller ? absl::Seconds(10) : absl::Milliseconds(500));
    while (client::IsRunning(pid) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(client::IsRunning(pid), !stop_with_caller) << (*daemons)[0].log;
    if (!stop_with_caller) {
      // It still serves.
      EXPECT_TRUE(MustConnect((*daemons)[0].socket)->CreateCommId().ok());
    } else {
      EXPECT_NE(ReadFile((*daemons)[0].log).find("SIGTERM"), std::string::npos)
          << ReadFile((*daemons)[0].log);
    }
    EXPECT_TRUE(client::StopLocalCluster(dir).ok());
    std::error_code error;
    std::filesystem::remove_all(dir, error);
  }
}

// A process that has exited but that its parent has not reaped (a zombie) is not running: `baton
// local down` and the tests wait for daemons whose parent is long gone.
TEST(DaemonLifecycleTest, AnExitedProcessNobodyReapedIsNotRunning) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    // Forks a child that exits at once, tells the test its pid, and never reaps it.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    (void)write(pipe_fds[1], &child, sizeof(child));
    sleep(30);
    _exit(0);
  }
  pid_t zombie = 0;
  ASSERT_EQ(read(pipe_fds[0], &zombie, sizeof(zombie)), static_cast<ssize_t>(sizeof(zombie)));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  // Until it has exited it may still count as running; it must not for long.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client::IsRunning(zombie) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(client::IsRunning(zombie));
  EXPECT_EQ(kill(zombie, 0), 0) << "the child should still be a zombie of its parent";
  EXPECT_TRUE(client::IsRunning(parent));
  kill(parent, SIGKILL);
  int status = 0;
  waitpid(parent, &status, 0);
  EXPECT_FALSE(client::IsRunning(parent));
}

TEST(DaemonLifecycleTest, SigtermFailsInFlightOperationsAndRemovesTheSocket) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  Status in_flight;
  std::atomic<bool> joined{false};
  std::thread rank0([&] {
    std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
    auto comm = client->Join(id, 2, 0, std::chrono::seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    joined = true;
    float value = 1;
    // Rank 1 never submits, so this waits until the daemon shuts down.
    in_flight = (*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                   CallOptions(std::chrono::seconds(60)));
  });
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[1].socket);
  auto comm = client->Join(id, 2, 1, std::chrono::seconds(30));
  ASSERT_TRUE(comm.ok()) << comm.status();
  while (!joined) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(200));  // let rank 0's operation reach its daemon

  const absl::Time start = absl::Now();
  ASSERT_TRUE(client::StopProcess(cluster.daemons()[0].pid, absl::Seconds(10)))
      << "batond must exit on SIGTERM within the grace period";
  rank0.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(in_flight.ok());
  EXPECT_NE(in_flight.message().find("shutting down"), std::string::npos) << in_flight;
  EXPECT_FALSE(std::filesystem::exists(cluster.daemons()[0].socket));
  EXPECT_NE(ReadFile(cluster.daemons()[0].log).find("stopped"), std::string::npos);
}

// A daemon that stops while ranks wait in Join, for a communicator rooted on it or forwarded
// from it to another root, fails those joins at once instead of waiting out their deadlines (a
// minute here; Kubernetes kills a pod 30 s after SIGTERM by default).
TEST(DaemonLifecycleTest, SigtermFailsWaitingJoinsAtOnceRootedHereOrForwarded) {
  for (int stopped : {0, 1}) {  // 0: the root daemon; 1: the daemon forwarding to it
    SCOPED_TRACE(stopped == 0 ? "root stops" : "forwarding daemon stops");
    TestCluster cluster(2);
    ASSERT_TRUE(cluster.ok());
    const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
    Status joined;
    std::atomic<bool> returned{false};
    std::thread rank0([&] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[stopped].socket);
      // World of 2; rank 1 never comes.
      joined = client->Join(id, 2, 0, std::chrono::seconds(60)).status();
      returned = true;
    });
    absl::SleepFor(absl::Milliseconds(300));  // let the join reach the root's rendezvous
    EXPECT_FALSE(returned);
    const absl::Time start = absl::Now();
    EXPECT_TRUE(client::StopProcess(cluster.daemons()[stopped].pid, absl::Seconds(10)))
        << "batond must exit on SIGTERM without waiting for the join's deadline";
    rank0.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_FALSE(joined.ok());
    EXPECT_NE(joined.code(), StatusCode::kDeadlineExceeded) << joined;
  }
}

}  // namespace
}  // namespace baton
