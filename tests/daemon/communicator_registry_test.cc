// The registry of a daemon's communicators: what a rank whose join is still being answered finds
// when the communicator's other local ranks have already failed and left.

#include "daemon/communicator_registry.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::daemon {
namespace {

Plan ThreeRankPlan(uint64_t tag, std::string secret) {
  Plan plan;
  plan.comm_tag = tag;
  plan.secret = std::move(secret);
  plan.world_size = 3;
  PlanDaemon daemon;
  daemon.member.node_name = "node-0";
  daemon.member.data_address = "d0";
  daemon.ranks = {0, 1, 2};
  plan.daemons.push_back(daemon);
  return plan;
}

class CommunicatorRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto endpoint = fabric_->CreateEndpoint("d0");
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = std::move(endpoint).value();
  }

  CommunicatorRegistry::Factory Factory() {
    return [this](const Plan& plan) -> absl::StatusOr<std::shared_ptr<Communicator>> {
      return std::make_shared<Communicator>(plan, 0, endpoint_.get(), CommunicatorOptions{},
                                            nullptr);
    };
  }

  std::unique_ptr<transport::InMemoryFabric> fabric_ = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> endpoint_;
};

// Ranks 0 and 1 attach, the communicator fails (their send and receive disagreed), they leave and
// it is removed; rank 2's join then arrives. It must get the failed communicator's reason, not a
// fresh communicator in which it would wait until its deadline for ranks that are gone.
TEST_F(CommunicatorRegistryTest, ARankAttachingAfterItsPeersFailedAndLeftGetsTheirReason) {
  CommunicatorRegistry registry(Factory());
  const Plan plan = ThreeRankPlan(0x77, std::string(32, 's'));
  absl::StatusOr<std::shared_ptr<Communicator>> first = registry.GetOrCreate(plan);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->AttachRank(0, /*session_id=*/10).ok());
  ASSERT_TRUE((*first)->AttachRank(1, /*session_id=*/11).ok());
  const absl::Status reason = absl::FailedPreconditionError("rank 0 sent 4 elements, 5 expected");
  (*first)->Abort(reason, /*notify_peers=*/false);
  registry.DropSession(10);
  registry.DropSession(11);
  ASSERT_EQ(registry.Find(plan.comm_tag), nullptr) << "a failed communicator with no rank goes";
  first->reset();

  absl::StatusOr<std::shared_ptr<Communicator>> late = registry.GetOrCreate(plan);
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_TRUE((*late)->AttachRank(2, /*session_id=*/12).ok());
  absl::StatusOr<Communicator::Arena> arena = (*late)->OpenArena(2, 12);
  EXPECT_EQ(arena.status(), reason);
  OpRequest barrier;
  barrier.spec.collective = collective::Collective::kBarrier;
  absl::StatusOr<std::string> ran = (*late)->Submit(2, 12, barrier, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(ran.status(), reason);
}

// What is remembered is bound to the secret: a plan that only reuses the tag gets a communicator
// of its own.
TEST_F(CommunicatorRegistryTest, AFailedCommunicatorIsRememberedOnlyForItsOwnSecret) {
  CommunicatorRegistry registry(Factory());
  const Plan plan = ThreeRankPlan(0x78, std::string(32, 'a'));
  absl::StatusOr<std::shared_ptr<Communicator>> first = registry.GetOrCreate(plan);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->AttachRank(0, 10).ok());
  (*first)->Abort(absl::AbortedError("failed"), /*notify_peers=*/false);
  registry.DropSession(10);
  ASSERT_EQ(registry.Find(plan.comm_tag), nullptr);
  first->reset();

  absl::StatusOr<std::shared_ptr<Communicator>> other =
      registry.GetOrCreate(ThreeRankPlan(0x78, std::string(32, 'b')));
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->AttachRank(2, 12).ok());
  EXPECT_TRUE((*other)->FailedBeforeEveryRankAttached() == std::nullopt);
  EXPECT_TRUE((*other)->OpenArena(2, 12).ok());
}

// A communicator every local rank attached to is not remembered when it goes: no rank can come
// for it any more.
TEST_F(CommunicatorRegistryTest, ACommunicatorEveryRankAttachedToIsForgotten) {
  CommunicatorRegistry registry(Factory());
  const Plan plan = ThreeRankPlan(0x79, std::string(32, 'c'));
  absl::StatusOr<std::shared_ptr<Communicator>> first = registry.GetOrCreate(plan);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int rank = 0; rank < 3; ++rank) ASSERT_TRUE((*first)->AttachRank(rank, 10 + rank).ok());
  (*first)->Abort(absl::AbortedError("failed"), /*notify_peers=*/false);
  for (int rank = 0; rank < 3; ++rank) registry.DropSession(10 + rank);
  ASSERT_EQ(registry.Find(plan.comm_tag), nullptr);
  first->reset();
  absl::StatusOr<std::shared_ptr<Communicator>> again = registry.GetOrCreate(plan);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->AttachRank(0, 20).ok());
  EXPECT_TRUE((*again)->OpenArena(0, 20).ok()) << "a fresh communicator";
}

}  // namespace
}  // namespace baton::daemon
