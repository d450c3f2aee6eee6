// A local user who creates communicator ids in a loop to push out another job's: ids are made
// only for an authenticated session, counted against its uid, and an id that a rank has joined
// with is never forgotten to make room, so the job's ranks still form their communicator. (The
// test runs as one uid: the victim's ids and the attacker's count against the same uid here;
// tests/daemon/rendezvous_test.cc keeps uids apart.)

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/session_protocol.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/test_cluster.h"
#include "tests/testing/raw_session.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

// Runs the two ranks of `id` on the daemon (each its own client), all-reducing 256 floats.
void CompleteJob(const TestCluster& cluster, const std::string& id) {
  testing::RunRanks(
      cluster, id, 2, [](int) { return 0; },
      [](int rank, Communicator& comm) {
        std::vector<float> data(256, static_cast<float>(rank + 1));
        Status status = comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                       ReduceOp::kSum);
        ASSERT_TRUE(status.ok()) << "rank " << rank << ": " << status;
        EXPECT_EQ(data.front(), 3.0f);
        EXPECT_EQ(data.back(), 3.0f);
        EXPECT_TRUE(comm.Destroy().ok());
      });
}

TEST(CommIdLimitsTest, OnlyAnAuthenticatedSessionGetsAnId) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  auto stub = v1::Client::NewStub(
      grpc::CreateChannel("unix://" + cluster.socket(0), grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::unique_ptr<testing::RawSession>> session =
      testing::RawSession::Connect(cluster.socket(0));
  ASSERT_TRUE(session.ok()) << session.status();
  auto create = [&](uint64_t session_id, const std::string* token) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (token != nullptr) context.AddMetadata(session::kTokenMetadata, *token);
    v1::CreateCommIdRequest request;
    request.set_session_id(session_id);
    v1::CreateCommIdResponse response;
    grpc::Status status = stub->CreateCommId(&context, request, &response);
    EXPECT_EQ(status.ok(), !response.comm_id().empty());
    return status.error_code();
  };
  // No session, a session without its token, and a wrong token.
  EXPECT_EQ(create(0, nullptr), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(create((*session)->id(), nullptr), grpc::StatusCode::UNAUTHENTICATED);
  const std::string wrong(32, '0');
  EXPECT_EQ(create((*session)->id(), &wrong), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(create((*session)->id() + 1, &(*session)->token()), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(create((*session)->id(), &(*session)->token()), grpc::StatusCode::OK);
}

// The daemon keeps 256 ids in all (the uid's own limit set above that, so that the total is
// what binds, as it does when many uids create ids): the ones created in a loop push each other
// out, never the job's, whose rank 0 joined and gave up at its deadline and comes back.
TEST(CommIdLimitsTest, IdsCreatedInALoopNeverPushOutAnIdARankJoined) {
  TestCluster cluster(1, {"--max_pending_comm_ids=256", "--max_pending_comm_ids_per_uid=4096"});
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> job = MustConnect(cluster.socket(0));
  ASSERT_NE(job, nullptr);
  StatusOr<std::string> id = job->CreateCommId();
  ASSERT_TRUE(id.ok()) << id.status();
  // Rank 0 arrives early; rank 1 is late, so rank 0 gives up and will join again.
  EXPECT_EQ(job->Join(*id, 2, 0, std::chrono::milliseconds(200)).status().code(),
            StatusCode::kDeadlineExceeded);

  std::unique_ptr<Client> attacker = MustConnect(cluster.socket(0));
  ASSERT_NE(attacker, nullptr);
  for (int i = 0; i < 3000; ++i) {
    StatusOr<std::string> made = attacker->CreateCommId();
    ASSERT_TRUE(made.ok()) << "id " << i << ": " << made.status();
  }
  CompleteJob(cluster, *id);
}

// One uid may have 100 ids pending: past that its ids are refused, naming the limit, and
// the ids it has, the job's included, stay valid.
TEST(CommIdLimitsTest, OneUidsPendingIdsAreBounded) {
  TestCluster cluster(1, {"--max_pending_comm_ids_per_uid=100"});
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> job = MustConnect(cluster.socket(0));
  ASSERT_NE(job, nullptr);
  StatusOr<std::string> id = job->CreateCommId();
  ASSERT_TRUE(id.ok()) << id.status();

  std::unique_ptr<Client> attacker = MustConnect(cluster.socket(0));
  ASSERT_NE(attacker, nullptr);
  int made = 0;
  Status refused;
  for (int i = 0; i < 3000 && refused.ok(); ++i) {
    StatusOr<std::string> next = attacker->CreateCommId();
    if (next.ok()) {
      ++made;
    } else {
      refused = next.status();
    }
  }
  EXPECT_EQ(made, 99);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("max_pending_comm_ids_per_uid"), std::string::npos) << refused;
  CompleteJob(cluster, *id);
  // The job's communicator formed: its id counts no more, and there is room for one.
  EXPECT_TRUE(attacker->CreateCommId().ok());
  EXPECT_EQ(attacker->CreateCommId().status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace baton
