// Communicator formation through real daemons: missing ranks, bad ids, duplicate ranks.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

std::string NewCommIdOf(const TestCluster& cluster, int daemon = 0) {
  return testing::NewCommId(cluster, daemon);
}

TEST(JoinTest, AMissingRankFailsEveryJoinAtItsDeadlineNamingTheMissingRank) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> root = MustConnect(cluster.daemons()[0].socket);
  const std::string id = *root->CreateCommId();
  // World of 4; rank 2 never comes.
  std::vector<Status> results(4);
  std::vector<absl::Duration> took(4);
  std::vector<std::thread> threads;
  for (int rank : {0, 1, 3}) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank % 2].socket);
      const absl::Time start = absl::Now();
      results[rank] = client->Join(id, 4, rank, std::chrono::seconds(2)).status();
      took[rank] = absl::Now() - start;
    });
  }
  for (auto& t : threads) t.join();
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(results[rank].code(), StatusCode::kDeadlineExceeded) << results[rank];
    EXPECT_NE(results[rank].message().find("[2]"), std::string::npos) << results[rank];
    EXPECT_GE(took[rank], absl::Milliseconds(1900));
    EXPECT_LT(took[rank], absl::Seconds(10)) << "must fail at its deadline, not hang";
  }
}

TEST(JoinTest, BadIdsAndRanksGetClearErrors) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[1].socket);
  std::unique_ptr<Client> root = MustConnect(cluster.daemons()[0].socket);
  const std::string id = *root->CreateCommId();
  const std::string peer = id.substr(0, id.rfind('/'));

  auto join = [&](const std::string& comm_id, int world, int rank) {
    return client->Join(comm_id, world, rank, std::chrono::seconds(1)).status();
  };
  EXPECT_EQ(join("not-an-id", 2, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(join(peer + "/0123456789abcdef0123456789abcdef", 2, 0).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(join(id, 2, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(join(id, 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(join(id, 2, -1).code(), StatusCode::kInvalidArgument);

  // Two clients claim rank 0: whichever reaches the root second is refused at once, the other
  // waits and forms the communicator with rank 1.
  std::vector<StatusOr<std::unique_ptr<Communicator>>> claims;
  claims.emplace_back(Status(StatusCode::kUnknown, "not run"));
  claims.emplace_back(Status(StatusCode::kUnknown, "not run"));
  absl::Mutex mu;
  int returned = 0;
  std::vector<std::thread> claimants;
  for (int i = 0; i < 2; ++i) {
    claimants.emplace_back([&, i] {
      StatusOr<std::unique_ptr<Communicator>> result =
          (i == 0 ? root : client)->Join(id, 2, 0, std::chrono::seconds(20));
      absl::MutexLock lock(&mu);
      claims[i] = std::move(result);
      ++returned;
    });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n >= 1; }, &returned));
  }
  StatusOr<std::unique_ptr<Communicator>> second = client->Join(id, 2, 1, std::chrono::seconds(20));
  for (auto& t : claimants) t.join();
  ASSERT_TRUE(second.ok()) << second.status();
  const int winner = claims[0].ok() ? 0 : 1;
  ASSERT_TRUE(claims[winner].ok()) << claims[winner].status();
  const Status duplicate = claims[1 - winner].status();
  EXPECT_EQ(duplicate.code(), StatusCode::kInvalidArgument) << duplicate;
  EXPECT_NE(duplicate.message().find("already joined"), std::string::npos) << duplicate;
  std::unique_ptr<Communicator>& first_comm = *claims[winner];
  float a = 1, b = 2;
  std::thread op([&] {
    EXPECT_TRUE(first_comm->AllReduce(&a, &a, 1, DataType::kFloat32, ReduceOp::kSum).ok());
  });
  EXPECT_TRUE((*second)->AllReduce(&b, &b, 1, DataType::kFloat32, ReduceOp::kSum).ok());
  op.join();
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 3);
}

// A join whose id names a root daemon that is not there fails at the join's deadline, not after
// it: whether nothing listens at the root's address (the forwarding daemon's channel is in
// connection backoff) or something accepts connections there and never answers.
TEST(JoinTest, AJoinTowardsADeadRootFailsAtItsDeadline) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
  for (const bool listening : {false, true}) {
    SCOPED_TRACE(listening ? "a root that never answers" : "no root at the address");
    // Held for the whole test, so that no one else gets the port.
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    if (listening) {
      ASSERT_EQ(listen(fd, 16), 0);
    }
    const std::string root = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    const absl::Time start = absl::Now();
    const Status status =
        client->Join(root + "/0123456789abcdef0123456789abcdef", 2, 0, std::chrono::seconds(3))
            .status();
    const absl::Duration took = absl::Now() - start;
    close(fd);
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status;
    EXPECT_NE(status.message().find(root), std::string::npos) << status;
    EXPECT_GE(took, absl::Milliseconds(2900)) << "not before its deadline";
    // Before, the forwarded call gave the root two seconds more.
    EXPECT_LT(took, absl::Milliseconds(4500)) << "at its deadline, not after";
  }
}

// A communicator id is "<root address>/<32 hex digits>", printable ASCII: bytes that are not UTF-8
// (which gRPC's string fields cannot carry) or not printable get InvalidArgument that says so
// without quoting them back, whether the root is this daemon or another.
TEST(JoinTest, AnIdThatIsNotPrintableAsciiIsRefusedWithoutBeingEchoed) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[1].socket);
  const std::string id = NewCommIdOf(cluster);
  const size_t slash = id.rfind('/');
  const std::vector<std::string> bad = {
      id.substr(0, slash) + "\xff" + id.substr(slash),      // not UTF-8, in the address
      id.substr(0, id.size() - 2) + "\xc3(",                // not UTF-8, in the secret
      id.substr(0, slash) + "\xc3\xa9" + id.substr(slash),  // UTF-8, but not ASCII
      id.substr(0, slash) + "\n" + id.substr(slash),        // a control character
      std::string("\x80\x80\x80") + "/0123456789abcdef0123456789abcdef",
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(i);
    const Status status = client->Join(bad[i], 2, 0, std::chrono::seconds(5)).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("communicator id"), std::string::npos) << status;
    EXPECT_NE(status.message().find("printable ASCII"), std::string::npos) << status;
    for (char c : status.message()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(static_cast<unsigned char>(c));
    }
  }
  // The daemon still serves a good id.
  EXPECT_TRUE(client->Join(NewCommIdOf(cluster, 1), 1, 0, std::chrono::seconds(10)).ok());
}

// Every one of the secret's 32 hex digits is part of it: the second half must be hex too (it is
// not part of the tag, which only the first half makes), a secret that differs from the root's in
// its last bit is refused, and upper case digits name the same 128-bit secret as lower case ones.
TEST(JoinTest, EveryDigitOfTheSecretIsChecked) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[1].socket);
  for (int root : {0, 1}) {
    SCOPED_TRACE(root == 1 ? "root on this daemon" : "root on another daemon");
    const std::string id = NewCommIdOf(cluster, root);
    ASSERT_EQ(id.size() - id.rfind('/') - 1, 32u) << id;
    std::string not_hex = id;
    not_hex.replace(id.size() - 16, 16, "zzzzzzzzzzzzzzzz");
    const Status refused = client->Join(not_hex, 1, 0, std::chrono::seconds(5)).status();
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("32 hex digits"), std::string::npos) << refused;

    std::string last_bit = id;
    const std::string digits = "0123456789abcdef";
    last_bit.back() = digits[digits.find(last_bit.back()) ^ 1];  // the lowest bit flipped
    const Status wrong = client->Join(last_bit, 1, 0, std::chrono::seconds(5)).status();
    EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied) << wrong;

    std::string upper = id;
    for (size_t i = id.rfind('/') + 1; i < upper.size(); ++i) {
      upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[i])));
    }
    StatusOr<std::unique_ptr<Communicator>> joined =
        client->Join(upper, 1, 0, std::chrono::seconds(10));
    ASSERT_TRUE(joined.ok()) << joined.status();
    float x = 2;
    EXPECT_TRUE((*joined)->AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(x, 2);
  }
}

}  // namespace
}  // namespace baton
