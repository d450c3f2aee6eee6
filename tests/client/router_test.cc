// libbaton's one routing decision (client/lib/routes/router.h), without daemons: every route a
// call can take, from the call, the communicator's shape, its arena and the settings.

#include "client/lib/routes/router.h"

#include <cstdlib>
#include <optional>

#include "gtest/gtest.h"

namespace baton::core {
namespace {

using collective::Algorithm;
using collective::Collective;
using collective::DataType;

collective::OpSpec Spec(Collective collective, size_t count,
                        std::optional<Algorithm> algorithm = std::nullopt) {
  collective::OpSpec spec;
  spec.collective = collective;
  spec.count = count;
  spec.type = DataType::kFloat32;
  spec.algorithm = algorithm;
  return spec;
}

constexpr size_t kSlot = 4096;  // bytes: 1024 floats

CallFacts WithArena(int arena_rank = 0, size_t send_bytes = 0) {
  CallFacts facts;
  facts.arena_slot_bytes = kSlot;
  facts.arena_rank = arena_rank;
  facts.send_bytes = send_bytes;
  return facts;
}

Router OneNode(RouteSettings settings = {}) {
  return Router(CommShape{4, 0, 1, 4}, std::move(settings));
}
Router TwoNodes(RouteSettings settings = {}) {
  return Router(CommShape{8, 0, 2, 4}, std::move(settings));
}

TEST(RouterTest, WithoutAnArenaHostMemoryGoesToTheDaemonAndDeviceMemoryToTheDeviceRoute) {
  Router router = TwoNodes();
  EXPECT_EQ(router.Choose(Spec(Collective::kAllReduce, 4), CallFacts{}).kind, RouteKind::kDaemon);
  CallFacts device;
  device.device_memory = true;
  EXPECT_EQ(router.Choose(Spec(Collective::kAllReduce, 4), device).kind, RouteKind::kDevice);
  // With an arena too: the arena takes host memory only.
  CallFacts device_with_arena = WithArena();
  device_with_arena.device_memory = true;
  EXPECT_EQ(router.Choose(Spec(Collective::kBarrier, 0), device_with_arena).kind,
            RouteKind::kDevice);
}

TEST(RouterTest, CollectivesThatFitASlotRunInTheArena) {
  Router router = OneNode();
  for (Collective c : {Collective::kBarrier, Collective::kAllReduce, Collective::kBroadcast,
                       Collective::kReduce}) {
    EXPECT_EQ(router.Choose(Spec(c, 1024), WithArena()).kind, RouteKind::kArena)
        << collective::CollectiveName(c);
  }
  // The world's blocks must fit: 4 ranks of 256 floats do, of 257 do not.
  EXPECT_EQ(router.Choose(Spec(Collective::kAllToAll, 256), WithArena()).kind, RouteKind::kArena);
  EXPECT_EQ(router.Choose(Spec(Collective::kAllToAll, 257), WithArena()).kind, RouteKind::kDaemon);
  EXPECT_EQ(router.Choose(Spec(Collective::kAllGather, 1024), WithArena()).kind, RouteKind::kArena);
  // Collectives the arena does not have.
  for (Collective c : {Collective::kGather, Collective::kScatter, Collective::kAllToAllV}) {
    EXPECT_EQ(router.Choose(Spec(c, 1), WithArena()).kind, RouteKind::kDaemon)
        << collective::CollectiveName(c);
  }
}

TEST(RouterTest, AcrossNodesTheSlotHoldsWhatLocalRankZeroSendsBetweenNodes) {
  Router router = TwoNodes();
  // all_gather: the world's blocks (8 of 128 floats fit, of 129 do not).
  EXPECT_EQ(router.Choose(Spec(Collective::kAllGather, 128), WithArena()).kind, RouteKind::kArena);
  EXPECT_EQ(router.Choose(Spec(Collective::kAllGather, 129), WithArena()).kind, RouteKind::kDaemon);
  // No local phase for all_to_all across nodes; a large all_reduce goes to the daemon.
  EXPECT_EQ(router.Choose(Spec(Collective::kAllToAll, 1), WithArena()).kind, RouteKind::kDaemon);
  EXPECT_EQ(router.Choose(Spec(Collective::kAllReduce, 1025), WithArena()).kind,
            RouteKind::kDaemon);
}

TEST(RouterTest, AnAlgorithmOrBatonArenaZeroKeepsCallsOutOfTheArena) {
  EXPECT_EQ(OneNode().Choose(Spec(Collective::kAllReduce, 4, Algorithm::kRing), WithArena()).kind,
            RouteKind::kDaemon);
  RouteSettings off;
  off.arena = false;
  EXPECT_EQ(OneNode(off).Choose(Spec(Collective::kBarrier, 0), WithArena()).kind,
            RouteKind::kDaemon);
}

TEST(RouterTest, LargeCallsOnOneNodeAreProposedByLocalRankZeroOnly) {
  Router router = OneNode();
  const RouteChoice leader = router.Choose(Spec(Collective::kAllReduce, 4096), WithArena(0, 16384));
  EXPECT_EQ(leader.kind, RouteKind::kArenaOrDaemon);
  ASSERT_TRUE(leader.proposal.ok());
  EXPECT_EQ(router.Choose(Spec(Collective::kReduceScatter, 1024), WithArena(1)).kind,
            RouteKind::kArenaOrDaemon);

  RouteSettings daemon;
  daemon.arena_large = ArenaOrDaemon::kDaemon;
  Router forced = OneNode(daemon);
  EXPECT_EQ(*forced.Choose(Spec(Collective::kAllReduce, 4096), WithArena(0)).proposal,
            ArenaOrDaemon::kDaemon);
  // Only local rank 0's proposal counts: the others propose nothing of their own.
  EXPECT_EQ(*forced.Choose(Spec(Collective::kAllReduce, 4096), WithArena(2)).proposal,
            ArenaOrDaemon::kArena);

  RouteSettings bad;
  bad.arena_large = absl::InvalidArgumentError("BATON_ARENA_LARGE='x'");
  const RouteChoice refused = OneNode(bad).Choose(Spec(Collective::kAllReduce, 4096), WithArena());
  EXPECT_EQ(refused.kind, RouteKind::kArenaOrDaemon);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.proposal.status())) << refused.proposal.status();
}

TEST(RouterTest, TheTunerMovesLocalRankZerosProposalToTheFasterRoute) {
  Router router = OneNode();
  const size_t bytes = 1 << 20;
  const collective::OpSpec spec = Spec(Collective::kAllReduce, bytes / 4);
  // The daemon is ten times faster at this size: once both routes have samples the tuner
  // proposes it (it still tries the other now and then: most proposals go to the daemon).
  int daemon = 0;
  for (int i = 0; i < 200; ++i) {
    const RouteChoice choice = router.Choose(spec, WithArena(0, bytes));
    ASSERT_TRUE(choice.proposal.ok());
    const ArenaOrDaemon route = *choice.proposal;
    if (i >= 100 && route == ArenaOrDaemon::kDaemon) ++daemon;
    router.Learn(Collective::kAllReduce, bytes, route,
                 route == ArenaOrDaemon::kDaemon ? absl::Microseconds(100) : absl::Milliseconds(1));
  }
  EXPECT_GT(daemon, 90);
}

TEST(RouterTest, BatonAlgoAppliesWhereItImplementsTheCollective) {
  RouteSettings tree;
  tree.algorithm = Algorithm::kTree;
  const Router router = OneNode(tree);
  EXPECT_EQ(*router.Algorithm(Collective::kAllReduce, std::nullopt), Algorithm::kTree);
  EXPECT_EQ(*router.Algorithm(Collective::kAllGather, std::nullopt), std::nullopt);
  EXPECT_EQ(*router.Algorithm(Collective::kAllReduce, Algorithm::kRing), Algorithm::kRing);
  EXPECT_EQ(*OneNode().Algorithm(Collective::kAllReduce, std::nullopt), std::nullopt);
}

TEST(RouterTest, SettingsComeFromTheEnvironment) {
  ASSERT_EQ(setenv("BATON_ARENA", "0", 1), 0);
  ASSERT_EQ(setenv("BATON_ARENA_LARGE", "daemon", 1), 0);
  ASSERT_EQ(setenv("BATON_ALGO", "halving_doubling", 1), 0);
  ASSERT_EQ(setenv("BATON_SUBMIT", "grpc", 1), 0);
  RouteSettings set = RouteSettings::FromEnvironment();
  EXPECT_FALSE(set.arena);
  EXPECT_EQ(**set.arena_large, ArenaOrDaemon::kDaemon);
  EXPECT_EQ(**set.algorithm, Algorithm::kHalvingDoubling);
  EXPECT_FALSE(set.channel);

  ASSERT_EQ(setenv("BATON_ARENA_LARGE", "somewhere", 1), 0);
  ASSERT_EQ(setenv("BATON_ALGO", "bubble", 1), 0);
  RouteSettings bad = RouteSettings::FromEnvironment();
  EXPECT_TRUE(absl::IsInvalidArgument(bad.arena_large.status()));
  ASSERT_TRUE(absl::IsInvalidArgument(bad.algorithm.status()));
  // The message lists every algorithm, from the registry's names.
  EXPECT_NE(bad.algorithm.status().message().find("halving_doubling"), std::string::npos)
      << bad.algorithm.status();
  absl::StatusOr<std::optional<Algorithm>> refused =
      OneNode(bad).Algorithm(Collective::kAllReduce, std::nullopt);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));

  for (const char* name : {"BATON_ARENA", "BATON_ARENA_LARGE", "BATON_ALGO", "BATON_SUBMIT"}) {
    unsetenv(name);
  }
  RouteSettings defaults = RouteSettings::FromEnvironment();
  EXPECT_TRUE(defaults.arena);
  EXPECT_EQ(*defaults.arena_large, std::nullopt);
  EXPECT_EQ(*defaults.algorithm, std::nullopt);
  EXPECT_TRUE(defaults.channel);
}

}  // namespace
}  // namespace baton::core
