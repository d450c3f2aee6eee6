// All-reduce through real daemons: 3 daemons x 2 ranks, zero-copy and staged buffers, in place
// and out of place, counts from 0 to millions, and several communicators at once.

#include <algorithm>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::NewCommId;
using testing::TestCluster;

constexpr int kDaemons = 3;
constexpr int kRanksPerDaemon = 2;
constexpr int kWorld = kDaemons * kRanksPerDaemon;

float Input(int rank, size_t i) { return static_cast<float>(rank * 1000 + (i % 101)); }
float Expected(size_t i) {
  float sum = 0;
  for (int r = 0; r < kWorld; ++r) sum += Input(r, i);
  return sum;
}

// Runs body(rank, comm, client) for the kWorld ranks of `comm_id`, in blocks over the daemons;
// every rank's communicator spans all kDaemons and is destroyed cleanly after the body.
void RunWorld(const TestCluster& cluster, const std::string& comm_id,
              const std::function<void(int, Communicator&, Client&)>& body) {
  testing::RunRanks(cluster, comm_id, kWorld, testing::BlockPlacement(kWorld, kDaemons),
                    [&body](int rank, Communicator& comm, Client& client) {
                      EXPECT_EQ(comm.daemon_count(), kDaemons);
                      body(rank, comm, client);
                      EXPECT_TRUE(comm.Destroy().ok());
                    });
}

class AllReduceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new TestCluster(kDaemons); }
  static void TearDownTestSuite() { delete cluster_; }
  static TestCluster* cluster_;
};
TestCluster* AllReduceTest::cluster_ = nullptr;

TEST_F(AllReduceTest, EveryCountZeroCopyAndStagedInPlaceAndOutOfPlace) {
  ASSERT_TRUE(cluster_->ok());
  const std::vector<size_t> counts = {0, 1, kWorld - 1, 1001, (size_t{3} << 20) + 1};
  RunWorld(*cluster_, NewCommId(*cluster_), [&](int rank, Communicator& comm, Client& client) {
    for (size_t count : counts) {
      // Zero-copy, out of place (Allocate refuses 0 bytes: count 0 gets one-element buffers).
      const size_t bytes = std::max<size_t>(1, count) * sizeof(float);
      StatusOr<void*> send_mem = client.Allocate(bytes);
      StatusOr<void*> recv_mem = client.Allocate(bytes);
      ASSERT_TRUE(send_mem.ok() && recv_mem.ok()) << send_mem.status() << " " << recv_mem.status();
      auto* send = static_cast<float*>(*send_mem);
      auto* recv = static_cast<float*>(*recv_mem);
      for (size_t i = 0; i < count; ++i) send[i] = Input(rank, i);
      ASSERT_TRUE(comm.AllReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum).ok());
      // The default is the tuner's cheapest prediction (collective/tuner.h).
      auto estimates = comm.Explain(Collective::kAllReduce, count, DataType::kFloat32);
      ASSERT_TRUE(estimates.ok()) << estimates.status();
      ASSERT_FALSE(estimates->empty());
      EXPECT_EQ(comm.last_algorithm(), AlgorithmName(estimates->front().algorithm));
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != Expected(i);
      EXPECT_EQ(wrong, 0u) << "zero-copy, count " << count << ", rank " << rank;
      for (size_t i = 0; i < count; ++i) send[i] = Input(rank, i);
      // Zero-copy, in place.
      ASSERT_TRUE(comm.AllReduce(send, send, count, DataType::kFloat32, ReduceOp::kSum).ok());
      wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += send[i] != Expected(i);
      EXPECT_EQ(wrong, 0u) << "zero-copy in place, count " << count;
      ASSERT_TRUE(client.Free(*send_mem).ok());
      ASSERT_TRUE(client.Free(*recv_mem).ok());

      // Staged: ordinary heap memory the daemon cannot map.
      std::vector<float> staged_send(count), staged_recv(count, -1);
      for (size_t i = 0; i < count; ++i) staged_send[i] = Input(rank, i);
      ASSERT_TRUE(comm.AllReduce(staged_send.data(), staged_recv.data(), count, DataType::kFloat32,
                                 ReduceOp::kSum)
                      .ok());
      wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += staged_recv[i] != Expected(i);
      EXPECT_EQ(wrong, 0u) << "staged, count " << count;
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(staged_send[i], Input(rank, i)) << "input kept";
      ASSERT_TRUE(comm.AllReduce(staged_send.data(), staged_send.data(), count, DataType::kFloat32,
                                 ReduceOp::kSum)
                      .ok());
      wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += staged_send[i] != Expected(i);
      EXPECT_EQ(wrong, 0u) << "staged in place, count " << count;
    }
  });
}

TEST_F(AllReduceTest, HundredsOfMebibytesOneRankPerDaemon) {
  ASSERT_TRUE(cluster_->ok());
  constexpr size_t kCount = size_t{64} << 20;  // 256 MiB of float32 per rank
  testing::RunRanks(
      *cluster_, NewCommId(*cluster_), kDaemons, [](int rank) { return rank; },
      [](int rank, Communicator& comm, Client& client) {
        StatusOr<void*> memory = client.Allocate(kCount * sizeof(float));
        ASSERT_TRUE(memory.ok()) << memory.status();
        auto* data = static_cast<float*>(*memory);
        for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank + (i & 1023));
        ASSERT_TRUE(comm.AllReduce(data, data, kCount, DataType::kFloat32, ReduceOp::kSum).ok());
        size_t wrong = 0;
        for (size_t i = 0; i < kCount; ++i) {
          wrong +=
              data[i] != static_cast<float>(kDaemons * (kDaemons - 1) / 2 + kDaemons * (i & 1023));
        }
        EXPECT_EQ(wrong, 0u) << "rank " << rank;
      });
}

TEST_F(AllReduceTest, OtherTypesAndOpsAndAverage) {
  ASSERT_TRUE(cluster_->ok());
  RunWorld(*cluster_, NewCommId(*cluster_), [&](int rank, Communicator& comm, Client&) {
    std::vector<int32_t> values = {rank, -rank, 7 * rank + 1};
    ASSERT_TRUE(
        comm.AllReduce(values.data(), values.data(), 3, DataType::kInt32, ReduceOp::kMax).ok());
    EXPECT_EQ(values, (std::vector<int32_t>{kWorld - 1, 0, 7 * (kWorld - 1) + 1}));
    std::vector<double> avg = {static_cast<double>(rank)};
    ASSERT_TRUE(comm.AllReduce(avg.data(), avg.data(), 1, DataType::kFloat64, ReduceOp::kAvg).ok());
    EXPECT_DOUBLE_EQ(avg[0], (kWorld - 1) / 2.0);
  });
}

TEST_F(AllReduceTest, SeveralCommunicatorsAtOnceAndADaemonRootedCommunicator) {
  ASSERT_TRUE(cluster_->ok());
  // Two communicators, rooted at different daemons, used concurrently by the same daemons.
  const std::string first = NewCommId(*cluster_, 0);
  const std::string second = NewCommId(*cluster_, 2);
  auto body = [](int rank, Communicator& comm, Client&) {
    for (int iteration = 0; iteration < 20; ++iteration) {
      std::vector<float> data(4099, static_cast<float>(rank + iteration));
      ASSERT_TRUE(
          comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum)
              .ok());
      const float expected = kWorld * (kWorld - 1) / 2.0f + kWorld * iteration;
      ASSERT_EQ(data.front(), expected);
      ASSERT_EQ(data.back(), expected);
    }
  };
  std::thread a([&] { RunWorld(*cluster_, first, body); });
  std::thread b([&] { RunWorld(*cluster_, second, body); });
  a.join();
  b.join();
}

// An invalid argument fails its call with InvalidArgument and the communicator from there on (the
// other ranks would wait for the call): the collectives before it completed, later ones fail.
TEST_F(AllReduceTest, AnInvalidArgumentFailsTheCommunicatorFromThatCallOn) {
  ASSERT_TRUE(cluster_->ok());
  RunWorld(*cluster_, NewCommId(*cluster_), [&](int rank, Communicator& comm, Client&) {
    std::vector<float> data(8, 1.0f);
    ASSERT_TRUE(
        comm.AllReduce(data.data(), data.data(), 8, DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(data[0], static_cast<float>(kWorld));
    Status overflow =
        comm.AllReduce(data.data(), data.data(), SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(overflow.code(), StatusCode::kInvalidArgument) << overflow;
    Status later = comm.AllReduce(data.data(), data.data(), 8, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(later.code(), StatusCode::kAborted) << later;
    EXPECT_NE(later.message().find("was refused"), std::string::npos) << later;
  });
}

// The daemons choose all_reduce algorithms from the times they measured too, exchanged every 64
// operations; every rank must see the same algorithm for every operation (a daemon that chose
// differently would fail the operation's signature check), the results must be right, and the
// candidates the model predicts within 2x of its cheapest must get tried. With the root's
// --tuner-learn=false, only the model's choice runs.
TEST(MeasuredChoiceTest, DaemonsTryCandidatesAndAgreeOnEveryChoice) {
  for (const bool learn : {true, false}) {
    SCOPED_TRACE(learn ? "learning" : "model only");
    TestCluster root(1, {learn ? "--tuner-learn=true" : "--tuner-learn=false"});
    TestCluster others(2, {learn ? "--tuner-learn=false" : "--tuner-learn=true"});
    ASSERT_TRUE(root.ok() && others.ok());
    const std::string id = NewCommId(root);
    constexpr size_t kCount = 4096;  // 16 KiB of float32
    constexpr int kOperations = 400;
    std::vector<std::vector<std::string>> ran(kWorld);
    std::vector<std::string> model(kWorld);
    std::vector<int> candidates(kWorld);
    auto connect = [&](int rank) {
      const int daemon = rank / kRanksPerDaemon;
      return MustConnect(daemon == 0 ? root.daemons()[0].socket
                                     : others.daemons()[daemon - 1].socket);
    };
    // `operations` all-reduces in place, each result checked; `ran` gets the algorithms.
    auto run_checked = [&](Communicator& comm, int rank, int operations,
                           std::vector<std::string>& ran_here) {
      std::vector<float> data(kCount);
      for (int op = 0; op < operations; ++op) {
        for (size_t i = 0; i < kCount; ++i) data[i] = Input(rank, i);
        const Status status =
            comm.AllReduce(data.data(), data.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_TRUE(status.ok()) << "operation " << op << ": " << status;
        size_t wrong = 0;
        for (size_t i = 0; i < kCount; ++i) wrong += data[i] != Expected(i);
        ASSERT_EQ(wrong, 0u) << "operation " << op << " (" << comm.last_algorithm() << ")";
        ran_here.push_back(comm.last_algorithm());
      }
    };
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kWorld; ++rank) {
      threads.emplace_back([&, rank] {
        std::unique_ptr<Client> client = connect(rank);
        auto comm = client->Join(id, kWorld, rank, std::chrono::seconds(30));
        ASSERT_TRUE(comm.ok()) << comm.status();
        auto estimates = (*comm)->Explain(Collective::kAllReduce, kCount, DataType::kFloat32);
        ASSERT_TRUE(estimates.ok()) << estimates.status();
        model[rank] = std::string(AlgorithmName(estimates->front().algorithm));
        for (const AlgorithmEstimate& e : *estimates) {
          candidates[rank] += e.predicted <= 2 * estimates->front().predicted;
        }
        run_checked(**comm, rank, kOperations, ran[rank]);
        // Explain reports what the daemons measured at this size (nothing without learning).
        auto after = (*comm)->Explain(Collective::kAllReduce, kCount, DataType::kFloat32);
        ASSERT_TRUE(after.ok()) << after.status();
        int64_t samples = 0;
        for (const AlgorithmEstimate& e : *after) {
          samples += e.measured_samples;
          EXPECT_EQ(e.measured.has_value(), e.measured_samples >= 16) << e.measured_samples;
        }
        if (learn) {
          EXPECT_GT(samples, 0);
        } else {
          EXPECT_EQ(samples, 0);
        }
        EXPECT_TRUE((*comm)->Destroy().ok());
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(ran[0].size(), static_cast<size_t>(kOperations));
    for (int rank = 1; rank < kWorld; ++rank) EXPECT_EQ(ran[rank], ran[0]) << "rank " << rank;
    ASSERT_GE(candidates[0], 2) << "the test needs a second candidate at this size";
    std::set<std::string> distinct(ran[0].begin(), ran[0].end());
    if (learn) {
      EXPECT_GE(distinct.size(), 2u);
    } else {
      EXPECT_EQ(distinct, std::set<std::string>{model[0]});
    }

    // A second communicator of the same ranks starts from the first one's agreed times (the
    // root puts them in the plan): Explain shows them before any operation, alike on every
    // daemon, and the daemons go on agreeing on every choice.
    const std::string second = NewCommId(root);
    std::vector<std::vector<int64_t>> seeded(kWorld);
    std::vector<std::vector<std::string>> ran_second(kWorld);
    threads.clear();
    for (int rank = 0; rank < kWorld; ++rank) {
      threads.emplace_back([&, rank] {
        std::unique_ptr<Client> client = connect(rank);
        auto comm = client->Join(second, kWorld, rank, std::chrono::seconds(30));
        ASSERT_TRUE(comm.ok()) << comm.status();
        auto estimates = (*comm)->Explain(Collective::kAllReduce, kCount, DataType::kFloat32);
        ASSERT_TRUE(estimates.ok()) << estimates.status();
        for (const AlgorithmEstimate& e : *estimates) seeded[rank].push_back(e.measured_samples);
        run_checked(**comm, rank, 70, ran_second[rank]);  // past one exchange
        EXPECT_TRUE((*comm)->Destroy().ok());
      });
    }
    for (auto& t : threads) t.join();
    for (int rank = 1; rank < kWorld; ++rank) {
      EXPECT_EQ(seeded[rank], seeded[0]) << "rank " << rank;
      EXPECT_EQ(ran_second[rank], ran_second[0]) << "rank " << rank;
    }
    int64_t seeded_samples = 0;
    for (int64_t samples : seeded[0]) seeded_samples += samples;
    if (learn) {
      EXPECT_GT(seeded_samples, 0) << "the second communicator started from nothing";
    } else {
      EXPECT_EQ(seeded_samples, 0);
    }
  }
}

TEST(ChunkAgreementTest, DaemonsConfiguredWithDifferentChunksUseTheRootsChunk) {
  // Two separate one-daemon clusters, so each daemon has its own chunk_bytes; a communicator
  // spans both. Were each to cut messages by its own chunk, receives would not match sends.
  TestCluster small(1, {"--chunk-bytes=4096"});
  TestCluster large(1, {"--chunk-bytes=1048576"});
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(large.ok());
  for (const TestCluster* root : {&small, &large}) {
    const std::string id = NewCommId(*root);
    constexpr size_t kCount = 300000;  // 1.2 MB: many 4 KiB chunks, two 1 MiB ones
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        std::unique_ptr<Client> client =
            MustConnect((rank == 0 ? small : large).daemons()[0].socket);
        auto comm = client->Join(id, 2, rank, std::chrono::seconds(30));
        ASSERT_TRUE(comm.ok()) << comm.status();
        std::vector<float> data(kCount);
        for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank + (i & 255));
        for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree, Algorithm::kDoubling,
                                    Algorithm::kHalvingDoubling}) {
          std::vector<float> result = data;
          CallOptions options(std::chrono::seconds(20));
          options.algorithm = algorithm;
          const Status status = (*comm)->AllReduce(result.data(), result.data(), kCount,
                                                   DataType::kFloat32, ReduceOp::kSum, options);
          ASSERT_TRUE(status.ok()) << status;
          size_t wrong = 0;
          for (size_t i = 0; i < kCount; ++i) {
            wrong += result[i] != static_cast<float>(1 + 2 * (i & 255));
          }
          EXPECT_EQ(wrong, 0u) << "rank " << rank;
        }
      });
    }
    for (auto& t : threads) t.join();
  }
}

}  // namespace
}  // namespace baton
