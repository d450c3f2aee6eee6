#include "collective/tuner.h"

#include <span>
#include <vector>

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

TEST(TunerTest, ExplainShowsMeasuredTimesAndTheChoiceTheyMake) {
  std::vector<AlgorithmCost> costs(3);
  costs[0].algorithm = Algorithm::kHalvingDoubling;
  costs[0].predicted = absl::Microseconds(300);
  costs[1].algorithm = Algorithm::kDoubling;
  costs[1].predicted = absl::Microseconds(350);
  costs[2].algorithm = Algorithm::kRing;
  costs[2].predicted = absl::Microseconds(900);  // beyond 2x: measured or not, never chosen
  EXPECT_EQ(ExplainCosts(costs),
            "halving_doubling 300 us, doubling 350 us, ring 900 us -> halving_doubling");
  costs[1].measured = absl::Microseconds(180);
  costs[2].measured = absl::Microseconds(10);
  EXPECT_EQ(ExplainCosts(costs),
            "halving_doubling 300 us, doubling 350 us (measured 180 us), ring 900 us (measured 10 "
            "us) -> doubling");
  costs[0].measured = absl::Microseconds(170);
  EXPECT_NE(ExplainCosts(costs).find("-> halving_doubling"), std::string::npos);
}

// MeasuredTimes: the agreed table, the choice, exploration and the exchange's counters.
std::vector<AlgorithmCost> Costs(std::initializer_list<std::pair<Algorithm, int>> us) {
  std::vector<AlgorithmCost> costs;
  for (const auto& [algorithm, micros] : us) {
    AlgorithmCost cost;
    cost.algorithm = algorithm;
    cost.predicted = absl::Microseconds(micros);
    costs.push_back(cost);
  }
  return costs;
}

// Daemons' pending counters summed, as the exchange's all-reduce does.
void Exchange(std::vector<MeasuredTimes*> daemons) {
  std::vector<int64_t> sum;
  for (MeasuredTimes* d : daemons) {
    const std::vector<int64_t> pending = d->TakePending();
    if (sum.empty()) sum.assign(pending.size(), 0);
    for (size_t i = 0; i < pending.size(); ++i) sum[i] += pending[i];
  }
  for (MeasuredTimes* d : daemons) ASSERT_TRUE(d->Merge(sum).ok());
}

TEST(MeasuredTimesTest, FollowsTheModelUntilMeasuredThenTheFastestMeasuredCandidate) {
  MeasuredTimes times;
  const size_t bytes = 16 << 10;
  // The model: halving-doubling, then doubling (within 2x), then ring (beyond: never a candidate).
  const auto costs = Costs(
      {{Algorithm::kHalvingDoubling, 300}, {Algorithm::kDoubling, 350}, {Algorithm::kRing, 900}});
  EXPECT_EQ(times.Choose(bytes, costs), Algorithm::kHalvingDoubling);
  // Pending measurements change nothing until they are exchanged.
  for (int i = 0; i < 20; ++i) {
    times.Add(bytes, Algorithm::kHalvingDoubling, absl::Microseconds(420));
    times.Add(bytes, Algorithm::kDoubling, absl::Microseconds(180));
    times.Add(bytes, Algorithm::kRing, absl::Microseconds(10));  // not a candidate
  }
  EXPECT_FALSE(times.Mean(bytes, Algorithm::kDoubling).has_value());
  EXPECT_EQ(times.Choose(bytes, costs), Algorithm::kHalvingDoubling);
  Exchange({&times});
  EXPECT_EQ(times.Mean(bytes, Algorithm::kDoubling), absl::Microseconds(180));
  EXPECT_EQ(times.Samples(bytes, Algorithm::kRing), 20);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(times.Choose(bytes, costs), Algorithm::kDoubling);
  // Another size class is not affected; one in the same class ([16 KiB, 32 KiB)) is.
  EXPECT_EQ(times.Choose(bytes / 2, costs), Algorithm::kHalvingDoubling);
  EXPECT_EQ(times.Choose(bytes + 100, costs), Algorithm::kDoubling);
}

TEST(MeasuredTimesTest, ExploresUnmeasuredCandidatesEverySixteenthCall) {
  MeasuredTimes times;
  const size_t bytes = 4096;
  const auto costs = Costs({{Algorithm::kDoubling, 100},
                            {Algorithm::kHalvingDoubling, 150},
                            {Algorithm::kTree, 190},
                            {Algorithm::kRing, 250}});
  std::vector<Algorithm> ran;
  for (int call = 1; call <= 64; ++call) ran.push_back(times.Choose(bytes, costs));
  for (int call = 1; call <= 64; ++call) {
    // Nothing measured: every 16th call explores the least measured candidate, the cheapest
    // predicted first (all have 0 samples); the others run the model's choice.
    EXPECT_EQ(ran[call - 1], Algorithm::kDoubling) << "call " << call;
  }
  // Doubling measured: exploration moves on to the next unmeasured candidate.
  for (int i = 0; i < 16; ++i) times.Add(bytes, Algorithm::kDoubling, absl::Microseconds(100));
  Exchange({&times});
  std::vector<Algorithm> explored;
  for (int call = 1; call <= 64; ++call) {
    const Algorithm a = times.Choose(bytes, costs);
    if (a != Algorithm::kDoubling) explored.push_back(a);
  }
  ASSERT_EQ(explored.size(), 4u);
  EXPECT_EQ(explored.front(), Algorithm::kHalvingDoubling);
  // Every candidate measured, the best far ahead in samples: an occasional re-measurement of the
  // one that has fallen below 1/64 of the best's samples, and never of one that has not.
  for (Algorithm a : {Algorithm::kHalvingDoubling, Algorithm::kTree, Algorithm::kRing}) {
    for (int i = 0; i < 16; ++i) times.Add(bytes, a, absl::Microseconds(400));
  }
  Exchange({&times});
  int others = 0;
  for (int call = 1; call <= 160; ++call)
    others += times.Choose(bytes, costs) != Algorithm::kDoubling;
  EXPECT_EQ(others, 0);
  for (int i = 0; i < 2048; ++i) times.Add(bytes, Algorithm::kDoubling, absl::Microseconds(100));
  Exchange({&times});
  for (int call = 1; call <= 160; ++call)
    others += times.Choose(bytes, costs) != Algorithm::kDoubling;
  EXPECT_EQ(others, 10);
}

TEST(MeasuredTimesTest, DaemonsThatExchangeChooseAlike) {
  // Three daemons measure different times; after the exchange their tables, and so their
  // choices over the same sequence of calls, are identical.
  MeasuredTimes a, b, c;
  const size_t bytes = 32 << 10;
  const auto costs = Costs({{Algorithm::kHalvingDoubling, 300}, {Algorithm::kDoubling, 320}});
  for (int i = 0; i < 10; ++i) {
    a.Add(bytes, Algorithm::kDoubling, absl::Microseconds(200 + i));
    b.Add(bytes, Algorithm::kHalvingDoubling, absl::Microseconds(250));
    c.Add(bytes, Algorithm::kDoubling, absl::Microseconds(310));
    c.Add(bytes, Algorithm::kHalvingDoubling, absl::Microseconds(240 + 3 * i));
  }
  Exchange({&a, &b, &c});
  EXPECT_EQ(a.Mean(bytes, Algorithm::kDoubling), b.Mean(bytes, Algorithm::kDoubling));
  EXPECT_EQ(a.Samples(bytes, Algorithm::kDoubling), 20);
  for (int call = 0; call < 200; ++call) {
    const Algorithm x = a.Choose(bytes, costs);
    EXPECT_EQ(b.Choose(bytes, costs), x);
    EXPECT_EQ(c.Choose(bytes, costs), x);
  }
}

// A later communicator of the same daemons starts from Agreed(): merged into a fresh table it
// gives the same means, samples and choices; pending measurements are not part of it.
TEST(MeasuredTimesTest, AgreedTableSeedsAFreshOne) {
  MeasuredTimes times;
  const size_t bytes = 16 << 10;
  const auto costs = Costs({{Algorithm::kHalvingDoubling, 300}, {Algorithm::kDoubling, 350}});
  for (int i = 0; i < 20; ++i) {
    times.Add(bytes, Algorithm::kHalvingDoubling, absl::Microseconds(420));
    times.Add(bytes, Algorithm::kDoubling, absl::Microseconds(180));
  }
  Exchange({&times});
  times.Add(bytes, Algorithm::kHalvingDoubling, absl::Microseconds(1));  // pending, not agreed
  MeasuredTimes seeded;
  ASSERT_TRUE(seeded.Merge(times.Agreed()).ok());
  for (Algorithm algorithm : {Algorithm::kHalvingDoubling, Algorithm::kDoubling}) {
    EXPECT_EQ(seeded.Mean(bytes, algorithm), times.Mean(bytes, algorithm));
    EXPECT_EQ(seeded.Samples(bytes, algorithm), 20);
  }
  EXPECT_EQ(seeded.Agreed(), times.Agreed());
  // From its first call it chooses what the measurements say, not the model's cheapest.
  EXPECT_EQ(seeded.Choose(bytes, costs), Algorithm::kDoubling);
  EXPECT_EQ(MeasuredTimes().Choose(bytes, costs), Algorithm::kHalvingDoubling);
}

TEST(MeasuredTimesTest, OldSamplesFadeAndBadCountersAreRefused) {
  MeasuredTimes times;
  const size_t bytes = 1 << 20;
  for (int i = 0; i < 4000; ++i) times.Add(bytes, Algorithm::kRing, absl::Microseconds(100));
  Exchange({&times});
  for (int i = 0; i < 200; ++i) times.Add(bytes, Algorithm::kRing, absl::Microseconds(1100));
  Exchange({&times});  // 4200 samples: halved
  EXPECT_EQ(times.Samples(bytes, Algorithm::kRing), 2100);
  EXPECT_EQ(times.Mean(bytes, Algorithm::kRing),
            absl::Nanoseconds((4000 * int64_t{100000} + 200 * int64_t{1100000}) / 2 / 2100));
  std::vector<int64_t> bad = times.TakePending();
  EXPECT_FALSE(times.Merge(std::span(bad.data(), bad.size() - 1)).ok());
  bad.back() = -1;
  EXPECT_FALSE(times.Merge(bad).ok());
  EXPECT_EQ(times.Samples(bytes, Algorithm::kRing), 2100);
  // Sizes beyond the last class share it; size 0 shares the first.
  times.Add(0, Algorithm::kRing, absl::Microseconds(1));
  times.Add(SIZE_MAX, Algorithm::kRing, absl::Microseconds(1));
  Exchange({&times});
  EXPECT_EQ(times.Samples(1, Algorithm::kRing), 1);
  EXPECT_EQ(times.Samples(size_t{1} << 62, Algorithm::kRing), 1);
}

}  // namespace
}  // namespace baton::collective
