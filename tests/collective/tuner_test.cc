#include "collective/tuner.h"

#include "gtest/gtest.h"

namespace baton::collective {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

// 8 daemons on 1 Gbit/s links with 125 us per message, as measured in network namespaces.
LinkModel Measured() { return LinkModel{absl::Microseconds(125), 118e6}; }

TEST(TunerTest, RingCostFollowsTheFormula) {
  const LinkModel model = Measured();
  const std::vector<AlgorithmCost> costs =
      PredictCosts(Collective::kAllReduce, 8, 64 << 20, kChunk, model);
  ASSERT_EQ(costs.size(), 2u);
  const AlgorithmCost& ring = costs[0].algorithm == Algorithm::kRing ? costs[0] : costs[1];
  const double expected = 14 * 125e-6 + 14.0 / 8 * (64 << 20) / (118e6 * kRingEfficiency);
  const AlgorithmCost& tree = costs[0].algorithm == Algorithm::kTree ? costs[0] : costs[1];
  const double expected_tree = 6 * 125e-6 + 2.0 * (64 << 20) / (118e6 * kTreePipelinedEfficiency);
  EXPECT_NEAR(absl::ToDoubleSeconds(tree.predicted), expected_tree, 1e-9);
  EXPECT_NEAR(absl::ToDoubleSeconds(ring.predicted), expected, 1e-9);
}

TEST(TunerTest, TreeForSmallMessagesOnManyDaemonsRingForLargeOnes) {
  const LinkModel model = Measured();
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 8, kChunk, model), Algorithm::kTree);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 4096, kChunk, model), Algorithm::kTree);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 128 << 10, kChunk, model), Algorithm::kTree);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 1 << 20, kChunk, model), Algorithm::kRing);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 64 << 20, kChunk, model), Algorithm::kRing);
}

TEST(TunerTest, CrossoverMovesWithLatencyAndBandwidth) {
  // The largest size (power of two) for which the tree wins.
  auto crossover = [](const LinkModel& model) {
    size_t last_tree = 0;
    for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 2) {
      if (ChooseByCost(Collective::kAllReduce, 16, bytes, kChunk, model) == Algorithm::kTree) {
        last_tree = bytes;
      }
    }
    return last_tree;
  };
  const size_t base = crossover(Measured());
  EXPECT_GT(base, 0u);
  // The tree's fewer steps never lose to more latency per message, nor to more bandwidth (which
  // shrinks the bandwidth terms that favour the ring).
  EXPECT_GE(crossover(LinkModel{absl::Microseconds(1250), 118e6}), base);
  EXPECT_GE(crossover(LinkModel{absl::Microseconds(125), 1.18e9}), base);
  // With enough latency the tree wins even past its small-message regime.
  EXPECT_GT(crossover(LinkModel{absl::Milliseconds(50), 118e6}), base);
  // Near-zero latency leaves only bandwidth terms: the tree wins no sizes it did not win before.
  EXPECT_LE(crossover(LinkModel{absl::Nanoseconds(1), 118e6}), base);
}

TEST(TunerTest, TwoDaemonsAlwaysRing) {
  // With two daemons the ring has 2 steps and the tree 2 levels: the same latency, and the ring
  // moves less data.
  for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 4) {
    EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 2, bytes, kChunk, Measured()), Algorithm::kRing)
        << bytes;
  }
}

TEST(TunerTest, SingleAlgorithmCollectivesGetTheirAlgorithm) {
  EXPECT_EQ(ChooseByCost(Collective::kAllGather, 8, 1024, kChunk, Measured()), Algorithm::kRing);
  EXPECT_EQ(ChooseByCost(Collective::kBroadcast, 8, 1024, kChunk, Measured()), Algorithm::kRing);
  EXPECT_EQ(ChooseByCost(Collective::kAllToAll, 8, 1024, kChunk, Measured()), Algorithm::kDirect);
  EXPECT_EQ(ChooseByCost(Collective::kBarrier, 8, 0, kChunk, Measured()), Algorithm::kDirect);
}

TEST(TunerTest, InvalidModelFallsBackToTheDefault) {
  const LinkModel unmeasured;  // beta 0
  EXPECT_EQ(
      PredictCosts(Collective::kAllReduce, 8, 1 << 20, kChunk, unmeasured)[0].predicted,
      PredictCosts(Collective::kAllReduce, 8, 1 << 20, kChunk, DefaultLinkModel())[0].predicted);
}

TEST(TunerTest, ExplainNamesEveryCandidateAndTheChoice) {
  const std::string text =
      ExplainCosts(PredictCosts(Collective::kAllReduce, 8, 64 << 20, kChunk, Measured()));
  EXPECT_NE(text.find("ring "), std::string::npos) << text;
  EXPECT_NE(text.find("tree "), std::string::npos) << text;
  EXPECT_NE(text.find("-> ring"), std::string::npos) << text;
}

}  // namespace
}  // namespace baton::collective
