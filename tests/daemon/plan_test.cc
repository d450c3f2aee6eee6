// CheckPlan: the plans a root daemon computes pass; every way a root's plan could break the
// layout collective/ relies on is refused before anything is sized by it.

#include "daemon/plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "daemon/rendezvous.h"

namespace baton::daemon {
namespace {

Member At(const std::string& data_address) { return Member{"node", "peer", data_address, {}}; }

// Ranks 0 and 2 on daemon a, rank 1 on daemon b.
Plan Valid() {
  return Rendezvous::ComputePlan(7, 3,
                                 std::map<int, Member>{{0, At("a")}, {1, At("b")}, {2, At("a")}});
}

void ExpectRefused(const Plan& plan, int world_size, const std::string& text) {
  const absl::Status status = CheckPlan(plan, world_size);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find(text), std::string::npos) << status;
}

TEST(CheckPlanTest, ARootsOwnPlansPass) {
  EXPECT_TRUE(CheckPlan(Valid(), 3).ok());
  const Plan one = Rendezvous::ComputePlan(1, 1, std::map<int, Member>{{0, At("a")}});
  EXPECT_TRUE(CheckPlan(one, 1).ok());
}

TEST(CheckPlanTest, AWorldOtherThanTheJoinsIsRefusedBeforeItIsUsed) {
  // The world the fuzzer sent (proto_handlers_fuzz): a joining daemon sized vectors by it.
  Plan plan = Valid();
  plan.world_size = 273'719'954;
  ExpectRefused(plan, 3, "a plan of world size 273719954 for a join of world size 3");
  plan.world_size = 2;
  ExpectRefused(plan, 3, "world size 2");
}

TEST(CheckPlanTest, RanksMustPartitionTheWorld) {
  Plan plan = Valid();
  plan.daemons[1].ranks = {3};
  ExpectRefused(plan, 3, "rank 3 outside its world");
  plan.daemons[1].ranks = {-1};
  ExpectRefused(plan, 3, "rank -1 outside its world");
  plan.daemons[1].ranks = {2};
  ExpectRefused(plan, 3, "rank 2 on two daemons");
  plan.daemons[0].ranks = {0, 0};
  ExpectRefused(plan, 3, "twice on one");
  plan = Valid();
  plan.daemons[0].ranks = {2, 0};
  ExpectRefused(plan, 3, "not in ascending order");
  plan = Valid();
  plan.daemons[1].ranks.clear();
  ExpectRefused(plan, 3, "hosts no rank");
  plan = Valid();
  plan.daemons.pop_back();
  ExpectRefused(plan, 3, "places 2 of its 3 ranks");
  plan.daemons.clear();
  ExpectRefused(plan, 3, "places 0 of its 3 ranks");
}

TEST(CheckPlanTest, EachDaemonHasItsOwnDataAddress) {
  Plan plan = Valid();
  plan.daemons[1].member.data_address = "a";
  ExpectRefused(plan, 3, "names data address a twice");
}

}  // namespace
}  // namespace baton::daemon
