// Communicator formation through real daemons: missing ranks, bad ids, duplicate ranks.

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

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

}  // namespace
}  // namespace baton
