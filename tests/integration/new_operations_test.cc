// Send/Recv, gather, scatter, all_to_all_v and abort through real daemons, every element checked:
// 3 daemons with 2 ranks each (block placement) and with 1, 2 and 3 ranks (irregular placement).
// The values are exact small integers, distinct per sender and element, so a block that went to
// the wrong rank or the wrong place fails.

#include <atomic>
#include <chrono>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::RunRanks;
using testing::TestCluster;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 6;
constexpr float kUnwritten = -1;

// Element i of what rank `rank` sends (tag: which message, for several messages per pair).
float Value(int rank, size_t i, int tag = 0) {
  return static_cast<float>(rank * 10000 + tag * 1000 + static_cast<int>(i % 997));
}

// Counts: empty, one element, odd, and one of more than 1 MiB (4 KiB chunks: many of them).
const std::vector<size_t> kCounts = {0, 1, 1001, 300000};

// The index of the first element of `got` that is not want(i), or -1.
int64_t FirstWrong(const std::vector<float>& got, size_t begin, size_t end,
                   const std::function<float(size_t)>& want) {
  for (size_t i = begin; i < end; ++i) {
    if (got[i] != want(i)) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Placement {
  std::string name;
  testing::Placement daemon_of;
};

class NewOperationsTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { cluster_ = new TestCluster(3, {"--chunk-bytes=4096"}); }
  static void TearDownTestSuite() { delete cluster_; }

  static Placement placement() {
    if (GetParam() == 0) return {"block 2,2,2", [](int rank) { return rank / 2; }};
    // Daemon 0 hosts rank 0, daemon 1 ranks 1-2, daemon 2 ranks 3-5.
    return {"irregular 1,2,3", [](int rank) { return rank == 0 ? 0 : rank < 3 ? 1 : 2; }};
  }

  static CallOptions Options() { return CallOptions(std::chrono::seconds(30)); }

  static TestCluster* cluster_;
};
TestCluster* NewOperationsTest::cluster_ = nullptr;

TEST_P(NewOperationsTest, SendRecvRingInAGroupWhicheverOrderItWasQueued) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    const int next = (rank + 1) % kWorld;
    const int previous = (rank + kWorld - 1) % kWorld;
    for (bool recv_first : {false, true}) {
      for (size_t count : kCounts) {
        SCOPED_TRACE(::testing::Message() << "rank " << rank << " count " << count
                                          << (recv_first ? " recv queued first" : " send first"));
        std::vector<float> out(count), in(count, kUnwritten);
        for (size_t i = 0; i < count; ++i) out[i] = Value(rank, i);
        Group group;
        if (recv_first) {
          EXPECT_TRUE(comm.Recv(in.data(), count, DataType::kFloat32, previous, Options()).ok());
          EXPECT_TRUE(comm.Send(out.data(), count, DataType::kFloat32, next, Options()).ok());
        } else {
          EXPECT_TRUE(comm.Send(out.data(), count, DataType::kFloat32, next, Options()).ok());
          EXPECT_TRUE(comm.Recv(in.data(), count, DataType::kFloat32, previous, Options()).ok());
        }
        Status status = group.End();
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_EQ(FirstWrong(in, 0, count, [&](size_t i) { return Value(previous, i); }), -1);
      }
    }
  });
}

TEST_P(NewOperationsTest, BlockingSendsCompleteWithoutTheirReceiveAndArriveInOrder) {
  // Every rank sends to the next before receiving anything (a send never waits for its receive),
  // several messages of different sizes, received in the order they were sent.
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    const int next = (rank + 1) % kWorld;
    const int previous = (rank + kWorld - 1) % kWorld;
    const std::vector<size_t> sizes = {3, 0, 300000, 1, 1001};
    std::vector<std::vector<float>> out(sizes.size());
    for (size_t m = 0; m < sizes.size(); ++m) {
      out[m].resize(sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = Value(rank, i, static_cast<int>(m));
      Status sent = comm.Send(out[m].data(), sizes[m], DataType::kFloat32, next, Options());
      ASSERT_TRUE(sent.ok()) << "rank " << rank << " message " << m << ": " << sent;
    }
    for (size_t m = 0; m < sizes.size(); ++m) {
      std::vector<float> in(sizes[m], kUnwritten);
      Status received = comm.Recv(in.data(), sizes[m], DataType::kFloat32, previous, Options());
      ASSERT_TRUE(received.ok()) << "rank " << rank << " message " << m << ": " << received;
      EXPECT_EQ(FirstWrong(in, 0, sizes[m],
                           [&](size_t i) { return Value(previous, i, static_cast<int>(m)); }),
                -1)
          << "rank " << rank << " message " << m;
    }
  });
}

TEST_P(NewOperationsTest, SeveralOutstandingAsyncSendsToOnePeerAreReceivedInOrder) {
  // Rank 2r sends five messages to rank 2r + 1 without waiting; the receiver posts five receives
  // without waiting; both then wait for all of them. Shared memory for half the buffers.
  RunRanks(*cluster_, kWorld, placement().daemon_of,
           [](int rank, Communicator& comm, Client& client) {
             const bool sender = rank % 2 == 0;
             const int peer = sender ? rank + 1 : rank - 1;
             const std::vector<size_t> sizes = {1001, 0, 300000, 7, 1};
             std::vector<std::vector<float>> buffers(sizes.size());
             std::vector<float*> data(sizes.size());
             std::vector<std::shared_ptr<Request>> requests;
             for (size_t m = 0; m < sizes.size(); ++m) {
               float* shared = nullptr;
               if (m % 2 == 0 && sizes[m] > 0) {
                 StatusOr<void*> memory = client.Allocate(sizes[m] * sizeof(float));
                 ASSERT_TRUE(memory.ok()) << memory.status();
                 shared = static_cast<float*>(*memory);
               }
               buffers[m].resize(sizes[m]);
               data[m] = shared != nullptr ? shared : buffers[m].data();
               for (size_t i = 0; i < sizes[m]; ++i) {
                 data[m][i] = sender ? Value(rank, i, static_cast<int>(m)) : kUnwritten;
               }
               requests.push_back(
                   sender ? comm.SendAsync(data[m], sizes[m], DataType::kFloat32, peer, Options())
                          : comm.RecvAsync(data[m], sizes[m], DataType::kFloat32, peer, Options()));
             }
             for (size_t m = 0; m < sizes.size(); ++m) {
               Status status = requests[m]->Wait(std::chrono::seconds(60));
               ASSERT_TRUE(status.ok()) << "rank " << rank << " message " << m << ": " << status;
               if (sender) continue;
               for (size_t i = 0; i < sizes[m]; ++i) {
                 ASSERT_EQ(data[m][i], Value(peer, i, static_cast<int>(m)))
                     << "rank " << rank << " message " << m << " element " << i;
               }
             }
           });
}

// A recv whose count differs from its send's fails with FailedPrecondition naming both counts.
// The send, eager, may have completed before (OK), or fails the same way when it found the recv
// waiting; either way the communicator is aborted with that error, so every rank's next operation,
// the sender's included, fails with it at once.
TEST_P(NewOperationsTest, ARecvWhoseCountDiffersFromTheSendFailsBothRanksNamingBoth) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    std::vector<float> data(8, 1);
    auto names_both = [](const Status& status) {
      return status.message().find("4 elements") != std::string::npos &&
             status.message().find("5 elements") != std::string::npos;
    };
    if (rank == 3) {
      Status sent = comm.Send(data.data(), 4, DataType::kFloat32, 4, Options());
      if (!sent.ok()) {
        EXPECT_EQ(sent.code(), StatusCode::kFailedPrecondition) << sent;
        EXPECT_TRUE(names_both(sent)) << sent;
      }
    } else if (rank == 4) {
      Status status = comm.Recv(data.data(), 5, DataType::kFloat32, 3, Options());
      EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
      EXPECT_TRUE(names_both(status)) << status;
    }
    const Clock::time_point start = Clock::now();
    Status next = comm.Barrier(Options());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(next.code(), StatusCode::kFailedPrecondition) << "rank " << rank << ": " << next;
    EXPECT_TRUE(names_both(next)) << "rank " << rank << ": " << next;
    EXPECT_LT(seconds, 10.0) << "rank " << rank << "'s barrier failed after " << seconds << " s";
  });
}

TEST_P(NewOperationsTest, GatherWithEveryRoot) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    for (int root = 0; root < kWorld; ++root) {
      for (size_t count : kCounts) {
        SCOPED_TRACE(::testing::Message()
                     << "rank " << rank << " root " << root << " count " << count);
        std::vector<float> send(count);
        for (size_t i = 0; i < count; ++i) send[i] = Value(rank, i);
        std::vector<float> recv(rank == root ? count * kWorld : 0, kUnwritten);
        // Off the root, recv is neither read nor written: null is fine there.
        Status status = comm.Gather(send.data(), rank == root ? recv.data() : nullptr, count,
                                    DataType::kFloat32, root, Options());
        ASSERT_TRUE(status.ok()) << status;
        if (rank != root) continue;
        EXPECT_EQ(
            FirstWrong(recv, 0, recv.size(),
                       [&](size_t i) { return Value(static_cast<int>(i / count), i % count); }),
            -1);
      }
    }
  });
}

TEST_P(NewOperationsTest, ScatterWithEveryRoot) {
  RunRanks(*cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm) {
    for (int root = 0; root < kWorld; ++root) {
      for (size_t count : kCounts) {
        SCOPED_TRACE(::testing::Message()
                     << "rank " << rank << " root " << root << " count " << count);
        // The root's block r holds Value(r, i): what rank r must get.
        std::vector<float> send(rank == root ? count * kWorld : 0);
        for (size_t i = 0; i < send.size(); ++i) {
          send[i] = Value(static_cast<int>(i / count), i % count);
        }
        std::vector<float> recv(count, kUnwritten);
        Status status = comm.Scatter(rank == root ? send.data() : nullptr, recv.data(), count,
                                     DataType::kFloat32, root, Options());
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_EQ(FirstWrong(recv, 0, count, [&](size_t i) { return Value(rank, i); }), -1);
      }
    }
  });
}

// Elements rank `from` sends rank `to` in the uneven pattern: zeros included (every rank sends
// nothing to itself when (from + to) % 4 == 0, ...), scaled by `scale`.
size_t Uneven(int from, int to, size_t scale) {
  return static_cast<size_t>((from * 7 + to * 3) % 5) * scale;
}

TEST_P(NewOperationsTest, AllToAllVWithUnevenCountsIncludingZeros) {
  RunRanks(
      *cluster_, kWorld, placement().daemon_of, [](int rank, Communicator& comm, Client& client) {
        for (size_t scale : {size_t{1}, size_t{1000}, size_t{70000}}) {
          SCOPED_TRACE(::testing::Message() << "rank " << rank << " scale " << scale);
          // Blocks with gaps of 3 elements between them, in reverse rank order in recv, so that the
          // displacements are not simply the prefix sums.
          constexpr size_t kGap = 3;
          std::vector<size_t> send_counts(kWorld), send_displs(kWorld), recv_counts(kWorld),
              recv_displs(kWorld);
          size_t send_span = 0;
          for (int j = 0; j < kWorld; ++j) {
            send_displs[j] = send_span;
            send_counts[j] = Uneven(rank, j, scale);
            send_span += send_counts[j] + kGap;
          }
          size_t recv_span = 0;
          for (int i = kWorld - 1; i >= 0; --i) {
            recv_displs[i] = recv_span;
            recv_counts[i] = Uneven(i, rank, scale);
            recv_span += recv_counts[i] + kGap;
          }
          // Element e of the block for rank j is Value(rank, j * 100000 + e) (a distinct value per
          // destination); the gaps hold values no block has.
          std::vector<float> send(send_span, -2);
          for (int j = 0; j < kWorld; ++j) {
            for (size_t e = 0; e < send_counts[j]; ++e) {
              send[send_displs[j] + e] = Value(rank, static_cast<size_t>(j) * 100 + e, j % 7);
            }
          }
          // recv in shared memory from Allocate (no staging), send from the heap (staged).
          StatusOr<void*> memory = client.Allocate(std::max<size_t>(1, recv_span) * sizeof(float));
          ASSERT_TRUE(memory.ok()) << memory.status();
          float* recv = static_cast<float*>(*memory);
          std::fill(recv, recv + recv_span, kUnwritten);
          Status status = comm.AllToAllV(send.data(), send_counts, send_displs, recv, recv_counts,
                                         recv_displs, DataType::kFloat32, Options());
          ASSERT_TRUE(status.ok()) << status;
          int64_t wrong = 0;
          for (int i = 0; i < kWorld; ++i) {
            for (size_t e = 0; e < recv_counts[i]; ++e) {
              const float want = Value(i, static_cast<size_t>(rank) * 100 + e, rank % 7);
              if (recv[recv_displs[i] + e] != want && wrong++ == 0) {
                ADD_FAILURE() << "block from rank " << i << " element " << e << ": "
                              << recv[recv_displs[i] + e] << ", want " << want;
              }
            }
            for (size_t g = 0; g < kGap; ++g) {
              const size_t at = recv_displs[i] + recv_counts[i] + g;
              if (recv[at] != kUnwritten && wrong++ == 0) {
                ADD_FAILURE() << "the gap after rank " << i << "'s block was written: " << recv[at];
              }
            }
          }
          EXPECT_EQ(wrong, 0);
          EXPECT_TRUE(client.Free(recv).ok());
        }
      });
}

TEST_P(NewOperationsTest, AbortFailsAPeersPendingRecvAndEveryonesNextCollectiveWithTheReason) {
  const std::string reason = "rank 0 lost its dataset shard";
  std::latch posted(1);   // rank 1's receive is submitted
  std::latch aborted(1);  // rank 0 has aborted
  std::atomic<int64_t> aborted_at{0};
  RunRanks(*cluster_, kWorld, placement().daemon_of, [&](int rank, Communicator& comm) {
    float x = 1;
    if (rank == 1) {
      // A receive that no send will ever match: pending until the abort.
      std::shared_ptr<Request> pending =
          comm.RecvAsync(&x, 1, DataType::kFloat32, 0, CallOptions(std::chrono::seconds(60)));
      posted.count_down();
      Status status = pending->Wait(std::chrono::seconds(30));
      const auto failed_at = Clock::now().time_since_epoch().count();
      EXPECT_EQ(status.code(), StatusCode::kAborted) << status;
      EXPECT_NE(status.message().find(reason), std::string::npos) << status;
      const double seconds =
          std::chrono::duration<double>(Clock::duration(failed_at - aborted_at.load())).count();
      EXPECT_LT(seconds, 5.0) << "the pending Recv failed " << seconds << " s after the abort";
    } else if (rank == 0) {
      posted.wait();
      aborted_at.store(Clock::now().time_since_epoch().count());
      Status status = comm.Abort(reason);
      EXPECT_TRUE(status.ok()) << status;
      aborted.count_down();
    } else {
      aborted.wait();
      const Clock::time_point start = Clock::now();
      Status status = comm.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                     CallOptions(std::chrono::seconds(30)));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_EQ(status.code(), StatusCode::kAborted) << "rank " << rank << ": " << status;
      EXPECT_NE(status.message().find(reason), std::string::npos) << status;
      EXPECT_LT(seconds, 5.0) << "rank " << rank << "'s all-reduce failed after " << seconds
                              << " s";
    }
    // Every later operation fails the same way, on every rank.
    Status later = comm.Barrier(CallOptions(std::chrono::seconds(30)));
    EXPECT_EQ(later.code(), StatusCode::kAborted) << "rank " << rank << ": " << later;
    EXPECT_NE(later.message().find(reason), std::string::npos) << later;
  });
}

INSTANTIATE_TEST_SUITE_P(Placements, NewOperationsTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("Block") : std::string("Irregular");
                         });

}  // namespace
}  // namespace baton
