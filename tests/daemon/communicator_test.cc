// The communicator's membership and its point-to-point path, over the in-memory transport: what
// batond's Node relies on when ranks attach, leave and send at different moments.

#include "daemon/communicator.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::daemon {
namespace {

Plan OneDaemonPlan(std::vector<int> ranks) {
  Plan plan;
  plan.comm_tag = 0x51;
  plan.world_size = static_cast<int>(ranks.size());
  PlanDaemon daemon;
  daemon.member.node_name = "node-0";
  daemon.member.data_address = "d0";
  daemon.ranks = std::move(ranks);
  plan.daemons.push_back(daemon);
  return plan;
}

class CommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto endpoint = fabric_->CreateEndpoint("d0");
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = std::move(endpoint).value();
  }
  std::unique_ptr<transport::InMemoryFabric> fabric_ = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> endpoint_;
};

OpRequest PointToPoint(collective::Collective kind, int peer, std::vector<float>& data) {
  OpRequest request;
  request.spec.collective = kind;
  request.spec.count = data.size();
  request.spec.peer = peer;
  if (kind == collective::Collective::kSend) {
    request.send = reinterpret_cast<const std::byte*>(data.data());
  } else {
    request.recv = reinterpret_cast<std::byte*>(data.data());
  }
  return request;
}

// A rank may send eagerly and leave before a rank of the same daemon has even attached: the
// communicator must outlive that, or the message would be lost with it.
TEST_F(CommunicatorTest, NotEmptyUntilEveryLocalRankHasAttachedOnce) {
  Communicator comm(OneDaemonPlan({0, 1}), 0, endpoint_.get(), CommunicatorOptions{}, nullptr);
  ASSERT_TRUE(comm.AttachRank(0, /*session_id=*/10).ok());
  std::vector<float> sent = {1, 2, 3};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(
      comm.Submit(0, 10, PointToPoint(collective::Collective::kSend, 1, sent), deadline).ok());
  EXPECT_EQ(comm.DetachSession(10), std::vector<int>{0});
  EXPECT_FALSE(comm.Empty()) << "rank 1 has not attached yet";

  ASSERT_TRUE(comm.AttachRank(1, /*session_id=*/11).ok());
  std::vector<float> received(3, -1);
  absl::StatusOr<std::string> recv =
      comm.Submit(1, 11, PointToPoint(collective::Collective::kRecv, 0, received), deadline);
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(received, sent);
  comm.DetachSession(11);
  EXPECT_TRUE(comm.Empty());
}

// A failed communicator with no rank attached may go, whoever has not attached.
TEST_F(CommunicatorTest, EmptyOnceAbortedWithNoRankAttached) {
  Communicator comm(OneDaemonPlan({0, 1}), 0, endpoint_.get(), CommunicatorOptions{}, nullptr);
  ASSERT_TRUE(comm.AttachRank(0, 10).ok());
  comm.DetachSession(10);
  EXPECT_FALSE(comm.Empty());
  comm.Abort(absl::AbortedError("gone"), /*notify_peers=*/false);
  EXPECT_TRUE(comm.Empty());
}

}  // namespace
}  // namespace baton::daemon
