// The tuner through real daemons: Explain predicts every algorithm, cheapest first, and an
// operation without a forced algorithm runs the one Explain put first.

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

TEST(ExplainTest, TheDaemonRunsTheTunersChoice) {
  constexpr int kDaemons = 3;
  TestCluster cluster(kDaemons);
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kDaemons; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
      auto comm = client->Join(id, kDaemons, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      for (size_t count : {size_t{2}, size_t{1} << 21}) {  // 8 B and 8 MiB of float32
        SCOPED_TRACE(count);
        StatusOr<std::vector<AlgorithmEstimate>> estimates =
            (*comm)->Explain(Collective::kAllReduce, count, DataType::kFloat32);
        ASSERT_TRUE(estimates.ok()) << estimates.status();
        ASSERT_EQ(estimates->size(), 4u);  // ring, tree, doubling, halving_doubling; cheapest first
        std::set<Algorithm> algorithms;
        for (size_t i = 0; i < estimates->size(); ++i) {
          if (i > 0) {
            EXPECT_LE((*estimates)[i - 1].predicted, (*estimates)[i].predicted);
          }
          algorithms.insert((*estimates)[i].algorithm);
        }
        EXPECT_EQ(algorithms.size(), estimates->size()) << "an algorithm is listed twice";
        for (const AlgorithmEstimate& e : *estimates) {
          EXPECT_GT(e.predicted, std::chrono::nanoseconds::zero());
        }
        std::vector<float> data(count, 1.0f);
        ASSERT_TRUE(
            (*comm)
                ->AllReduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum)
                .ok());
        EXPECT_EQ((*comm)->last_algorithm(), AlgorithmName((*estimates)[0].algorithm));
        EXPECT_EQ(data[0], 3.0f);
      }
      // A collective only the ring implements has one candidate.
      auto gather = (*comm)->Explain(Collective::kAllGather, 1024, DataType::kFloat32);
      ASSERT_TRUE(gather.ok()) << gather.status();
      ASSERT_EQ(gather->size(), 1u);
      EXPECT_EQ((*gather)[0].algorithm, Algorithm::kRing);
      // The predictions grow with the size.
      auto small = (*comm)->Explain(Collective::kAllReduce, 1, DataType::kFloat32);
      auto large = (*comm)->Explain(Collective::kAllReduce, 1 << 24, DataType::kFloat32);
      ASSERT_TRUE(small.ok() && large.ok());
      EXPECT_LT((*small)[0].predicted, (*large)[0].predicted);
      // An overflowing count is refused.
      auto bad = (*comm)->Explain(Collective::kAllReduce, SIZE_MAX / 2, DataType::kFloat32);
      EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
    });
  }
  for (auto& t : ranks) t.join();
}

TEST(ExplainTest, OneDaemonHasNothingToChoose) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
  const std::string id = *client->CreateCommId();
  auto comm = client->Join(id, 1, 0, std::chrono::seconds(30));
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto estimates = (*comm)->Explain(Collective::kAllReduce, 1024, DataType::kFloat32);
  ASSERT_TRUE(estimates.ok()) << estimates.status();
  EXPECT_TRUE(estimates->empty());
}

}  // namespace
}  // namespace baton
