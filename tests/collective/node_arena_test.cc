// collective/node_arena.h: ranks as threads and as forked processes on one arena, every result
// checked; calls that differ, a rank that never comes, an abort from outside (the daemon's, when
// a rank dies), and headers that are not an arena.

#include "collective/node_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "collective/arena_owner.h"
#include "collective/node_arena_layout.h"
#include "collective/op_spec.h"
#include "common/status_macros.h"

namespace baton::collective {
namespace {

constexpr size_t kSlot = 64 << 10;

// Shared anonymous memory (visible to forked children) holding an initialized arena.
class SharedArena {
 public:
  // `comm_ranks`: the local ranks' ranks in the communicator (empty: the same as theirs here).
  SharedArena(int ranks, size_t slot_bytes, std::vector<int> comm_ranks = {})
      : size_(NodeArena::Bytes(ranks, slot_bytes)) {
    memory_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(memory_, MAP_FAILED);
    EXPECT_TRUE(NodeArena::Initialize(memory_, size_, ranks, slot_bytes, comm_ranks).ok());
  }
  ~SharedArena() { munmap(memory_, size_); }
  void* memory() const { return memory_; }
  size_t size() const { return size_; }
  NodeArena Attach(int rank) const {
    absl::StatusOr<NodeArena> arena = NodeArena::Attach(memory_, size_, rank);
    EXPECT_TRUE(arena.ok()) << arena.status();
    return *arena;
  }

 private:
  size_t size_;
  void* memory_;
};

void RunThreads(int ranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

float Value(int rank, size_t i, int round) {
  return static_cast<float>(rank * 100 + static_cast<int>(i % 50) + round);
}

// A sequence of all_reduces (both paths), broadcasts and barriers on every rank.
void Operations(NodeArena& arena, int rounds) {
  const int ranks = arena.ranks();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int round = 0; round < rounds; ++round) {
    for (const size_t count : {size_t{2}, size_t{1000}, size_t{1025}, kSlot / sizeof(float)}) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = Value(arena.rank(), i, round);
      ASSERT_TRUE(arena
                      .AllReduce(data.data(), data.data(), count, DataType::kFloat32,
                                 ReduceOp::kSum, deadline)
                      .ok());
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < ranks; ++r) sum += Value(r, i, round);
        ASSERT_EQ(data[i], sum) << "count " << count << " element " << i << " round " << round;
      }
    }
    std::vector<int64_t> in(77), out(77, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = arena.rank() * 1000 + static_cast<int>(i);
    const int root = round % ranks;
    ASSERT_TRUE(
        arena.Broadcast(in.data(), out.data(), in.size(), DataType::kInt64, root, deadline).ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], root * 1000 + static_cast<int>(i));
    // all_gather, in place (send is this rank's block of recv) every other round.
    std::vector<int32_t> gathered(3 * ranks, -1);
    const int32_t mine[3] = {arena.rank(), round, 7};
    const int32_t* send = mine;
    if (round % 2 == 1) {
      std::copy(mine, mine + 3, gathered.begin() + 3 * arena.rank());
      send = gathered.data() + 3 * arena.rank();
    }
    ASSERT_TRUE(arena.AllGather(send, gathered.data(), 3, DataType::kInt32, deadline).ok());
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(gathered[3 * r], r);
      ASSERT_EQ(gathered[3 * r + 1], round);
      ASSERT_EQ(gathered[3 * r + 2], 7);
    }
    // reduce to a rotating root; reduce_scatter of ranks blocks of 5.
    float value = static_cast<float>(arena.rank() + round);
    float reduced = -1;
    ASSERT_TRUE(
        arena.Reduce(&value, &reduced, 1, DataType::kFloat32, ReduceOp::kMax, root, deadline).ok());
    const float expected = arena.rank() == root ? static_cast<float>(ranks - 1 + round) : -1;
    ASSERT_EQ(reduced, expected) << "the root's only; elsewhere untouched";
    std::vector<int64_t> blocks(5 * ranks), block(5, -1);
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int64_t>(i) + arena.rank();
    ASSERT_TRUE(arena
                    .ReduceScatter(blocks.data(), block.data(), 5, DataType::kInt64, ReduceOp::kSum,
                                   deadline)
                    .ok());
    for (size_t i = 0; i < 5; ++i) {
      int64_t sum = 0;
      for (int r = 0; r < ranks; ++r) sum += static_cast<int64_t>(5 * arena.rank() + i) + r;
      ASSERT_EQ(block[i], sum) << i;
    }
    // all_to_all of blocks of 4, in place every other round.
    std::vector<int32_t> outgoing(4 * ranks), incoming(4 * ranks, -1);
    for (size_t i = 0; i < outgoing.size(); ++i) {
      outgoing[i] = arena.rank() * 10000 + round * 100 + static_cast<int32_t>(i);
    }
    int32_t* exchange_out = incoming.data();
    if (round % 2 == 1) {
      incoming = outgoing;
      exchange_out = incoming.data();
    }
    ASSERT_TRUE(arena
                    .AllToAll(round % 2 == 1 ? incoming.data() : outgoing.data(), exchange_out, 4,
                              DataType::kInt32, deadline)
                    .ok());
    for (int r = 0; r < ranks; ++r) {
      for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(incoming[4 * r + i], r * 10000 + round * 100 + 4 * arena.rank() + i)
            << "from rank " << r << " element " << i;
      }
    }
    ASSERT_TRUE(arena.Barrier(deadline).ok());
  }
}

TEST(NodeArenaTest, ThreadsAgreeOnEveryOperation) {
  for (const int ranks : {1, 2, 4}) {
    SharedArena shared(ranks, kSlot);
    RunThreads(ranks, [&](int rank) {
      NodeArena arena = shared.Attach(rank);
      Operations(arena, 20);
      // Per round: 4 all_reduces, one each of the others; every rank's bytes are its own.
      const NodeArena::Counters all_reduce = arena.counters(rank, Collective::kAllReduce);
      EXPECT_EQ(all_reduce.operations, 20u * 4);
      EXPECT_EQ(all_reduce.failed, 0u);
      EXPECT_EQ(all_reduce.bytes, 20u * (2 + 1000 + 1025 + kSlot / sizeof(float)) * 4);
      EXPECT_GE(all_reduce.busy_ns, all_reduce.wait_ns);
      for (const Collective other :
           {Collective::kBroadcast, Collective::kAllGather, Collective::kReduce,
            Collective::kReduceScatter, Collective::kAllToAll, Collective::kBarrier}) {
        EXPECT_EQ(arena.counters(rank, other).operations, 20u) << CollectiveName(other);
      }
      EXPECT_EQ(arena.counters(rank, Collective::kBarrier).bytes, 0u);
      EXPECT_EQ(arena.counters(rank, Collective::kAllToAll).bytes, 20u * 4 * ranks * 4);
      EXPECT_EQ(arena.counters(rank, Collective::kSend).operations, 0u) << "not counted: zero";
      if (rank == 0 && ranks > 1) {
        EXPECT_EQ(arena.counters(1, Collective::kBroadcast).operations, 20u) << "a peer's, read";
      }
    });
  }
}

TEST(NodeArenaTest, AverageAndMaxOnBothPaths) {
  SharedArena shared(3, kSlot);
  RunThreads(3, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (const size_t count : {size_t{3}, size_t{5000}}) {
      std::vector<double> data(count, 3.0 * rank);
      ASSERT_TRUE(arena
                      .AllReduce(data.data(), data.data(), count, DataType::kFloat64,
                                 ReduceOp::kAvg, deadline)
                      .ok());
      for (double v : data) ASSERT_EQ(v, 3.0);  // (0 + 3 + 6) / 3
      std::vector<int32_t> ints(count, rank), max(count, -1);
      ASSERT_TRUE(
          arena
              .AllReduce(ints.data(), max.data(), count, DataType::kInt32, ReduceOp::kMax, deadline)
              .ok());
      for (int32_t v : max) ASSERT_EQ(v, 2);
    }
  });
}

// all_reduce beyond one slot runs a slot at a time (each an operation number of its own), with
// the rest of the sequence in order after it; sizes that end mid-slot and mid-element-share.
TEST(NodeArenaTest, AllReducesLargerThanASlotRunASlotAtATime) {
  for (const int ranks : {1, 3, 4}) {
    SharedArena shared(ranks, kSlot);
    RunThreads(ranks, [&](int rank) {
      NodeArena arena = shared.Attach(rank);
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      const size_t slot = kSlot / sizeof(float);
      for (const size_t count : {slot + 1, 3 * slot, 5 * slot + 7}) {
        std::vector<float> data(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) data[i] = Value(rank, i, static_cast<int>(count % 13));
        const bool in_place = count % 2 == 1;
        float* recv = in_place ? data.data() : out.data();
        ASSERT_TRUE(
            arena.AllReduce(data.data(), recv, count, DataType::kFloat32, ReduceOp::kSum, deadline)
                .ok());
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < ranks; ++r) sum += Value(r, i, static_cast<int>(count % 13));
          ASSERT_EQ(recv[i], sum) << "count " << count << " element " << i;
        }
        std::vector<double> avg(2 * slot, static_cast<double>(rank));
        ASSERT_TRUE(arena
                        .AllReduce(avg.data(), avg.data(), avg.size(), DataType::kFloat64,
                                   ReduceOp::kAvg, deadline)
                        .ok());
        for (double v : avg) ASSERT_EQ(v, (ranks - 1) / 2.0);
        ASSERT_TRUE(arena.Barrier(deadline).ok());
      }
      const NodeArena::Counters counted = arena.counters(rank, Collective::kAllReduce);
      EXPECT_EQ(counted.operations, 6u) << "one per call, not per slot";
      EXPECT_EQ(counted.bytes, ((slot + 1) + 3 * slot + (5 * slot + 7)) * sizeof(float) +
                                   3 * 2 * slot * sizeof(double));
    });
  }
}

// reduce_scatter beyond one slot: the same elements of every rank's block a slot at a time.
TEST(NodeArenaTest, ReduceScattersLargerThanASlotRunASlotAtATime) {
  for (const int ranks : {1, 3, 4}) {
    SharedArena shared(ranks, kSlot);
    RunThreads(ranks, [&](int rank) {
      NodeArena arena = shared.Attach(rank);
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      const size_t chunk = kSlot / sizeof(int32_t) / static_cast<size_t>(ranks);
      const auto world = static_cast<size_t>(ranks);
      for (const size_t count : {chunk + 1, 3 * chunk, 2 * chunk + 5}) {
        std::vector<int32_t> data(world * count), out(count, -1);
        for (size_t i = 0; i < data.size(); ++i) {
          data[i] = static_cast<int32_t>(i % 1009) + rank;
        }
        // In place (recv is this rank's block of send) for odd counts.
        const bool in_place = count % 2 == 1;
        int32_t* recv = in_place ? data.data() + static_cast<size_t>(rank) * count : out.data();
        ASSERT_TRUE(
            arena
                .ReduceScatter(data.data(), recv, count, DataType::kInt32, ReduceOp::kSum, deadline)
                .ok());
        for (size_t i = 0; i < count; ++i) {
          const size_t at = static_cast<size_t>(rank) * count + i;
          int32_t sum = 0;
          for (int r = 0; r < ranks; ++r) sum += static_cast<int32_t>(at % 1009) + r;
          ASSERT_EQ(recv[i], sum) << "count " << count << " element " << i;
        }
        ASSERT_TRUE(arena.Barrier(deadline).ok());
      }
      EXPECT_EQ(arena.counters(rank, Collective::kReduceScatter).operations, 3u);
    });
  }
}

// AgreeOnRoute: every rank gets rank 0's answer, whatever it offered; rank 0 learns how long the
// previous agreed call took until its slowest rank finished it (not while one did not); a rank
// whose call differs fails every rank, as any operation does.
TEST(NodeArenaTest, RanksAgreeOnRankZerosRouteAndTimeItToTheSlowest) {
  SharedArena shared(3, kSlot);
  OpSpec spec;
  spec.collective = Collective::kAllReduce;
  spec.type = DataType::kFloat32;
  spec.op = ReduceOp::kSum;
  spec.count = 1'000'000;
  RunThreads(3, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    int agreed = 0;
    for (const bool zero_says : {true, false, false, true}) {
      const bool offered = rank == 0 ? zero_says : !zero_says;
      absl::StatusOr<NodeArena::RouteAgreement> agreement =
          arena.AgreeOnRoute(spec, offered, deadline);
      ASSERT_TRUE(agreement.ok()) << agreement.status();
      EXPECT_EQ(agreement->in_arena, zero_says);
      if (rank != 0 || agreed == 0) {
        EXPECT_FALSE(agreement->last_took.has_value()) << "rank 0's, from the second on";
      } else if (agreed == 2) {
        EXPECT_FALSE(agreement->last_took.has_value()) << "rank 2 did not finish the last one";
      } else {
        ASSERT_TRUE(agreement->last_took.has_value()) << agreed;
        EXPECT_GE(*agreement->last_took, absl::Milliseconds(30)) << "rank 1's sleep of 50 ms";
      }
      ++agreed;
      // "The call": rank 1 takes 50 ms; rank 2 fails the second (does not call FinishedRoute).
      if (rank == 1) absl::SleepFor(absl::Milliseconds(50));
      if (rank != 2 || agreed != 2) arena.FinishedRoute();
    }
    OpSpec differs = spec;
    if (rank == 1) differs.count += 1;
    absl::StatusOr<NodeArena::RouteAgreement> failed = arena.AgreeOnRoute(differs, true, deadline);
    EXPECT_TRUE(absl::IsFailedPrecondition(failed.status())) << failed.status();
    EXPECT_NE(failed.status().message().find("count 1000001) (agreeing on its route)"),
              std::string::npos)
        << failed.status();
  });
}

TEST(NodeArenaTest, DifferentCallsFailEveryRankNamingBoth) {
  SharedArena shared(4, kSlot);
  std::vector<absl::Status> first(4), later(4);
  RunThreads(4, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    float data[3] = {1, 2, 3};
    first[rank] = arena.AllReduce(data, data, rank == 2 ? 3 : 2, DataType::kFloat32, ReduceOp::kSum,
                                  deadline);
    later[rank] = arena.Barrier(deadline);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(absl::IsFailedPrecondition(first[r])) << r << ": " << first[r];
    EXPECT_NE(
        first[r].message().find("rank 2 (local rank 2) called all_reduce(float32, sum, count 3)"),
        std::string::npos)
        << first[r];
    EXPECT_EQ(later[r], first[r]) << "the arena stays aborted";
  }
  NodeArena view = shared.Attach(0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(view.counters(r, Collective::kAllReduce).failed, 1u) << r;
    EXPECT_EQ(view.counters(r, Collective::kAllReduce).operations, 0u) << r;
    EXPECT_EQ(view.counters(r, Collective::kBarrier).failed, 1u) << r;
  }
}

// Calls recorded as run through the daemon take their numbers without waiting for the peers to
// come, but a rank gets at most one operation ahead of the slowest: each number's slots (two, by
// parity) still hold the operation before the previous one, which a slower peer may be reading.
// Before, a rank two ahead overwrote its signature while a peer checked the older operation's,
// and the peer failed on a mismatch that was not there.
TEST(NodeArenaTest, ARankRecordingDaemonCallsStaysOneOperationAhead) {
  SharedArena shared(2, kSlot);
  NodeArena fast = shared.Attach(0);  // local rank 1 never calls
  OpSpec spec;
  spec.collective = Collective::kBroadcast;
  spec.count = 4;
  const absl::Time soon = absl::Now() + absl::Milliseconds(100);
  EXPECT_TRUE(fast.RecordDaemonCall(spec, soon).ok());  // operation 1
  EXPECT_TRUE(fast.RecordDaemonCall(spec, soon).ok());  // 2: its slots were never used
  // 3 would take operation 1's slots, which the slow rank has not reached yet.
  const absl::Status third = fast.RecordDaemonCall(spec, soon);
  EXPECT_TRUE(absl::IsDeadlineExceeded(third)) << third;
  EXPECT_NE(third.message().find("which has not called operation 2"), std::string::npos) << third;
}

TEST(NodeArenaTest, ARankAheadGoesOnOnceThePeersReachThePreviousOperation) {
  SharedArena shared(2, kSlot);
  OpSpec spec;
  spec.collective = Collective::kBroadcast;
  spec.count = 4;
  std::vector<absl::Status> barrier(2);
  RunThreads(2, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    if (rank == 1) absl::SleepFor(absl::Milliseconds(50));  // the slow one
    EXPECT_TRUE(arena.RecordDaemonCall(spec, deadline).ok());
    EXPECT_TRUE(arena.RecordDaemonCall(spec, deadline).ok());
    barrier[rank] = arena.Barrier(deadline);  // operation 3, in the arena
  });
  EXPECT_TRUE(barrier[0].ok()) << barrier[0];
  EXPECT_TRUE(barrier[1].ok()) << barrier[1];
}

TEST(NodeArenaTest, ARankThatNeverComesFailsThePeersAtTheirDeadlineNamedByItsCommRank) {
  SharedArena shared(4, kSlot, {4, 5, 6, 7});
  std::vector<absl::Status> status(3);
  RunThreads(3, [&](int rank) {  // rank 3 never calls
    NodeArena arena = shared.Attach(rank);
    const absl::Time deadline = absl::Now() + absl::Milliseconds(rank == 0 ? 200 : 5000);
    status[rank] = arena.Barrier(deadline);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[r])) << status[r];
    EXPECT_NE(status[r].message().find("rank 4 (local rank 0) waited past its deadline for rank 7 "
                                       "(local rank 3), which has not called operation 1"),
              std::string::npos)
        << status[r];
  }
}

// Ranks as processes; one of them dies before its third operation, and the parent (standing in
// for the daemon, which sees the rank's session end) aborts the arena: the others fail with the
// reason instead of waiting for their deadline.
TEST(NodeArenaTest, ProcessesAndADeadRankAbortedFromOutside) {
  constexpr int kRanks = 4;
  SharedArena shared(kRanks, kSlot);
  std::vector<pid_t> children;
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      NodeArena arena = shared.Attach(rank);
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      for (int op = 0;; ++op) {
        if (rank == 3 && op == 2) _exit(0);  // dies
        float x = static_cast<float>(rank);
        const absl::Status status =
            arena.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, deadline);
        if (!status.ok()) {
          _exit(absl::IsAborted(status) &&
                        status.message().find("local rank 3 died") != std::string::npos
                    ? 10
                    : 11);
        }
        if (x != 6.0f) _exit(12);
      }
    }
    children.push_back(pid);
  }
  int status = 0;
  ASSERT_EQ(waitpid(children[3], &status, 0), children[3]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  AbortArena(shared.memory(), shared.size(), absl::AbortedError("local rank 3 died"));
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(waitpid(children[rank], &status, 0), children[rank]);
    EXPECT_TRUE(WIFEXITED(status)) << rank;
    EXPECT_EQ(WEXITSTATUS(status), 10) << "rank " << rank;
  }
}

// Two nodes' leaders meeting in place of the daemons: each hands in its node's buffer and gets
// back the element-wise sum of both (all_reduce), or the root node's buffer (broadcast).
class TwoLeaders {
 public:
  absl::Status Sum(int node, float* buffer, size_t count) {
    return Meet(node, buffer, count, [&](const std::vector<float>& other) {
      for (size_t i = 0; i < count; ++i) buffer[i] += other[i];
    });
  }
  absl::Status From(int node, int root_node, float* buffer, size_t count) {
    return Meet(node, buffer, count, [&](const std::vector<float>& other) {
      if (node != root_node) std::copy(other.begin(), other.end(), buffer);
    });
  }
  // all_gather: the other node's blocks of `block` elements at `other_ranks`.
  absl::Status Blocks(int node, float* buffer, size_t count, size_t block,
                      const std::vector<int>& other_ranks) {
    return Meet(node, buffer, count, [&](const std::vector<float>& other) {
      for (const int r : other_ranks) {
        std::copy_n(other.begin() + static_cast<ptrdiff_t>(r * block), block, buffer + r * block);
      }
    });
  }

 private:
  absl::Status Meet(int node, const float* buffer, size_t count,
                    const std::function<void(const std::vector<float>&)>& take) {
    absl::MutexLock lock(&mu_);
    const int round = rounds_[node]++;
    posted_[node][round] = std::vector<float>(buffer, buffer + count);
    auto other_posted = [&] { return posted_[1 - node].count(round) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&other_posted), absl::Seconds(30))) {
      return absl::DeadlineExceededError("the other node never came");
    }
    take(posted_[1 - node][round]);
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  int rounds_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  std::map<int, std::vector<float>> posted_[2] ABSL_GUARDED_BY(mu_);
};

TEST(NodeArenaTest, OperationsAcrossNodesRunTheirLocalPhaseHere) {
  constexpr int kNodes = 2;
  constexpr int kLocal = 3;
  SharedArena node0(kLocal, kSlot);
  SharedArena node1(kLocal, kSlot);
  SharedArena* nodes[kNodes] = {&node0, &node1};
  TwoLeaders leaders;
  std::vector<std::thread> threads;
  std::atomic<int> across_calls{0};
  for (int node = 0; node < kNodes; ++node) {
    for (int local = 0; local < kLocal; ++local) {
      threads.emplace_back([&, node, local] {
        NodeArena arena = nodes[node]->Attach(local);
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        const int rank = node * kLocal + local;
        for (const size_t count : {size_t{1}, size_t{3000}}) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank * 10 + i % 7);
          ASSERT_TRUE(arena
                          .AllReduceAcross(data.data(), data.data(), count, DataType::kFloat32,
                                           ReduceOp::kSum, deadline,
                                           [&](void* buffer) -> absl::StatusOr<std::string> {
                                             ++across_calls;
                                             BATON_RETURN_IF_ERROR(leaders.Sum(
                                                 node, static_cast<float*>(buffer), count));
                                             return "ring";
                                           })
                          .ok());
          for (size_t i = 0; i < count; ++i) {
            float sum = 0;
            for (int r = 0; r < kNodes * kLocal; ++r) sum += static_cast<float>(r * 10 + i % 7);
            ASSERT_EQ(data[i], sum) << "count " << count << " element " << i;
          }
        }
        // broadcast from global rank 4 (node 1, local 1), then from rank 0 (node 0, local 0).
        for (const int root : {4, 0}) {
          float value = rank == root ? 42.0f + root : -1.0f;
          const int root_node = root / kLocal;
          ASSERT_TRUE(arena
                          .BroadcastAcross(&value, &value, 1, DataType::kFloat32, root,
                                           rank == root, deadline,
                                           [&](void* buffer) -> absl::StatusOr<std::string> {
                                             BATON_RETURN_IF_ERROR(leaders.From(
                                                 node, root_node, static_cast<float*>(buffer), 1));
                                             return "ring";
                                           })
                          .ok());
          EXPECT_EQ(value, 42.0f + root) << "rank " << rank << " root " << root;
        }
        absl::StatusOr<std::string> note =
            arena.BarrierAcross(deadline, [&](void* buffer) -> absl::StatusOr<std::string> {
              EXPECT_EQ(buffer, nullptr);
              float none = 0;
              BATON_RETURN_IF_ERROR(leaders.Sum(node, &none, 0));
              return "a note longer than the thirty-one characters kept";
            });
        ASSERT_TRUE(note.ok()) << note.status();
        EXPECT_EQ(*note, "a note longer than the thirty-o") << "every local rank's, 31 kept";
        EXPECT_EQ(arena.counters(local, Collective::kAllReduce).operations, 0u)
            << "the daemon counts operations across nodes";
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(across_calls.load(), kNodes * 2) << "once per node and call: local rank 0's";
}

// Ranks 0 and 2 on node 0, 1 and 3 on node 1: each rank's block lands at its rank in the
// communicator, not at its local index.
TEST(NodeArenaTest, ReduceAllGatherAndReduceScatterAcrossNodes) {
  constexpr int kWorld = 4;
  SharedArena node0(2, kSlot);
  SharedArena node1(2, kSlot);
  SharedArena* nodes[2] = {&node0, &node1};
  TwoLeaders leaders;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      const int node = rank % 2;
      NodeArena arena = nodes[node]->Attach(rank / 2);
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      auto sum = [&](size_t count) {
        return [&, count](void* buffer) -> absl::StatusOr<std::string> {
          BATON_RETURN_IF_ERROR(leaders.Sum(node, static_cast<float*>(buffer), count));
          return "ring";
        };
      };
      // reduce to rank 3 (node 1, local 1), an average: the node's sum goes across.
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::vector<float> data(300), out(300, -1.0f);
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank + i);
        absl::StatusOr<std::string> note =
            arena.ReduceAcross(data.data(), out.data(), data.size(), DataType::kFloat32, op, 3,
                               rank == 3, deadline, sum(data.size()));
        ASSERT_TRUE(note.ok()) << note.status();
        EXPECT_EQ(*note, "ring");
        for (size_t i = 0; i < out.size(); ++i) {
          const float node_sum = static_cast<float>(6 + 4 * i);  // the leaders do not divide
          ASSERT_EQ(out[i], rank == 3 ? node_sum : -1.0f) << "rank " << rank << " element " << i;
        }
      }
      // all_gather of 5 elements, in place on odd ranks.
      constexpr size_t kBlock = 5;
      std::vector<float> gathered(kWorld * kBlock, -1.0f);
      std::vector<float> mine(kBlock);
      for (size_t i = 0; i < kBlock; ++i) mine[i] = static_cast<float>(rank * 100 + i);
      const float* send = mine.data();
      if (rank % 2 == 1) {
        std::copy(mine.begin(), mine.end(), gathered.begin() + rank * kBlock);
        send = gathered.data() + rank * kBlock;
      }
      const std::vector<int> other_ranks =
          node == 0 ? std::vector<int>{1, 3} : std::vector<int>{0, 2};
      ASSERT_TRUE(arena
                      .AllGatherAcross(send, gathered.data(), kBlock, DataType::kFloat32, rank,
                                       kWorld, deadline,
                                       [&](void* buffer) -> absl::StatusOr<std::string> {
                                         BATON_RETURN_IF_ERROR(
                                             leaders.Blocks(node, static_cast<float*>(buffer),
                                                            kWorld * kBlock, kBlock, other_ranks));
                                         return "ring";
                                       })
                      .ok());
      for (int r = 0; r < kWorld; ++r) {
        for (size_t i = 0; i < kBlock; ++i) {
          ASSERT_EQ(gathered[r * kBlock + i], static_cast<float>(r * 100 + i))
              << "rank " << rank << " block " << r;
        }
      }
      // reduce_scatter of 4 blocks of 3.
      std::vector<float> blocks(kWorld * 3), block(3, -1.0f);
      for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i * 10 + rank);
      ASSERT_TRUE(arena
                      .ReduceScatterAcross(blocks.data(), block.data(), 3, DataType::kFloat32,
                                           ReduceOp::kSum, rank, kWorld, deadline,
                                           sum(blocks.size()))
                      .ok());
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(block[i], static_cast<float>(4 * 10 * (3 * rank + i) + 6)) << rank << " " << i;
      }
      // A world too large for the slot, or a rank outside it, is refused before anything is
      // shared (every rank alike, so nobody waits).
      EXPECT_TRUE(absl::IsInvalidArgument(
          arena
              .AllGatherAcross(send, gathered.data(), kSlot / sizeof(float) / 2, DataType::kFloat32,
                               rank, kWorld, deadline, sum(0))
              .status()));
      EXPECT_TRUE(absl::IsInvalidArgument(
          arena
              .ReduceScatterAcross(blocks.data(), block.data(), 3, DataType::kFloat32,
                                   ReduceOp::kSum, kWorld, kWorld, deadline, sum(0))
              .status()));
      EXPECT_EQ(arena.counters(rank / 2, Collective::kAllGather).local_phases, 1u);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NodeArenaTest, AFailedInterNodeStepFailsEveryLocalRankAndAveragesAreSums) {
  SharedArena shared(3, kSlot);
  std::vector<absl::Status> status(3);
  RunThreads(3, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    float value = 1;
    status[rank] = arena
                       .AllReduceAcross(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                        absl::Now() + absl::Seconds(30),
                                        [](void*) -> absl::StatusOr<std::string> {
                                          return absl::UnavailableError("node-1 went away");
                                        })
                       .status();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(absl::IsUnavailable(status[r])) << r << ": " << status[r];
    EXPECT_EQ(status[r].message(), "node-1 went away") << r;
  }
  SharedArena other(2, kSlot);
  RunThreads(2, [&](int rank) {
    NodeArena arena = other.Attach(rank);
    float value = 1.0f + rank;
    EXPECT_TRUE(arena
                    .AllReduceAcross(&value, &value, 1, DataType::kFloat32, ReduceOp::kAvg,
                                     absl::Now() + absl::Seconds(30),
                                     [](void* buffer) -> absl::StatusOr<std::string> {
                                       *static_cast<float*>(buffer) /= 4;  // as over 4 ranks
                                       return "tree";
                                     })
                    .ok());
    EXPECT_EQ(value, 0.75f) << "the node's sum, which the inter-node step averages";
  });
}

// The inter-node step fails at the deadline (the daemons time out waiting for another node): the
// other local ranks, whose deadlines passed meanwhile, fail with its reason, not by blaming rank 0.
// Local rank 0's inter-node step that outlasts the deadline (or never ends: rank 0 is the
// others' to trust only as far as their deadline) fails the others at their deadline, saying
// that rank 0 was still in it; rank 0 gets its own step's reason.
TEST(NodeArenaTest, AnInterNodeStepThatOutlastsTheDeadlineFailsTheOthersAtIt) {
  SharedArena shared(3, kSlot, {4, 5, 6});
  std::vector<absl::Status> status(3);
  std::vector<absl::Duration> took(3);
  RunThreads(3, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    std::vector<int32_t> gathered(8, -1);
    const int32_t mine = rank;
    const absl::Time start = absl::Now();
    status[rank] = arena
                       .AllGatherAcross(&mine, gathered.data(), 1, DataType::kInt32, rank + 4, 8,
                                        start + absl::Milliseconds(300),
                                        [](void*) -> absl::StatusOr<std::string> {
                                          absl::SleepFor(absl::Seconds(3));
                                          return absl::DeadlineExceededError(
                                              "operation 1 did not complete before the deadline "
                                              "(waiting on node-1)");
                                        })
                       .status();
    took[rank] = absl::Now() - start;
  });
  EXPECT_TRUE(absl::IsDeadlineExceeded(status[0])) << status[0];
  for (int r = 1; r < 3; ++r) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[r])) << r << ": " << status[r];
    EXPECT_NE(status[r].message().find(
                  "for rank 4 (local rank 0), which has not finished the node's step between "
                  "nodes of operation 1"),
              std::string::npos)
        << status[r];
    EXPECT_LT(took[r], absl::Seconds(2)) << r << ": at its 300 ms deadline, not after rank 0";
  }
}

TEST(NodeArenaTest, AttachChecksTheHeaderAndTheRank) {
  std::vector<std::byte> garbage(NodeArena::Bytes(2, 4096), std::byte{0x5a});
  EXPECT_TRUE(
      absl::IsInvalidArgument(NodeArena::Attach(garbage.data(), garbage.size(), 0).status()));
  SharedArena shared(2, 4096);
  EXPECT_TRUE(
      absl::IsInvalidArgument(NodeArena::Attach(shared.memory(), shared.size(), 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(NodeArena::Attach(shared.memory(), 100, 0).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(NodeArena::Initialize(shared.memory(), shared.size(), 3, 4096)))
      << "three ranks do not fit";
  NodeArena arena = shared.Attach(0);
  std::vector<float> big(4096 / sizeof(float) + 1);
  EXPECT_TRUE(absl::IsInvalidArgument(arena.Broadcast(
      big.data(), big.data(), big.size(), DataType::kFloat32, 0, absl::InfiniteFuture())))
      << "only all_reduce runs a slot at a time";
  EXPECT_TRUE(absl::IsInvalidArgument(arena.AllReduce(big.data(), big.data(), SIZE_MAX / 2,
                                                      DataType::kFloat32, ReduceOp::kSum,
                                                      absl::InfiniteFuture())))
      << "a count whose bytes overflow";
  EXPECT_TRUE(absl::IsInvalidArgument(arena.ReduceScatter(big.data(), big.data(), SIZE_MAX / 4,
                                                          DataType::kFloat32, ReduceOp::kSum,
                                                          absl::InfiniteFuture())))
      << "2 blocks whose bytes overflow";
  EXPECT_TRUE(absl::IsInvalidArgument(arena.AllGather(big.data(), big.data(), big.size(),
                                                      DataType::kFloat32, absl::InfiniteFuture())))
      << "4100 bytes do not fit 4096";
  EXPECT_TRUE(absl::IsInvalidArgument(arena.Reduce(big.data(), big.data(), 1, DataType::kFloat32,
                                                   ReduceOp::kSum, 5, absl::InfiniteFuture())));
  EXPECT_TRUE(arena.aborted().ok()) << "a refused call shares nothing";
}

// What a rank writes into the arena cannot keep its peers waiting past their deadline: an abort
// word left "being written" (a rank that died while aborting, or wrote it on purpose), a value no
// rank writes, or one that flips between live and aborted.
class HostileAbortWordTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(HostileAbortWordTest, PeersFailByTheirDeadlineAndNeverSucceedAlone) {
  SharedArena shared(4, kSlot);
  auto& state = static_cast<arena::Header*>(shared.memory())->abort_state;
  const uint32_t value = GetParam();
  std::atomic<bool> stop{false};
  // Rank 3 never calls; it writes the abort word instead, again and again, flipping it back to
  // live in between.
  std::thread hostile([&] {
    while (!stop.load()) {
      state.store(value);
      std::this_thread::yield();
      state.store(arena::kLive);
      std::this_thread::yield();
    }
    state.store(value);
  });
  std::vector<absl::Status> status(3);
  std::vector<absl::Duration> took(3);
  RunThreads(3, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    const absl::Time start = absl::Now();
    for (int op = 0; op < 50 && status[rank].ok(); ++op) {
      status[rank] = arena.Barrier(start + absl::Seconds(1));
    }
    took[rank] = absl::Now() - start;
  });
  stop.store(true);
  hostile.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(status[rank].ok()) << "rank 3 never called: no barrier may complete";
    EXPECT_LT(took[rank], absl::Seconds(20)) << rank << ": its deadline was 1 s";
  }
  // Left in the hostile state: a later call fails at once, whatever it holds.
  NodeArena arena = shared.Attach(0);
  const absl::Time start = absl::Now();
  const absl::Status later = arena.Barrier(start + absl::Seconds(30));
  EXPECT_FALSE(later.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << later;
}

INSTANTIATE_TEST_SUITE_P(Values, HostileAbortWordTest,
                         ::testing::Values(uint32_t{arena::kWriting}, uint32_t{7},
                                           uint32_t{0xffffffff}));

// The reason's code is the rank's to write: OK or a value that is no status code still fails.
TEST(NodeArenaTest, AnAbortWithCodeOkOrNonsenseStillFails) {
  SharedArena shared(2, kSlot);
  auto* header = static_cast<arena::Header*>(shared.memory());
  for (int32_t code : {0, -5, 99}) {
    header->abort_code = code;
    header->abort_state.store(arena::kAborted);
    const absl::Status status = shared.Attach(0).aborted();
    EXPECT_TRUE(absl::IsAborted(status)) << code << ": " << status;
  }
}

// A rank that rewrites the shape after the others attached changes nothing for them (their
// handles keep their own copy), and a shape that lies is refused at Attach.
TEST(NodeArenaTest, TheShapeIsReadOnceAndChecked) {
  SharedArena shared(2, 4096);
  NodeArena before = shared.Attach(0);
  auto& shape = static_cast<arena::Header*>(shared.memory())->shape;
  shape.ranks = NodeArena::kMaxRanks;
  EXPECT_EQ(before.ranks(), 2);
  EXPECT_EQ(before.counters(40, Collective::kBarrier).operations, 0u) << "out of its ranks";
  EXPECT_TRUE(
      absl::IsInvalidArgument(NodeArena::Attach(shared.memory(), shared.size(), 0).status()))
      << "64 ranks do not fit these bytes";
  shape.ranks = 2;
  shape.slot_bytes = uint64_t{1} << 40;
  EXPECT_TRUE(
      absl::IsInvalidArgument(NodeArena::Attach(shared.memory(), shared.size(), 0).status()));
}

// A rank the daemon marks gone after an operation: the next fails at once for the others,
// naming it by its rank in the communicator.
TEST(NodeArenaTest, ARankMarkedGoneFailsTheOperationsItNeverReached) {
  constexpr int kRanks = 3;
  SharedArena shared(kRanks, kSlot);
  absl::StatusOr<ArenaOwner> owner =
      ArenaOwner::Create(shared.memory(), shared.size(), std::vector<int>{7, 8, 9}, kSlot);
  ASSERT_TRUE(owner.ok()) << owner.status();
  std::vector<absl::Status> first(kRanks), second(kRanks);
  std::vector<absl::Duration> took(kRanks);
  std::latch left(1);
  RunThreads(kRanks, [&](int rank) {
    NodeArena arena = shared.Attach(rank);
    float x = 1;
    first[rank] = arena.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                  absl::Now() + absl::Seconds(30));
    if (rank == 1) {  // leaves; the daemon marks it gone
      owner->MarkGone(1);
      left.count_down();
      return;
    }
    left.wait();
    const absl::Time start = absl::Now();
    second[rank] = arena.Barrier(start + absl::Seconds(30));
    took[rank] = absl::Now() - start;
  });
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_TRUE(first[rank].ok()) << first[rank];
  for (int rank : {0, 2}) {
    EXPECT_TRUE(absl::IsFailedPrecondition(second[rank])) << second[rank];
    EXPECT_NE(second[rank].message().find("rank 8 (local rank 1) left the communicator"),
              std::string::npos)
        << second[rank];
    EXPECT_LT(took[rank], absl::Seconds(15)) << "at once, not at the 30 s deadline";
  }
}
}  // namespace
}  // namespace baton::collective
