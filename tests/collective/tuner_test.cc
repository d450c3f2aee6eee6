#include "collective/tuner.h"

#include "collective/doubling_all_reduce.h"
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
  ASSERT_EQ(costs.size(), 4u);
  auto cost_of = [&](Algorithm algorithm) {
    for (const AlgorithmCost& cost : costs) {
      if (cost.algorithm == algorithm) return absl::ToDoubleSeconds(cost.predicted);
    }
    ADD_FAILURE() << "no cost for " << AlgorithmName(algorithm);
    return 0.0;
  };
  const double expected = 14 * 125e-6 + 14.0 / 8 * (64 << 20) / (118e6 * kRingEfficiency);
  const double expected_tree = 6 * 125e-6 + 2.0 * (64 << 20) / (118e6 * kTreePipelinedEfficiency);
  // 3 steps of 64 chunks, each beyond kTreeSmallMessageBytes.
  const double expected_doubling =
      3 * (64 * 125e-6 + double(64 << 20) / (118e6 * kExchangeLargeEfficiency));
  EXPECT_NEAR(cost_of(Algorithm::kRing), expected, 1e-9);
  EXPECT_NEAR(cost_of(Algorithm::kTree), expected_tree, 1e-9);
  EXPECT_NEAR(cost_of(Algorithm::kDoubling), expected_doubling, 1e-9);
  // Levels of 32, 16 and 8 MiB, each twice: 32, 16 and 8 chunks.
  double expected_halving = 0;
  for (int part : {2, 4, 8}) {
    const double bytes = double(64 << 20) / part;
    expected_halving += 2 * (bytes / kChunk * 125e-6 + bytes / (118e6 * kExchangeLargeEfficiency));
  }
  EXPECT_NEAR(cost_of(Algorithm::kHalvingDoubling), expected_halving, 1e-9);
}

TEST(TunerTest, DoublingStepsAddTwoForSizesThatAreNotPowersOfTwo) {
  EXPECT_EQ(DoublingSteps(1), 0);
  EXPECT_EQ(DoublingSteps(2), 1);
  EXPECT_EQ(DoublingSteps(3), 3);
  EXPECT_EQ(DoublingSteps(4), 2);
  EXPECT_EQ(DoublingSteps(6), 4);
  EXPECT_EQ(DoublingSteps(8), 3);
  EXPECT_EQ(DoublingSteps(9), 5);
}

TEST(TunerTest, DoublingForSmallMessagesHalvingDoublingForMidSizesRingForLargeOnes) {
  const LinkModel model = Measured();
  // 8 daemons: doubling's 3 latencies against halving-doubling's and the tree's 6 and the ring's
  // 14, until its three copies of the buffer on the wire cost more than the latencies it saves;
  // then halving-doubling (the ring's bytes in 6 latencies), until its large messages, which do
  // not pipeline, cost more than the ring's extra latencies.
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 8, kChunk, model), Algorithm::kDoubling);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 4096, kChunk, model), Algorithm::kDoubling);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 128 << 10, kChunk, model),
            Algorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 512 << 10, kChunk, model),
            Algorithm::kHalvingDoubling);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 1 << 20, kChunk, model), Algorithm::kRing);
  EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 8, 64 << 20, kChunk, model), Algorithm::kRing);
}

TEST(TunerTest, CrossoverMovesWithLatencyAndBandwidth) {
  // The largest size (power of two) for which a latency-bound algorithm (the tree or doubling)
  // beats the ring.
  auto crossover = [](const LinkModel& model) {
    size_t last = 0;
    for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 2) {
      if (ChooseByCost(Collective::kAllReduce, 16, bytes, kChunk, model) != Algorithm::kRing) {
        last = bytes;
      }
    }
    return last;
  };
  const size_t base = crossover(Measured());
  EXPECT_GT(base, 0u);
  // Fewer steps than the ring's never lose to more latency per message, nor to more bandwidth
  // (which shrinks the bandwidth terms that favour the ring).
  EXPECT_GE(crossover(LinkModel{absl::Microseconds(1250), 118e6}), base);
  EXPECT_GE(crossover(LinkModel{absl::Microseconds(125), 1.18e9}), base);
  // With enough latency they win even past the tree's small-message regime.
  EXPECT_GT(crossover(LinkModel{absl::Milliseconds(50), 118e6}), base);
  // Near-zero latency leaves only bandwidth terms: they win no sizes they did not win before.
  EXPECT_LE(crossover(LinkModel{absl::Nanoseconds(1), 118e6}), base);
}

TEST(TunerTest, TwoDaemonsDoublingForSmallMessagesRingBeyond) {
  // With two daemons doubling is one exchange of the buffer, the ring two steps of half of it:
  // the same bytes, but doubling waits once where the ring waits twice. Beyond
  // kTreeSmallMessageBytes the exchange reaches less of the link than the ring's pipeline.
  for (size_t bytes = 8; bytes <= kTreeSmallMessageBytes; bytes *= 4) {
    EXPECT_EQ(ChooseByCost(Collective::kAllReduce, 2, bytes, kChunk, Measured()),
              Algorithm::kDoubling)
        << bytes;
  }
  for (size_t bytes = 4 * kTreeSmallMessageBytes; bytes <= (size_t{64} << 20); bytes *= 4) {
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
