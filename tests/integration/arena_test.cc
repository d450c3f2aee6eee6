// The node arena through real daemons (on by default; collective/node_arena.h): on one node the
// small collectives of a communicator run in shared memory without the daemon, with their
// results, the calls that differ between ranks, and a rank that goes away without destroying the
// communicator (the daemon aborts the arena, so its peers fail at once); large all_reduces where
// local rank 0's tuner says; other large calls, calls that span daemons and forced algorithms
// still go through the daemon. Ranks are threads.

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/lib/client_core.h"
#include "gtest/gtest.h"
#include "tests/testing/core_ranks.h"
#include "tests/testing/local_test_cluster.h"
#include "tests/testing/metrics_page.h"

namespace baton {
namespace {

using core::CallOptions;
using core::Client;
using core::Communicator;
using core::DataType;
using core::ReduceOp;

struct ArenaCluster {
  static constexpr int kDaemons = 2;
  static constexpr bool kFakeDevice = false;
  static std::vector<std::string> DaemonFlags() { return {}; }
};
using ArenaTest = testing::CoreClusterTest<ArenaCluster>;

TEST_F(ArenaTest, SmallCollectivesOnOneNodeRunInTheArena) {
  RunRanks(
      4, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        const int world = comm.world_size();
        std::vector<float> data(1000);
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank + i);
        ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                   ReduceOp::kSum)
                        .ok());
        EXPECT_EQ(comm.last_algorithm(), "arena");
        for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], 6.0f + 4.0f * i) << i;

        int64_t root_value = rank == 2 ? 42 : -1;
        ASSERT_TRUE(comm.Broadcast(&root_value, &root_value, 1, DataType::kInt64, 2).ok());
        EXPECT_EQ(root_value, 42);
        EXPECT_EQ(comm.last_algorithm(), "arena");

        std::vector<int32_t> gathered(world, -1);
        const int32_t mine = rank * 10;
        ASSERT_TRUE(comm.AllGather(&mine, gathered.data(), 1, DataType::kInt32).ok());
        for (int r = 0; r < world; ++r) EXPECT_EQ(gathered[r], r * 10);

        double max = rank;
        double result = -1;
        ASSERT_TRUE(comm.Reduce(&max, &result, 1, DataType::kFloat64, ReduceOp::kMax, 1).ok());
        EXPECT_EQ(result, rank == 1 ? 3.0 : -1.0);

        std::vector<int32_t> blocks(world * 2);
        for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
        std::vector<int32_t> block(2, -1);
        ASSERT_TRUE(
            comm.ReduceScatter(blocks.data(), block.data(), 2, DataType::kInt32, ReduceOp::kSum)
                .ok());
        EXPECT_EQ(block[0], world * 2 * rank);
        EXPECT_EQ(block[1], world * (2 * rank + 1));
        std::vector<int64_t> outgoing(world * 3), incoming(world * 3, -1);
        for (size_t i = 0; i < outgoing.size(); ++i) {
          outgoing[i] = static_cast<int64_t>(rank * 100 + i);
        }
        ASSERT_TRUE(comm.AllToAll(outgoing.data(), incoming.data(), 3, DataType::kInt64).ok());
        EXPECT_EQ(comm.last_algorithm(), "arena");
        for (int r = 0; r < world; ++r) {
          for (int i = 0; i < 3; ++i) EXPECT_EQ(incoming[3 * r + i], r * 100 + 3 * rank + i);
        }
        ASSERT_TRUE(comm.Barrier().ok());
        EXPECT_EQ(comm.last_algorithm(), "arena");

        // Larger than a slot, or with an algorithm asked for: through the daemon.
        std::vector<int64_t> big(40 * 1024, 1);
        ASSERT_TRUE(comm.Broadcast(big.data(), big.data(), big.size(), DataType::kInt64, 3).ok());
        EXPECT_EQ(comm.last_algorithm(), "local");
        CallOptions ring;
        ring.algorithm = collective::Algorithm::kRing;
        float one = 1;
        ASSERT_TRUE(comm.AllReduce(&one, &one, 1, DataType::kFloat32, ReduceOp::kSum, ring).ok());
        EXPECT_EQ(comm.last_algorithm(), "local");
        // And back in the arena, in order with what went through the daemon.
        ASSERT_TRUE(comm.AllReduce(&one, &one, 1, DataType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_EQ(one, 16.0f);
        EXPECT_EQ(comm.last_algorithm(), "arena");
      });
}

TEST_F(ArenaTest, RanksOnTwoNodesGoThroughTheDaemons) {
  RunRanks(
      2, [](int rank) { return rank; },
      [](int, Communicator& comm, Client&) {
        float x = 1;
        ASSERT_TRUE(comm.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_EQ(x, 2.0f);
        EXPECT_NE(comm.last_algorithm(), "arena");
      });
}

// Two ranks on each of two daemons: all_reduce, broadcast and barrier run their local phase in
// each node's arena and only local rank 0 goes through the daemon, for the node.
TEST_F(ArenaTest, OperationsAcrossNodesRunTheirLocalPhaseInTheArena) {
  constexpr int kWorld = 4;
  auto phases = [](int daemon, const char* op) {
    return testing::ScrapeMetrics(cluster_->daemons()[daemon].metrics_address)[absl::StrCat(
        "baton_arena_local_phases_total{local_node=\"node-", daemon, "\",op=\"", op, "\"}")];
  };
  const double all_reduce_before[2] = {phases(0, "all_reduce"), phases(1, "all_reduce")};
  const double broadcast_before = phases(1, "broadcast");
  const double barrier_before = phases(0, "barrier");
  RunRanks(
      kWorld, [](int rank) { return rank / 2; },
      [](int rank, Communicator& comm, Client&) {
        for (const size_t count : {size_t{1}, size_t{5000}}) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank * 100 + i % 13);
          ASSERT_TRUE(
              comm.AllReduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum)
                  .ok());
          // What the daemons ran between the nodes, on every rank.
          EXPECT_FALSE(comm.last_algorithm().empty());
          EXPECT_NE(comm.last_algorithm(), "arena");
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(data[i], static_cast<float>((0 + 100 + 200 + 300) + kWorld * (i % 13))) << i;
          }
        }
        double mean = rank;
        ASSERT_TRUE(comm.AllReduce(&mean, &mean, 1, DataType::kFloat64, ReduceOp::kAvg).ok());
        EXPECT_EQ(mean, 1.5);
        int32_t most = rank * 7;
        ASSERT_TRUE(comm.AllReduce(&most, &most, 1, DataType::kInt32, ReduceOp::kMax).ok());
        EXPECT_EQ(most, 21);
        for (int root = 0; root < kWorld; ++root) {
          std::vector<int64_t> value(3, rank == root ? 1000 + root : -1);
          ASSERT_TRUE(
              comm.Broadcast(value.data(), value.data(), value.size(), DataType::kInt64, root)
                  .ok());
          EXPECT_EQ(value, std::vector<int64_t>(3, 1000 + root)) << "root " << root;
        }
        ASSERT_TRUE(comm.Barrier().ok());
        // Large calls go through the daemon, in order with the rest.
        std::vector<float> big(100 * 1024, 1.0f);
        ASSERT_TRUE(
            comm.AllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum)
                .ok());
        EXPECT_EQ(big.back(), 4.0f);
        float one = 1;
        ASSERT_TRUE(comm.AllReduce(&one, &one, 1, DataType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_EQ(one, 4.0f);
      });
  // Each node ran the local phase of 5 small all_reduces, 4 broadcasts and the barrier (not the
  // all_reduce larger than a slot).
  for (int daemon = 0; daemon < 2; ++daemon) {
    EXPECT_EQ(phases(daemon, "all_reduce") - all_reduce_before[daemon], 5) << daemon;
  }
  EXPECT_EQ(phases(1, "broadcast") - broadcast_before, 4);
  EXPECT_EQ(phases(0, "barrier") - barrier_before, 1);
}

// Ranks 0, 2, 4 on one daemon and 1, 3, 5 on the other (not in blocks): reduce, all_gather and
// reduce_scatter run their local phase in each node's arena, each rank's block at its rank.
TEST_F(ArenaTest, ReduceAllGatherAndReduceScatterAcrossNodesRunTheirLocalPhaseInTheArena) {
  constexpr int kWorld = 6;
  auto phases = [](int daemon, const char* op) {
    return testing::ScrapeMetrics(cluster_->daemons()[daemon].metrics_address)[absl::StrCat(
        "baton_arena_local_phases_total{local_node=\"node-", daemon, "\",op=\"", op, "\"}")];
  };
  std::map<std::string, double> before;
  for (const char* op : {"reduce", "all_gather", "reduce_scatter"}) before[op] = phases(1, op);
  RunRanks(
      kWorld, [](int rank) { return rank % 2; },
      [](int rank, Communicator& comm, Client&) {
        for (const int root : {0, 5, 2}) {
          for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin}) {
            std::vector<double> data(100), out(100, -1);
            for (size_t i = 0; i < data.size(); ++i) data[i] = rank * 1000.0 + i;
            ASSERT_TRUE(
                comm.Reduce(data.data(), out.data(), data.size(), DataType::kFloat64, op, root)
                    .ok());
            EXPECT_NE(comm.last_algorithm(), "arena");
            for (size_t i = 0; i < out.size(); ++i) {
              const double sum = 15000.0 + kWorld * static_cast<double>(i);
              const double expected = op == ReduceOp::kSum   ? sum
                                      : op == ReduceOp::kAvg ? sum / kWorld
                                                             : static_cast<double>(i);
              ASSERT_EQ(out[i], rank == root ? expected : -1.0)
                  << "rank " << rank << " root " << root << " element " << i;
            }
          }
        }
        for (const size_t count : {size_t{1}, size_t{1000}}) {
          std::vector<int32_t> mine(count), gathered(kWorld * count, -1);
          for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(rank * 1'000'000 + i);
          ASSERT_TRUE(comm.AllGather(mine.data(), gathered.data(), count, DataType::kInt32).ok());
          EXPECT_NE(comm.last_algorithm(), "arena");
          for (int r = 0; r < kWorld; ++r) {
            for (size_t i = 0; i < count; ++i) {
              ASSERT_EQ(gathered[r * count + i], r * 1'000'000 + static_cast<int32_t>(i))
                  << "rank " << rank << " block " << r << " element " << i;
            }
          }
          std::vector<int64_t> blocks(kWorld * count), block(count, -1);
          for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int64_t>(i) * rank;
          ASSERT_TRUE(comm.ReduceScatter(blocks.data(), block.data(), count, DataType::kInt64,
                                         ReduceOp::kSum)
                          .ok());
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(block[i], static_cast<int64_t>(rank * count + i) * 15)
                << "rank " << rank << " element " << i;
          }
        }
        // In place: all_gather from this rank's block of the output, reduce_scatter into this
        // rank's block of the input.
        {
          std::vector<float> gathered(kWorld * 7, -1.0f);
          for (int i = 0; i < 7; ++i) gathered[rank * 7 + i] = static_cast<float>(rank * 10 + i);
          ASSERT_TRUE(
              comm.AllGather(gathered.data() + rank * 7, gathered.data(), 7, DataType::kFloat32)
                  .ok());
          for (int r = 0; r < kWorld; ++r) {
            for (int i = 0; i < 7; ++i) ASSERT_EQ(gathered[r * 7 + i], r * 10 + i) << r << " " << i;
          }
          std::vector<float> blocks(kWorld * 3);
          for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i + rank);
          ASSERT_TRUE(comm.ReduceScatter(blocks.data(), blocks.data() + rank * 3, 3,
                                         DataType::kFloat32, ReduceOp::kAvg)
                          .ok());
          for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(blocks[rank * 3 + i], static_cast<float>(rank * 3 + i) + 2.5f) << i;
          }
        }
        // all_to_all has no local phase: every rank goes through the daemon.
        std::vector<int32_t> outgoing(kWorld * 2), incoming(kWorld * 2, -1);
        for (size_t i = 0; i < outgoing.size(); ++i) outgoing[i] = rank * 100 + static_cast<int>(i);
        ASSERT_TRUE(comm.AllToAll(outgoing.data(), incoming.data(), 2, DataType::kInt32).ok());
        for (int r = 0; r < kWorld; ++r) {
          for (int i = 0; i < 2; ++i) ASSERT_EQ(incoming[2 * r + i], r * 100 + 2 * rank + i);
        }
        // An all_gather whose world of blocks exceeds a slot goes through the daemon.
        std::vector<int32_t> mine(20'000, rank), gathered(kWorld * 20'000, -1);
        ASSERT_TRUE(
            comm.AllGather(mine.data(), gathered.data(), mine.size(), DataType::kInt32).ok());
        EXPECT_EQ(gathered[5 * 20'000], 5);
      });
  // 9 reduces, 3 all_gathers and 3 reduce_scatters on each node (the large all_gather not).
  EXPECT_EQ(phases(1, "reduce") - before["reduce"], 9);
  EXPECT_EQ(phases(1, "all_gather") - before["all_gather"], 3);
  EXPECT_EQ(phases(1, "reduce_scatter") - before["reduce_scatter"], 3);
}

// Nodes whose calls differ: each node's ranks agree, so the arenas pass them, and the daemons'
// signature check between nodes fails the inter-node step; every rank fails with it at once.
TEST_F(ArenaTest, CallsThatDifferBetweenNodesFailEveryRank) {
  std::vector<absl::Status> status(4);
  std::vector<absl::Duration> took(4);
  RunRanks(
      4, [](int rank) { return rank / 2; },
      [&](int rank, Communicator& comm, Client&) {
        float data[3] = {1, 2, 3};
        const absl::Time start = absl::Now();
        status[rank] = comm.AllReduce(data, data, rank < 2 ? 2 : 3, DataType::kFloat32,
                                      ReduceOp::kSum, CallOptions(absl::Seconds(60)));
        took[rank] = absl::Now() - start;
      });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(absl::IsFailedPrecondition(status[rank])) << rank << ": " << status[rank];
    EXPECT_NE(status[rank].message().find("count 3"), std::string::npos) << status[rank];
    EXPECT_LT(took[rank], absl::Seconds(10)) << rank << ": well before the 60 s deadline";
  }
}

// Ranks interleaved over two nodes, so that local indices differ from ranks: the rank that never
// calls is named by its rank in the communicator, not by its index on its node (local rank 1
// there is rank 3; rank 1 is healthy).
TEST_F(ArenaTest, ARankThatNeverCallsIsNamedByItsRankInTheCommunicator) {
  std::vector<absl::Status> status(4);
  std::latch others_done(3);
  RunRanks(
      4, [](int rank) { return rank % 2; },
      [&](int rank, Communicator& comm, Client&) {
        if (rank == 3) {
          others_done.wait();  // never calls; leaves only once the others failed
          return;
        }
        float data[2] = {1, 2};
        status[rank] = comm.AllReduce(data, data, 2, DataType::kFloat32, ReduceOp::kSum,
                                      CallOptions(absl::Seconds(rank == 1 ? 2 : 30)));
        others_done.count_down();
      });
  EXPECT_TRUE(absl::IsDeadlineExceeded(status[1])) << status[1];
  EXPECT_NE(status[1].message().find("rank 1 (local rank 0) waited past its deadline for rank 3 "
                                     "(local rank 1), which has not called operation 1"),
            std::string::npos)
      << status[1];
  for (int rank : {0, 2}) EXPECT_FALSE(status[rank].ok()) << rank;
}

// A local rank that destroys its handle fails its arena peers' next operations at once, naming
// it, while the operation every rank completed stays completed.
TEST_F(ArenaTest, ARankThatDestroysItsHandleFailsItsArenaPeersAtOnce) {
  std::vector<absl::Status> status(2);
  absl::Duration took;
  std::latch first_done(2);
  RunRanks(
      2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client&) {
        float data[2] = {1, 2};
        status[rank] = comm.AllReduce(data, data, 2, DataType::kFloat32, ReduceOp::kSum);
        first_done.count_down();
        if (rank == 1) {
          first_done.wait();
          EXPECT_TRUE(comm.Destroy().ok());
          return;
        }
        const absl::Time start = absl::Now();
        const absl::Status next = comm.AllReduce(data, data, 2, DataType::kFloat32, ReduceOp::kSum,
                                                 CallOptions(absl::Seconds(30)));
        took = absl::Now() - start;
        EXPECT_TRUE(absl::IsFailedPrecondition(next)) << next;
        EXPECT_NE(next.message().find("rank 1 (local rank 1) left the communicator"),
                  std::string::npos)
            << next;
      });
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
  EXPECT_LT(took, absl::Seconds(15)) << "at once, not at its 30 s deadline";
}

TEST_F(ArenaTest, DifferentCallsFailEveryRank) {
  RunRanks(
      3, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        float data[2] = {1, 2};
        const absl::Status status =
            comm.AllReduce(data, data, rank == 1 ? 2 : 1, DataType::kFloat32, ReduceOp::kSum);
        EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
        EXPECT_NE(status.message().find("rank 1 (local rank 1) called all_reduce(float32, sum, "
                                        "count 2)"),
                  std::string::npos)
            << status;
      });
}

// Calls that differ so that one rank runs its call in the arena and another through the daemon
// (here: sizes on both sides of the slot) fail both at once naming both calls, not at the
// deadline: the daemon's rank records its call in the arena, and the arena's rank aborts the
// communicator on the daemon.
TEST_F(ArenaTest, CallsThatDifferAcrossTheSlotSizeFailAtOnce) {
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  RunRanks(
      2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client&) {
        std::vector<float> data(rank == 0 ? 10 : 100 * 1024, 1.0f);
        const absl::Time start = absl::Now();
        status[rank] = comm.Broadcast(data.data(), data.data(), data.size(), DataType::kFloat32, 0,
                                      CallOptions(absl::Seconds(60)));
        took[rank] = absl::Now() - start;
      });
  const std::string both =
      "rank 0 (local rank 0) called broadcast(float32, count 10, root 0), rank 1 (local rank 1) "
      "called "
      "broadcast(float32, count 102400, root 0) through the daemon";
  for (int rank = 0; rank < 2; ++rank) {
    // Rank 1 waited in the daemon, which the arena's failure aborted with its code.
    EXPECT_TRUE(absl::IsFailedPrecondition(status[rank])) << rank << ": " << status[rank];
    EXPECT_NE(status[rank].message().find(both), std::string::npos) << rank << ": " << status[rank];
    EXPECT_LT(took[rank], absl::Seconds(10)) << rank << ": well before the 60 s deadline";
  }
}

// An all_reduce on one node too large for a slot runs in the arena (the ranks reducing their
// slices a slot at a time) or through the daemon, as local rank 0's tuner says; until it has
// measured both, calls alternate, so both routes run here, in order with small calls, with every
// element checked.
TEST_F(ArenaTest, LargeAllReducesRunWhereLocalRankZeroChooses) {
  RunRanks(
      3, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        std::map<std::string, int> routes;
        // 300,001 floats: four and a bit 256 KiB slots, in place and not.
        std::vector<float> data(300'001), out(data.size(), -1);
        for (int round = 0; round < 6; ++round) {
          for (size_t i = 0; i < data.size(); ++i) {
            data[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 997) + round);
          }
          const bool in_place = round % 2 == 0;
          float* recv = in_place ? data.data() : out.data();
          ASSERT_TRUE(
              comm.AllReduce(data.data(), recv, data.size(), DataType::kFloat32, ReduceOp::kSum)
                  .ok());
          ++routes[comm.last_algorithm()];
          for (size_t i = 0; i < data.size(); ++i) {
            const float expected =
                static_cast<float>(3000 + 3 * (static_cast<int>(i % 997) + round));
            ASSERT_EQ(recv[i], expected) << "round " << round << " element " << i;
          }
          int64_t small = rank;
          ASSERT_TRUE(comm.AllReduce(&small, &small, 1, DataType::kInt64, ReduceOp::kMax).ok());
          ASSERT_EQ(small, 2);
        }
        EXPECT_EQ(routes["arena"], 3) << "alternating while both routes are measured";
        EXPECT_EQ(routes["local"], 3);
      });
}

// reduce_scatter too: its own tuner, so its alternation is not the all_reduce's.
TEST_F(ArenaTest, LargeReduceScattersRunWhereLocalRankZeroChooses) {
  RunRanks(
      2, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        std::map<std::string, int> routes;
        const size_t count = 100'003;  // two blocks of 400 KB: more than a 256 KiB slot
        std::vector<int64_t> data(2 * count), out(count, -1);
        for (int round = 0; round < 4; ++round) {
          for (size_t i = 0; i < data.size(); ++i) {
            data[i] = static_cast<int64_t>(i) * (rank + 1) + round;
          }
          ASSERT_TRUE(
              comm.ReduceScatter(data.data(), out.data(), count, DataType::kInt64, ReduceOp::kSum)
                  .ok());
          ++routes[comm.last_algorithm()];
          for (size_t i = 0; i < count; ++i) {
            const auto at = static_cast<int64_t>(rank * count + i);
            ASSERT_EQ(out[i], at * 3 + 2 * round) << "round " << round << " element " << i;
          }
          std::vector<float> big(70'000, 1.0f);  // an all_reduce beyond a slot in between
          ASSERT_TRUE(
              comm.AllReduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum)
                  .ok());
          ASSERT_EQ(big.back(), 2.0f);
        }
        EXPECT_EQ(routes["arena"], 2) << "alternating while both routes are measured";
        EXPECT_EQ(routes["local"], 2);
      });
}

TEST_F(ArenaTest, LargeAllReducesThatDifferFailAtOnce) {
  std::vector<absl::Status> status(2);
  RunRanks(
      2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client&) {
        std::vector<float> data(rank == 0 ? 100'000 : 100'001, 1.0f);
        status[rank] = comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                      ReduceOp::kSum, CallOptions(absl::Seconds(60)));
      });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(absl::IsFailedPrecondition(status[rank])) << rank << ": " << status[rank];
    EXPECT_NE(status[rank].message().find("count 100001"), std::string::npos) << status[rank];
  }
}

// The daemon counts what the ranks did in the arena without being asked per operation: its
// metrics read the ranks' counters, and keep them once the communicator is gone.
TEST_F(ArenaTest, TheDaemonCountsArenaOperations) {
  ASSERT_TRUE(cluster_->ok());
  const std::string address = cluster_->daemons()[0].metrics_address;
  const std::string all_reduce =
      R"(baton_arena_operations_total{local_node="node-0",op="all_reduce",outcome="ok"})";
  const std::string failed =
      R"(baton_arena_operations_total{local_node="node-0",op="barrier",outcome="error"})";
  const std::string bytes = R"(baton_arena_bytes_total{local_node="node-0",op="all_reduce"})";
  const std::string waited =
      R"(baton_arena_time_seconds_total{local_node="node-0",op="all_reduce",phase="wait"})";
  const std::string worked =
      R"(baton_arena_time_seconds_total{local_node="node-0",op="all_reduce",phase="work"})";
  const std::string completed = R"(baton_collectives_completed_total{local_node="node-0"})";
  std::map<std::string, double> before = testing::ScrapeMetrics(address);
  constexpr int kCalls = 25;
  RunRanks(
      3, [](int) { return 0; },
      [](int rank, Communicator& comm, Client&) {
        std::vector<float> data(16, 1.0f);
        for (int i = 0; i < kCalls; ++i) {
          ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                     ReduceOp::kSum)
                          .ok());
        }
        EXPECT_EQ(comm.last_algorithm(), "arena");
        // Every rank but rank 2 waits at a barrier it never reaches: they fail at the deadline.
        if (rank != 2) {
          EXPECT_FALSE(comm.Barrier(CallOptions(absl::Milliseconds(300))).ok());
        }
      });
  std::map<std::string, double> after = testing::ScrapeMetrics(address);
  EXPECT_EQ(after[all_reduce] - before[all_reduce], kCalls);
  EXPECT_EQ(after[failed] - before[failed], 1) << "counted once, not per rank";
  EXPECT_EQ(after[bytes] - before[bytes], kCalls * 16 * sizeof(float));
  EXPECT_GE(after[completed] - before[completed], kCalls);
  EXPECT_GT(after[waited] + after[worked], before[waited] + before[worked]);
}

// Whether thread `tid` of this process (0: none yet) is blocked in a futex wait on a word of a
// node arena (the memfd the daemon labels "baton-arena"): a rank that has spun long enough
// waiting for its peers there (collective/node_arena.cc) and sleeps until they come.
bool WaitsInArena(pid_t tid) {
  if (tid == 0) return false;
  std::ifstream syscall_file(absl::StrCat("/proc/self/task/", tid, "/syscall"));
  std::string number, first_argument;  // "running", "-1 ..." or "<number> <argument> ..."
  if (!(syscall_file >> number >> first_argument) || number != absl::StrCat(SYS_futex)) {
    return false;
  }
  uint64_t word = 0;
  if (!absl::SimpleHexAtoi(first_argument, &word)) return false;
  std::ifstream maps("/proc/self/maps");  // "<start>-<end> <perms> <offset> <dev> <inode> <path>"
  for (std::string line; std::getline(maps, line);) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    uint64_t start = 0;
    uint64_t end = 0;
    if (dash == std::string::npos || space == std::string::npos ||
        !absl::SimpleHexAtoi(line.substr(0, dash), &start) ||
        !absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &end)) {
      continue;
    }
    if (start <= word && word < end) return line.find("/memfd:baton-arena") != std::string::npos;
  }
  return false;
}

// A rank whose process goes away (its session ends) while its peers wait in the arena: the daemon
// aborts the communicator and the arena, so they fail at once, not at their deadline.
TEST_F(ArenaTest, ARankThatGoesAwayFailsItsPeersAtOnce) {
  ASSERT_TRUE(cluster_->ok());
  absl::StatusOr<std::string> id = Connect(0)->CreateCommId();
  ASSERT_TRUE(id.ok());
  absl::Status survivor;
  absl::Duration took;
  std::atomic<pid_t> rank0_thread{0};  // set before its second call
  std::thread rank0([&] {
    std::unique_ptr<Client> client = Connect(0);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = client->Join(*id, 2, 0, absl::Seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    float value = 1;
    ASSERT_TRUE((*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum).ok());
    rank0_thread = static_cast<pid_t>(syscall(SYS_gettid));
    const absl::Time start = absl::Now();
    // Rank 1 never calls again: its client goes away instead.
    survivor = (*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                  CallOptions(absl::Seconds(60)));
    took = absl::Now() - start;
  });
  {
    std::unique_ptr<Client> client = Connect(0);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = client->Join(*id, 2, 1, absl::Seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    float value = 1;
    ASSERT_TRUE((*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ((*comm)->last_algorithm(), "arena");
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (!WaitsInArena(rank0_thread.load()) && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_TRUE(WaitsInArena(rank0_thread.load())) << "rank 0 never waited in the arena";
    client.reset();  // the session ends; the communicator was never destroyed
  }
  rank0.join();
  EXPECT_TRUE(absl::IsUnavailable(survivor)) << survivor;
  EXPECT_NE(survivor.message().find("went away"), std::string::npos) << survivor;
  EXPECT_LT(took, absl::Seconds(10)) << "well before the 60 s deadline";
}

}  // namespace
}  // namespace baton
