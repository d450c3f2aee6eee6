// Non-blocking operations (submission order, Wait/Test with deadlines) and communicator split,
// through real daemons.

#include <functional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::BlockPlacement;
using testing::NewCommId;
using testing::RunRanks;
using testing::TestCluster;

TEST(AsyncTest, QueuedOperationsRunInSubmissionOrder) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  static constexpr int kWorld = 4;
  RunRanks(cluster, NewCommId(cluster), kWorld, BlockPlacement(cluster, kWorld),
           [](int rank, Communicator& comm) {
             // Ten independent reductions, then two on the same buffer whose result depends on
             // order: (x summed) summed again = 16x for 4 ranks holding x; max first would give 4x.
             std::vector<std::vector<float>> buffers(10, std::vector<float>(1000));
             std::vector<std::shared_ptr<Request>> requests;
             for (int b = 0; b < 10; ++b) {
               std::fill(buffers[b].begin(), buffers[b].end(), static_cast<float>(rank + b));
               requests.push_back(comm.AllReduceAsync(buffers[b].data(), buffers[b].data(), 1000,
                                                      DataType::kFloat32, ReduceOp::kSum));
             }
             std::vector<float> ordered(100, 1.0f);
             auto first = comm.AllReduceAsync(ordered.data(), ordered.data(), 100,
                                              DataType::kFloat32, ReduceOp::kSum);
             auto second = comm.AllReduceAsync(ordered.data(), ordered.data(), 100,
                                               DataType::kFloat32, ReduceOp::kSum);
             // A blocking call queues behind them.
             float blocking = 1;
             ASSERT_TRUE(
                 comm.AllReduce(&blocking, &blocking, 1, DataType::kFloat32, ReduceOp::kSum).ok());
             EXPECT_EQ(blocking, kWorld);
             for (int b = 0; b < 10; ++b) {
               ASSERT_TRUE(requests[b]->Wait(std::chrono::seconds(30)).ok());
               ASSERT_TRUE(requests[b]->Test().has_value());
               EXPECT_EQ(buffers[b][999],
                         static_cast<float>(kWorld * (kWorld - 1) / 2 + kWorld * b));
             }
             ASSERT_TRUE(first->Wait().ok());
             ASSERT_TRUE(second->Wait().ok());
             EXPECT_EQ(ordered[0], kWorld * kWorld);
           });
}

TEST(AsyncTest, WaitAndTestHonourDeadlinesWhileTheOperationGoesOn) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  absl::Notification rank0_checked;
  RunRanks(cluster, NewCommId(cluster), 2, BlockPlacement(cluster, 2),
           [&](int rank, Communicator& comm) {
             if (rank == 0) {
               auto barrier = comm.BarrierAsync();
               // Rank 1 has not entered the barrier yet.
               EXPECT_FALSE(barrier->Test().has_value());
               EXPECT_EQ(barrier->Wait(std::chrono::milliseconds(50)).code(),
                         StatusCode::kDeadlineExceeded);
               rank0_checked.Notify();
               EXPECT_TRUE(barrier->Wait(std::chrono::seconds(30)).ok());
               EXPECT_EQ(barrier->Test(), Status());
             } else {
               rank0_checked.WaitForNotification();
               EXPECT_TRUE(comm.Barrier().ok());
             }
           });
}

TEST(SplitTest, ColoursFormCommunicatorsRankedByKey) {
  TestCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  static constexpr int kWorld = 7;
  RunRanks(cluster, NewCommId(cluster), kWorld, BlockPlacement(cluster, kWorld),
           [](int rank, Communicator& comm) {
             // Colours 0 and 1 by parity, rank 6 opts out; keys reverse the order.
             const int color = rank == 6 ? -1 : rank % 2;
             StatusOr<std::unique_ptr<Communicator>> split = comm.Split(color, -rank);
             ASSERT_TRUE(split.ok()) << split.status();
             // The parent is still usable, by every rank.
             float parent = 1;
             ASSERT_TRUE(comm.AllReduce(&parent, &parent, 1, DataType::kFloat32, ReduceOp::kSum,
                                        CallOptions(std::chrono::seconds(30)))
                             .ok());
             EXPECT_EQ(parent, kWorld);
             if (color < 0) {
               EXPECT_EQ(*split, nullptr);
               return;
             }
             ASSERT_NE(*split, nullptr);
             Communicator& sub = **split;
             // Colour 0: ranks {0, 2, 4} ordered by key -> 4, 2, 0. Colour 1: {1, 3, 5} -> 5, 3, 1.
             EXPECT_EQ(sub.world_size(), 3);
             EXPECT_EQ(sub.rank(), (4 + color - rank) / 2);
             float value = static_cast<float>(rank);
             ASSERT_TRUE(sub.AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum).ok());
             EXPECT_EQ(value, color == 0 ? 6.0f : 9.0f);
           });
}

}  // namespace
}  // namespace baton
