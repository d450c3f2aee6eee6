// One local user cannot take every communicator the daemon can hold: a user (uid 65534, in a
// process of its own) that joins communicators of one rank in a loop is refused, naming the
// limit, once its sessions hold max_ranks_per_session and then max_ranks_per_uid ranks, while
// another user still joins and all-reduces. Each rank a session holds costs batond a
// communicator's threads and memory; without a limit a loop of joins exhausts them for the node.

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/session_protocol.h"
#include "tests/testing/core_ranks.h"
#include "tests/testing/local_test_cluster.h"

namespace baton {
namespace {

using core::CallOptions;
using core::Client;
using core::Communicator;
using core::DataType;
using core::ReduceOp;

constexpr int kPerSession = 12;
constexpr int kPerUid = 20;
constexpr char kSocketEnv[] = "BATON_RANK_LIMITS_SOCKET";
constexpr char kReportEnv[] = "BATON_RANK_LIMITS_REPORT";

// Joins communicators of one rank through `client` until a join is refused; returns how many
// it holds and the refusal.
std::pair<int, absl::Status> JoinUntilRefused(Client& client,
                                              std::vector<std::unique_ptr<Communicator>>& held) {
  for (int joined = 0; joined < 1000; ++joined) {
    absl::StatusOr<std::string> id = client.CreateCommId();
    if (!id.ok()) return {joined, id.status()};
    absl::StatusOr<std::unique_ptr<Communicator>> comm = client.Join(*id, 1, 0, absl::Seconds(20));
    if (!comm.ok()) return {joined, comm.status()};
    held.push_back(*std::move(comm));
  }
  return {1000, absl::OkStatus()};
}

// The other user's process (this binary again, run as uid 65534 by the test below): holds as many
// ranks as it may through two sessions, checks the refusals, reports 'h' (or 'x') on the report
// descriptor, and keeps its ranks until standard input closes.
TEST(RankLimitsTest, OtherUser) {
  const char* socket = std::getenv(kSocketEnv);
  const char* report_env = std::getenv(kReportEnv);
  int report = -1;
  if (socket == nullptr || report_env == nullptr || !absl::SimpleAtoi(report_env, &report)) {
    GTEST_SKIP() << "run by HoldingRanksDoesNotKeepOtherUsersOut";
  }
  bool ok = true;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Communicator>> held;
  for (const char* limit : {"max_ranks_per_session", "max_ranks_per_uid"}) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket);
    ASSERT_TRUE(client.ok()) << client.status();
    const auto [joined, refused] = JoinUntilRefused(**client, held);
    EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), limit)) << refused;
    EXPECT_EQ(joined,
              limit == std::string("max_ranks_per_session") ? kPerSession : kPerUid - kPerSession)
        << limit;
    ok = ok && absl::IsResourceExhausted(refused) && absl::StrContains(refused.message(), limit);
    clients.push_back(*std::move(client));
  }
  const char byte = ok && static_cast<int>(held.size()) == kPerUid ? 'h' : 'x';
  ASSERT_EQ(write(report, &byte, 1), 1);
  char ignored;
  while (read(STDIN_FILENO, &ignored, 1) > 0) {
  }
}

TEST(RankLimitsTest, HoldingRanksDoesNotKeepOtherUsersOut) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run a second user";
  testing::LocalTestCluster cluster(1,
                                    {absl::StrCat("--max-ranks-per-session=", kPerSession),
                                     absl::StrCat("--max-ranks-per-uid=", kPerUid)},
                                    /*tls=*/false);
  ASSERT_TRUE(cluster.ok());
  // Both sockets reachable by other users, as on a shared node.
  ASSERT_EQ(chmod(cluster.dir().c_str(), 0711), 0);
  ASSERT_EQ(chmod(cluster.socket(0).c_str(), 0666), 0);
  ASSERT_EQ(chmod(session::SessionSocketPath(cluster.socket(0)).c_str(), 0666), 0);

  int report[2];
  int hold[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  // Everything the child needs is made before fork: between fork and exec only system calls.
  constexpr int kReportFd = 100;
  const std::string socket_env = absl::StrCat(kSocketEnv, "=", cluster.socket(0));
  const std::string report_env = absl::StrCat(kReportEnv, "=", kReportFd);
  const std::string filter = "--gtest_filter=RankLimitsTest.OtherUser";
  char* const argv[] = {self, const_cast<char*>(filter.c_str()), nullptr};
  char* const envp[] = {const_cast<char*>(socket_env.c_str()),
                        const_cast<char*>(report_env.c_str()), nullptr};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // This binary again, as nobody, running OtherUser only: a process of its own, whose standard
    // input is the hold pipe and whose descriptor 100 is the report pipe.
    if (dup2(hold[0], STDIN_FILENO) < 0 || dup2(report[1], kReportFd) < 0) _exit(2);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    execve(self, argv, envp);
    _exit(4);
  }
  close(report[1]);
  close(hold[0]);
  char byte = 0;
  const ssize_t got = read(report[0], &byte, 1);
  close(report[0]);

  // Meanwhile (the other user holds all it may), root joins and all-reduces.
  testing::RunCoreRanks(
      cluster, 2, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        float x = static_cast<float>(rank + 1);
        absl::Status status = comm.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                             CallOptions(absl::Seconds(30)));
        EXPECT_TRUE(status.ok()) << status;
        EXPECT_EQ(x, 3.0f);
      });
  close(hold[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(got, 1);
  EXPECT_EQ(byte, 'h') << "the other user was not refused at its limits (its output above)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace baton
