// Every collective through real daemons, checked against a serial reference: block placement
// (3 daemons x 2 ranks, ranks 0-1 on daemon 0, ...) and interleaved placement (rank r on daemon
// r % 2), which takes the daemons' general paths.

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/element.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::RunRanks;
using testing::TestCluster;

constexpr int kWorld = 6;

// The element helpers of collective/ take its own DataType (the same values as the public one).
collective::DataType Internal(DataType type) { return static_cast<collective::DataType>(type); }

// Rank r's input element i: distinct small integers, so float sums are exact.
float In(int rank, size_t i) { return static_cast<float>(rank * 100 + static_cast<int>(i % 97)); }

struct Placement {
  std::string name;
  std::function<int(int rank)> daemon_of;
};

class CollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  // 4 KiB chunks: the larger counts span many chunks, and the daemons run reduce-scatter, reduce
  // off the root and all-to-all in many slabs (8 chunks of scratch each).
  static void SetUpTestSuite() { cluster_ = new TestCluster(3, {"--chunk-bytes=4096"}); }
  static void TearDownTestSuite() { delete cluster_; }

  Placement placement() const {
    if (GetParam() == 0) return {"block", [](int rank) { return rank / 2; }};
    return {"interleaved", [](int rank) { return rank % 2; }};
  }

  static TestCluster* cluster_;
};
TestCluster* CollectivesTest::cluster_ = nullptr;

const std::vector<size_t> kCounts = {0, 1, 5, 1001, 70000};

TEST_P(CollectivesTest, AllReduceWithEveryAlgorithm) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    for (Algorithm algorithm :
         {Algorithm::kRing, Algorithm::kTree, Algorithm::kDoubling, Algorithm::kHalvingDoubling}) {
      for (size_t count : kCounts) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = In(rank, i);
        CallOptions options;
        options.algorithm = algorithm;
        const Status status = comm.AllReduce(data.data(), data.data(), count, DataType::kFloat32,
                                             ReduceOp::kSum, options);
        ASSERT_TRUE(status.ok()) << status;
        for (size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < kWorld; ++r) expected += In(r, i);
          ASSERT_EQ(data[i], expected) << "count " << count << " i " << i;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterAllGatherAndAllToAll) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    for (size_t count : kCounts) {
      // reduce_scatter: rank r gets block r of the sum.
      std::vector<float> input(count * kWorld), block(count, -1);
      for (size_t i = 0; i < input.size(); ++i) input[i] = In(rank, i);
      ASSERT_TRUE(
          comm.ReduceScatter(input.data(), block.data(), count, DataType::kFloat32, ReduceOp::kSum)
              .ok());
      for (size_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int r = 0; r < kWorld; ++r) expected += In(r, rank * count + i);
        ASSERT_EQ(block[i], expected) << "reduce_scatter count " << count;
      }
      // all_gather: everyone's blocks in rank order.
      std::vector<int32_t> mine(count), all(count * kWorld, -1);
      for (size_t i = 0; i < count; ++i) mine[i] = rank * 1000 + static_cast<int32_t>(i);
      ASSERT_TRUE(comm.AllGather(mine.data(), all.data(), count, DataType::kInt32).ok());
      for (int r = 0; r < kWorld; ++r) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(all[r * count + i], r * 1000 + static_cast<int32_t>(i)) << "all_gather";
        }
      }
      // all_to_all: block j of rank i's input lands as block i of rank j's output.
      std::vector<int32_t> send(count * kWorld), recv(count * kWorld, -1);
      for (int j = 0; j < kWorld; ++j) {
        for (size_t i = 0; i < count; ++i) send[j * count + i] = rank * 10000 + j * 100 + i % 100;
      }
      ASSERT_TRUE(comm.AllToAll(send.data(), recv.data(), count, DataType::kInt32).ok());
      for (int src = 0; src < kWorld; ++src) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[src * count + i], src * 10000 + rank * 100 + static_cast<int>(i % 100))
              << "all_to_all from " << src;
        }
      }
    }
  });
}

// All-to-all in buffers the daemons use in place (from Allocate): straight between the ranks'
// buffers where send and receive are apart, through packed slabs where they are one buffer.
TEST_P(CollectivesTest, AllToAllInSharedBuffersApartAndInPlace) {
  RunRanks(*cluster_, kWorld, placement().daemon_of,
           [](int rank, Communicator& comm, Client& client) {
             for (size_t count : kCounts) {
               const size_t total = std::max<size_t>(1, count * kWorld);
               StatusOr<void*> send_memory = client.Allocate(total * sizeof(int32_t));
               StatusOr<void*> recv_memory = client.Allocate(total * sizeof(int32_t));
               ASSERT_TRUE(send_memory.ok() && recv_memory.ok());
               auto* send = static_cast<int32_t*>(*send_memory);
               auto* recv = static_cast<int32_t*>(*recv_memory);
               auto fill = [&](int32_t* data) {
                 for (int j = 0; j < kWorld; ++j) {
                   for (size_t i = 0; i < count; ++i) {
                     data[j * count + i] = rank * 10000 + j * 100 + static_cast<int32_t>(i % 100);
                   }
                 }
               };
               auto check = [&](const int32_t* data, const char* what) {
                 for (int src = 0; src < kWorld; ++src) {
                   for (size_t i = 0; i < count; ++i) {
                     ASSERT_EQ(data[src * count + i],
                               src * 10000 + rank * 100 + static_cast<int>(i % 100))
                         << what << ", count " << count << ", from rank " << src;
                   }
                 }
               };
               fill(send);
               std::fill_n(recv, total, -1);
               ASSERT_TRUE(comm.AllToAll(send, recv, count, DataType::kInt32).ok());
               check(recv, "apart");
               ASSERT_TRUE(comm.AllToAll(send, send, count, DataType::kInt32).ok());
               check(send, "in place");
               ASSERT_TRUE(client.Free(send).ok());
               ASSERT_TRUE(client.Free(recv).ok());
             }
           });
}

TEST_P(CollectivesTest, BroadcastAndReduceFromEveryKindOfRoot) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    for (int root : {0, kWorld - 1, 3}) {
      for (size_t count : kCounts) {
        std::vector<double> data(count, -1);
        if (rank == root) {
          for (size_t i = 0; i < count; ++i) data[i] = root * 1.5 + static_cast<double>(i);
        }
        ASSERT_TRUE(comm.Broadcast(data.data(), data.data(), count, DataType::kFloat64, root).ok());
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], root * 1.5 + static_cast<double>(i));

        std::vector<float> input(count), output(count, -7);
        for (size_t i = 0; i < count; ++i) input[i] = In(rank, i);
        ASSERT_TRUE(comm.Reduce(input.data(), output.data(), count, DataType::kFloat32,
                                ReduceOp::kMax, root)
                        .ok());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(output[i], rank == root ? In(kWorld - 1, i) : -7.0f)
              << "reduce: only the root's output is written";
        }
      }
    }
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

// Every type and reduce op through the daemons: one rank per element holds the "hot" value and
// the rest a neutral one, so every result is exact in every type (fp8 included).
TEST_P(CollectivesTest, EveryTypeAndReduceOp) {
  const std::vector<DataType> types = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                                       DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                                       DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                       DataType::kFloat64, DataType::kFp8E4M3,  DataType::kFp8E5M2};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                     ReduceOp::kMax, ReduceOp::kAvg};
  RunRanks(*cluster_, kWorld, placement().daemon_of, [&](int rank, Communicator& comm) {
    constexpr size_t kCount = 37;
    for (DataType type : types) {
      const size_t element = DataTypeSize(type);
      for (ReduceOp op : ops) {
        auto value = [&](bool hot) -> float {
          switch (op) {
            case ReduceOp::kSum:
              return hot ? 1 : 0;
            case ReduceOp::kProd:
              return hot ? 2 : 1;
            case ReduceOp::kMin:
              return hot ? 1 : 2;
            case ReduceOp::kMax:
              return hot ? 2 : 1;
            case ReduceOp::kAvg:
              return hot ? kWorld : 0;
          }
          return 0;
        };
        const float expected = op == ReduceOp::kProd || op == ReduceOp::kMax ? 2 : 1;
        std::vector<std::byte> data(kCount * element);
        for (size_t i = 0; i < kCount; ++i) {
          collective::SetElement(Internal(type), data.data(), i, value((i + rank) % kWorld == 0));
        }
        ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), kCount, type, op).ok());
        for (size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(collective::GetElement(Internal(type), data.data(), i), expected)
              << DataTypeName(type) << " " << ReduceOpName(op) << " i " << i;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllReduceAndReduceScatterOfDistinctInputsGiveTheExactSum) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    // Ranks 0-3 hold [1,2,3,4] * 10^rank; ranks 4-5 contribute zeros.
    const float scale = rank < 4 ? static_cast<float>(std::pow(10, rank)) : 0.0f;
    std::vector<float> input = {1 * scale, 2 * scale, 3 * scale, 4 * scale, 0, 0};
    std::vector<float> summed(6);
    ASSERT_TRUE(
        comm.AllReduce(input.data(), summed.data(), 6, DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(summed, (std::vector<float>{1111, 2222, 3333, 4444, 0, 0}));
    float mine = -1;
    ASSERT_TRUE(
        comm.ReduceScatter(input.data(), &mine, 1, DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(mine, summed[rank]);
  });
}

// A rank whose collective is refused (here by libbaton: a root out of range, an algorithm that
// does not implement the collective) gets InvalidArgument itself; the other ranks, which would
// wait for its part until their timeout, fail at once with Aborted naming the rank and its error,
// and so does every later collective. The operations are too large for the node arena, whose
// waits end at their own deadline (daemon/communicator.h, FailFrom).
TEST_P(CollectivesTest, ARefusedCallOnOneRankFailsItsPeersAtOnce) {
  constexpr size_t kCount = 100000;  // 400 KB: through the daemons
  for (const int refused : {0, kWorld - 1}) {
    SCOPED_TRACE(absl::StrCat("rank ", refused, " refused"));
    RunRanks(*cluster_, kWorld, placement().daemon_of, [refused](int rank, Communicator& comm) {
      std::vector<float> x(kCount * kWorld, 1);
      // One collective that completes first: the refusal fails only what comes after it.
      ASSERT_TRUE(
          comm.AllReduce(x.data(), x.data(), kCount, DataType::kFloat32, ReduceOp::kSum).ok());
      const auto start = std::chrono::steady_clock::now();
      Status status;
      if (rank != refused) {
        // Every rank's input is needed: nobody can complete it without the refused rank.
        status = comm.AllReduce(x.data(), x.data(), kCount, DataType::kFloat32, ReduceOp::kSum,
                                CallOptions(std::chrono::seconds(60)));
      } else if (refused == 0) {
        status = comm.Broadcast(x.data(), x.data(), kCount, DataType::kFloat32, kWorld);
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status;
      } else {
        CallOptions tree;
        tree.algorithm = Algorithm::kTree;
        status = comm.AllGather(x.data(), x.data(), kCount, DataType::kFloat32, tree);
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status;
        EXPECT_NE(status.message().find("tree"), std::string::npos) << status;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (rank != refused) {
        EXPECT_EQ(status.code(), StatusCode::kAborted) << "rank " << rank << ": " << status;
        EXPECT_NE(status.message().find(absl::StrCat("rank ", refused)), std::string::npos)
            << status;
        EXPECT_NE(status.message().find("refused"), std::string::npos) << status;
        EXPECT_NE(status.message().find(refused == 0 ? "root" : "tree"), std::string::npos)
            << status;
        EXPECT_LT(seconds, 20.0) << "rank " << rank << " failed after " << seconds << " s";
      }
      const Status later = comm.Barrier(CallOptions(std::chrono::seconds(60)));
      EXPECT_EQ(later.code(), StatusCode::kAborted) << "rank " << rank << ": " << later;
      EXPECT_NE(later.message().find("refused"), std::string::npos) << later;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, CollectivesTest, ::testing::Values(0, 1),
                         [](const auto& info) {
                           return std::string(info.param == 0 ? "Block" : "Interleaved");
                         });

}  // namespace
}  // namespace baton
