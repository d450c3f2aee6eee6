// libbaton's collectives through the C API (<baton/baton.h>) and libbaton.so, against a local
// cluster of two real daemons with two ranks on each (threads, each with its own client): every
// collective blocking and non-blocking, with its values checked element by element, on buffers
// from baton_client_alloc and on plain malloc'd ones, in place and not; and how requests report
// pending, done and failed operations.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.h"
#include "tests/client/c_api_test_support.h"

namespace baton::testing {
namespace {

::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

// Counts: none, one, fewer than the ranks, odd, and many 4 KiB chunks (the daemons run with
// --chunk-bytes=4096).
const std::vector<size_t> kCounts = {0, 1, 3, 1027, 20000};

// ---- Collectives, blocking, on both kinds of memory ----------------------------------------

class CApiCollectiveTest : public ::testing::TestWithParam<Memory> {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster != nullptr && cluster->ok()); }
  Memory memory() const { return GetParam(); }
};

TEST_P(CApiCollectiveTest, AllReduceSumsFloat32AndInt64) {
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      // float32, in place: rank r holds (r + 1) * (i % 97 + 1); the sum is 10 * (i % 97 + 1).
      Buffer data(r.client, memory(), count * sizeof(float));
      float* f = data.as<float>();
      for (size_t i = 0; i < count; ++i) f[i] = float(r.rank + 1) * float(i % 97 + 1);
      EXPECT_TRUE(
          Succeeds(baton_all_reduce(r.comm, f, f, count, BATON_FLOAT32, BATON_SUM, &options)));
      EXPECT_TRUE(ElementsAre(f, count, [](size_t i) { return 10.0f * float(i % 97 + 1); }));

      // int64, out of place, values beyond 32 bits: (r + 1) * 10^12 + i sums to 10^13 + 4 i.
      Buffer send(r.client, memory(), count * sizeof(int64_t));
      Buffer recv(r.client, memory(), count * sizeof(int64_t));
      int64_t* s = send.as<int64_t>();
      int64_t* d = recv.as<int64_t>();
      for (size_t i = 0; i < count; ++i) {
        s[i] = int64_t(r.rank + 1) * 1000000000000 + int64_t(i);
        d[i] = -1;
      }
      EXPECT_TRUE(
          Succeeds(baton_all_reduce(r.comm, s, d, count, BATON_INT64, BATON_SUM, &options)));
      EXPECT_TRUE(ElementsAre(d, count, [](size_t i) { return 10000000000000 + 4 * int64_t(i); }));
      EXPECT_TRUE(ElementsAre(s, count, [&](size_t i) {
        return int64_t(r.rank + 1) * 1000000000000 + int64_t(i);
      })) << "send must not change";
    }
  });
}

TEST_P(CApiCollectiveTest, AllReduceAppliesEveryOperator) {
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    const size_t count = 1027;
    Buffer data(r.client, memory(), count * sizeof(int32_t));
    int32_t* v = data.as<int32_t>();
    // Rank r holds (r + 1) + i % 3, so over ranks 0..3 with k = i % 3: min 1 + k, max 4 + k,
    // prod (1 + k)(2 + k)(3 + k)(4 + k).
    auto fill = [&] {
      for (size_t i = 0; i < count; ++i) v[i] = (r.rank + 1) + int32_t(i % 3);
    };
    fill();
    EXPECT_TRUE(Succeeds(baton_all_reduce(r.comm, v, v, count, BATON_INT32, BATON_MIN, &options)));
    EXPECT_TRUE(ElementsAre(v, count, [](size_t i) { return 1 + int32_t(i % 3); })) << "min";
    fill();
    EXPECT_TRUE(Succeeds(baton_all_reduce(r.comm, v, v, count, BATON_INT32, BATON_MAX, &options)));
    EXPECT_TRUE(ElementsAre(v, count, [](size_t i) { return 4 + int32_t(i % 3); })) << "max";
    fill();
    EXPECT_TRUE(Succeeds(baton_all_reduce(r.comm, v, v, count, BATON_INT32, BATON_PROD, &options)));
    EXPECT_TRUE(ElementsAre(v, count, [](size_t i) {
      const int32_t k = int32_t(i % 3);
      return (1 + k) * (2 + k) * (3 + k) * (4 + k);
    })) << "prod";

    // avg of (r + 1) * (i + 1) over 4 ranks: 2.5 * (i + 1), exact in float64.
    Buffer avg(r.client, memory(), count * sizeof(double));
    double* a = avg.as<double>();
    for (size_t i = 0; i < count; ++i) a[i] = double(r.rank + 1) * double(i + 1);
    EXPECT_TRUE(
        Succeeds(baton_all_reduce(r.comm, a, a, count, BATON_FLOAT64, BATON_AVG, &options)));
    EXPECT_TRUE(ElementsAre(a, count, [](size_t i) { return 2.5 * double(i + 1); })) << "avg";
  });
}

TEST_P(CApiCollectiveTest, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      // send[j] = (r + 1) * (j % 101 + 1) over count * 4 elements; rank r's block of the sum
      // is 10 * ((r * count + i) % 101 + 1).
      Buffer send(r.client, memory(), count * kWorld * sizeof(float));
      Buffer recv(r.client, memory(), count * sizeof(float));
      float* s = send.as<float>();
      for (size_t j = 0; j < count * kWorld; ++j) s[j] = float(r.rank + 1) * float(j % 101 + 1);
      auto expected = [&](size_t i) { return 10.0f * float((r.rank * count + i) % 101 + 1); };
      EXPECT_TRUE(Succeeds(baton_reduce_scatter(r.comm, s, recv.as<float>(), count, BATON_FLOAT32,
                                                BATON_SUM, &options)));
      EXPECT_TRUE(ElementsAre(recv.as<float>(), count, expected)) << "out of place";
      // In place: recv is the start of send.
      EXPECT_TRUE(
          Succeeds(baton_reduce_scatter(r.comm, s, s, count, BATON_FLOAT32, BATON_SUM, &options)));
      EXPECT_TRUE(ElementsAre(s, count, expected)) << "in place";
    }
  });
}

TEST_P(CApiCollectiveTest, AllGatherConcatenatesInRankOrder) {
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      Buffer send(r.client, memory(), count * sizeof(int32_t));
      Buffer recv(r.client, memory(), count * kWorld * sizeof(int32_t));
      int32_t* s = send.as<int32_t>();
      int32_t* d = recv.as<int32_t>();
      for (size_t i = 0; i < count; ++i) s[i] = r.rank * 100000 + int32_t(i);
      auto expected = [&](size_t j) { return int32_t(j / count) * 100000 + int32_t(j % count); };
      EXPECT_TRUE(Succeeds(baton_all_gather(r.comm, s, d, count, BATON_INT32, &options)));
      EXPECT_TRUE(ElementsAre(d, count * kWorld, expected)) << "out of place";
      // In place (send == recv): this rank's part is the start of recv.
      for (size_t j = 0; j < count * kWorld; ++j) d[j] = -1;
      for (size_t i = 0; i < count; ++i) d[i] = r.rank * 100000 + int32_t(i);
      EXPECT_TRUE(Succeeds(baton_all_gather(r.comm, d, d, count, BATON_INT32, &options)));
      EXPECT_TRUE(ElementsAre(d, count * kWorld, expected)) << "in place";
    }
  });
}

TEST_P(CApiCollectiveTest, BroadcastFromANonZeroRoot) {
  constexpr int kRoot = 2;  // on daemon 1
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      auto expected = [](size_t i) { return 7.0 * double(i % 1000) + 0.5; };
      Buffer send(r.client, memory(), count * sizeof(double));
      Buffer recv(r.client, memory(), count * sizeof(double));
      double* s = send.as<double>();
      double* d = recv.as<double>();
      for (size_t i = 0; i < count; ++i) {
        s[i] = r.rank == kRoot ? expected(i) : -2.0;
        d[i] = -1.0;
      }
      // Out of place; the other ranks' send is not read, so they may pass NULL.
      EXPECT_TRUE(Succeeds(baton_broadcast(r.comm, r.rank == kRoot ? s : nullptr, d, count,
                                           BATON_FLOAT64, kRoot, &options)));
      EXPECT_TRUE(ElementsAre(d, count, expected)) << "out of place";
      // In place.
      EXPECT_TRUE(Succeeds(baton_broadcast(r.comm, s, s, count, BATON_FLOAT64, kRoot, &options)));
      EXPECT_TRUE(ElementsAre(s, count, expected)) << "in place";
    }
  });
}

TEST_P(CApiCollectiveTest, ReduceToANonZeroRootWritesOnlyTheRoot) {
  constexpr int kRoot = 3;
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      Buffer send(r.client, memory(), count * sizeof(float));
      Buffer recv(r.client, memory(), count * sizeof(float));
      float* s = send.as<float>();
      float* d = recv.as<float>();
      auto mine = [&](size_t i) { return float(r.rank + 1) * float(i % 50); };
      for (size_t i = 0; i < count; ++i) {
        s[i] = mine(i);
        d[i] = -1.0f;
      }
      auto sum = [](size_t i) { return 10.0f * float(i % 50); };
      EXPECT_TRUE(
          Succeeds(baton_reduce(r.comm, s, d, count, BATON_FLOAT32, BATON_SUM, kRoot, &options)));
      if (r.rank == kRoot) {
        EXPECT_TRUE(ElementsAre(d, count, sum)) << "the root's result";
      } else {
        EXPECT_TRUE(ElementsAre(d, count, [](size_t) { return -1.0f; })) << "not the root";
      }
      EXPECT_TRUE(
          Succeeds(baton_reduce(r.comm, s, s, count, BATON_FLOAT32, BATON_SUM, kRoot, &options)));
      if (r.rank == kRoot) {
        EXPECT_TRUE(ElementsAre(s, count, sum)) << "in place";
      } else {
        EXPECT_TRUE(ElementsAre(s, count, mine)) << "in place, not the root";
      }
    }
  });
}

TEST_P(CApiCollectiveTest, AllToAllTransposesTheBlocks) {
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank << " count " << count);
      // Block j of rank r's send holds r * 10^6 + j * 10^4 + i % 10^4; block i of recv comes
      // from rank i: i * 10^6 + rank * 10^4 + ...
      Buffer send(r.client, memory(), count * kWorld * sizeof(int32_t));
      Buffer recv(r.client, memory(), count * kWorld * sizeof(int32_t));
      int32_t* s = send.as<int32_t>();
      int32_t* d = recv.as<int32_t>();
      for (size_t j = 0; j < count * kWorld; ++j) {
        s[j] = r.rank * 1000000 + int32_t(j / count) * 10000 + int32_t(j % count % 10000);
        d[j] = -1;
      }
      auto expected = [&](size_t j) {
        return int32_t(j / count) * 1000000 + r.rank * 10000 + int32_t(j % count % 10000);
      };
      EXPECT_TRUE(Succeeds(baton_all_to_all(r.comm, s, d, count, BATON_INT32, &options)));
      EXPECT_TRUE(ElementsAre(d, count * kWorld, expected)) << "out of place";
      EXPECT_TRUE(Succeeds(baton_all_to_all(r.comm, s, s, count, BATON_INT32, &options)));
      EXPECT_TRUE(ElementsAre(s, count * kWorld, expected)) << "in place";
    }
  });
}

TEST_P(CApiCollectiveTest, BarrierReturnsOnlyOnceEveryRankEntered) {
  std::atomic<int> entered{0};
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    for (int round = 1; round <= 3; ++round) {
      // The last rank to arrive is late on purpose: nobody may leave before it arrives.
      if (r.rank == (round % kWorld)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ++entered;
      EXPECT_TRUE(Succeeds(baton_barrier(r.comm, &options)));
      EXPECT_GE(entered.load(), round * kWorld) << "rank " << r.rank << " round " << round;
      // Nobody enters the next round before everyone has checked this one.
      EXPECT_TRUE(Succeeds(baton_barrier(r.comm, nullptr)));
    }
  });
  EXPECT_EQ(entered.load(), 3 * kWorld);
}

// ---- Collectives, non-blocking ---------------------------------------------------------------

TEST_P(CApiCollectiveTest, AsyncCollectivesRunInSubmissionOrderWithTheirValues) {
  constexpr int kBroadcastRoot = 1;
  constexpr int kReduceRoot = 2;
  constexpr size_t kCount = 1027;
  RunRanks([&](Rank& r) {
    const baton_call_options_t options = Options();
    // Sum then max on the same buffer, in place: in order that is max(10 x) = 10 x; the other
    // way round it would be 16 x.
    Buffer ordered(r.client, memory(), kCount * sizeof(float));
    Buffer rs_send(r.client, memory(), kCount * kWorld * sizeof(float));
    Buffer rs_recv(r.client, memory(), kCount * sizeof(float));
    Buffer ag_recv(r.client, memory(), kCount * kWorld * sizeof(int32_t));
    Buffer ag_send(r.client, memory(), kCount * sizeof(int32_t));
    Buffer bc(r.client, memory(), kCount * sizeof(int64_t));
    Buffer red(r.client, memory(), kCount * sizeof(float));
    Buffer a2a_send(r.client, memory(), kCount * kWorld * sizeof(int32_t));
    Buffer a2a_recv(r.client, memory(), kCount * kWorld * sizeof(int32_t));
    float* o = ordered.as<float>();
    for (size_t i = 0; i < kCount; ++i) o[i] = float(r.rank + 1) * float(i % 97 + 1);
    for (size_t j = 0; j < kCount * kWorld; ++j) {
      rs_send.as<float>()[j] = float(r.rank + 1) * float(j % 101 + 1);
      a2a_send.as<int32_t>()[j] =
          r.rank * 1000000 + int32_t(j / kCount) * 10000 + int32_t(j % kCount);
    }
    for (size_t i = 0; i < kCount; ++i) {
      ag_send.as<int32_t>()[i] = r.rank * 100000 + int32_t(i);
      bc.as<int64_t>()[i] = r.rank == kBroadcastRoot ? int64_t(i) * 3 - 5 : 0;
      red.as<float>()[i] = float(r.rank + 1) * float(i % 50);
    }
    std::vector<baton_request_t*> requests(9, nullptr);
    EXPECT_TRUE(Succeeds(baton_all_reduce_async(r.comm, o, o, kCount, BATON_FLOAT32, BATON_SUM,
                                                &options, &requests[0])));
    EXPECT_TRUE(Succeeds(baton_all_reduce_async(r.comm, o, o, kCount, BATON_FLOAT32, BATON_MAX,
                                                &options, &requests[1])));
    EXPECT_TRUE(Succeeds(baton_reduce_scatter_async(r.comm, rs_send.as<float>(),
                                                    rs_recv.as<float>(), kCount, BATON_FLOAT32,
                                                    BATON_SUM, &options, &requests[2])));
    EXPECT_TRUE(
        Succeeds(baton_all_gather_async(r.comm, ag_send.as<int32_t>(), ag_recv.as<int32_t>(),
                                        kCount, BATON_INT32, &options, &requests[3])));
    EXPECT_TRUE(
        Succeeds(baton_broadcast_async(r.comm, bc.as<int64_t>(), bc.as<int64_t>(), kCount,
                                       BATON_INT64, kBroadcastRoot, &options, &requests[4])));
    EXPECT_TRUE(
        Succeeds(baton_reduce_async(r.comm, red.as<float>(), red.as<float>(), kCount, BATON_FLOAT32,
                                    BATON_SUM, kReduceRoot, &options, &requests[5])));
    EXPECT_TRUE(
        Succeeds(baton_all_to_all_async(r.comm, a2a_send.as<int32_t>(), a2a_recv.as<int32_t>(),
                                        kCount, BATON_INT32, &options, &requests[6])));
    EXPECT_TRUE(Succeeds(baton_barrier_async(r.comm, &options, &requests[7])));
    EXPECT_TRUE(Succeeds(baton_barrier_async(r.comm, nullptr, &requests[8])));
    // Waited for in reverse: the last completes only after all the others.
    for (int k = int(requests.size()) - 1; k >= 0; --k) {
      ASSERT_NE(requests[k], nullptr) << k;
      int done = 0;
      EXPECT_TRUE(Succeeds(baton_request_wait(requests[k], -1, &done))) << "request " << k;
      EXPECT_EQ(done, 1) << "request " << k;
    }
    for (baton_request_t* request : requests) {
      int done = 0;
      EXPECT_TRUE(Succeeds(baton_request_wait(request, 0, &done)));
      EXPECT_EQ(done, 1);
      baton_request_free(request);
    }
    EXPECT_TRUE(ElementsAre(o, kCount, [](size_t i) { return 10.0f * float(i % 97 + 1); }))
        << "sum then max, in order";
    EXPECT_TRUE(ElementsAre(rs_recv.as<float>(), kCount, [&](size_t i) {
      return 10.0f * float((r.rank * kCount + i) % 101 + 1);
    })) << "reduce_scatter";
    EXPECT_TRUE(ElementsAre(ag_recv.as<int32_t>(), kCount * kWorld, [&](size_t j) {
      return int32_t(j / kCount) * 100000 + int32_t(j % kCount);
    })) << "all_gather";
    EXPECT_TRUE(ElementsAre(bc.as<int64_t>(), kCount, [](size_t i) { return int64_t(i) * 3 - 5; }))
        << "broadcast";
    if (r.rank == kReduceRoot) {
      EXPECT_TRUE(ElementsAre(red.as<float>(), kCount, [](size_t i) {
        return 10.0f * float(i % 50);
      })) << "reduce";
    }
    EXPECT_TRUE(ElementsAre(a2a_recv.as<int32_t>(), kCount * kWorld, [&](size_t j) {
      return int32_t(j / kCount) * 1000000 + r.rank * 10000 + int32_t(j % kCount);
    })) << "all_to_all";
  });
}

INSTANTIATE_TEST_SUITE_P(Memory, CApiCollectiveTest,
                         ::testing::Values(Memory::kMalloc, Memory::kShared),
                         [](const ::testing::TestParamInfo<Memory>& info) {
                           return info.param == Memory::kMalloc ? "Malloc" : "Allocated";
                         });

TEST(CApiCluster, RequestWaitLooksWaitsAndReportsDone) {
  std::latch submitted(1);
  RunRanks([&](Rank& r) {
    float value = float(r.rank + 1);
    if (r.rank != 0) {
      // The others join the operation only once rank 0 has seen it pending.
      submitted.wait();
      EXPECT_TRUE(
          Succeeds(baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, nullptr)));
      EXPECT_EQ(value, 10.0f);
      return;
    }
    baton_request_t* request = nullptr;
    const baton_call_options_t options = Options();
    ASSERT_TRUE(Succeeds(baton_all_reduce_async(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM,
                                                &options, &request)));
    int done = 7;
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(Fails(baton_request_wait(request, 0, &done), BATON_DEADLINE_EXCEEDED));
    EXPECT_EQ(done, 0);
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(100)) << "0 only looks";
    done = 7;
    const Clock::time_point timed = Clock::now();
    EXPECT_TRUE(Fails(baton_request_wait(request, 150, &done), BATON_DEADLINE_EXCEEDED));
    EXPECT_EQ(done, 0);
    EXPECT_GE(Clock::now() - timed, std::chrono::milliseconds(140)) << "waits its timeout";
    EXPECT_TRUE(Fails(baton_request_wait(request, 0, nullptr), BATON_DEADLINE_EXCEEDED));
    submitted.count_down();
    EXPECT_TRUE(Succeeds(baton_request_wait(request, -1, &done)));
    EXPECT_EQ(done, 1);
    EXPECT_EQ(value, 10.0f);
    // Any number of times, with or without a timeout.
    done = 7;
    EXPECT_TRUE(Succeeds(baton_request_wait(request, 0, &done)));
    EXPECT_EQ(done, 1);
    EXPECT_TRUE(Succeeds(baton_request_wait(request, 5000, nullptr)));
    baton_request_free(request);
  });
}

TEST(CApiCluster, AsyncArgumentErrorsAreReportedByTheRequest) {
  RunRanks([&](Rank& r) {
    float x = 1;
    const baton_call_options_t bad_algorithm = Options(static_cast<baton_algorithm_t>(42));
    std::vector<std::pair<const char*, baton_request_t*>> requests(5);
    requests[0].first = "dtype 99";
    EXPECT_TRUE(Succeeds(baton_all_reduce_async(r.comm, &x, &x, 1, static_cast<baton_dtype_t>(99),
                                                BATON_SUM, nullptr, &requests[0].second)));
    requests[1].first = "op -1";
    EXPECT_TRUE(Succeeds(baton_reduce_async(r.comm, &x, &x, 1, BATON_FLOAT32,
                                            static_cast<baton_reduce_op_t>(-1), 0, nullptr,
                                            &requests[1].second)));
    requests[2].first = "algorithm 42";
    EXPECT_TRUE(Succeeds(baton_barrier_async(r.comm, &bad_algorithm, &requests[2].second)));
    requests[3].first = "root 4";
    EXPECT_TRUE(Succeeds(baton_broadcast_async(r.comm, &x, &x, 1, BATON_FLOAT32, kWorld, nullptr,
                                               &requests[3].second)));
    requests[4].first = "null buffers";
    EXPECT_TRUE(Succeeds(baton_all_gather_async(r.comm, nullptr, nullptr, 4, BATON_FLOAT32, nullptr,
                                                &requests[4].second)));
    for (auto& [what, request] : requests) {
      ASSERT_NE(request, nullptr) << what;
      for (int64_t timeout : {int64_t{-1}, int64_t{0}}) {  // the same answer every time
        int done = 0;
        EXPECT_TRUE(Fails(baton_request_wait(request, timeout, &done), BATON_INVALID_ARGUMENT))
            << what;
        EXPECT_EQ(done, 1) << what;
      }
      baton_request_free(request);
    }
    // The communicator fails from the first refusal on, on every rank.
    float value = float(r.rank);
    EXPECT_TRUE(
        FailsWith(baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, nullptr),
                  BATON_ABORTED, "was refused"));
  });
}

// baton_submit is the operation every named call makes: blocking with no request, an _async call
// with one; a field the collective does not read may hold anything (here it differs between
// ranks, which a signature that included it would refuse).
TEST(CApiCluster, SubmitRunsAnOperationBlockingOrNotIgnoringFieldsItDoesNotRead) {
  RunRanks([&](Rank& r) {
    baton_op_t op;
    baton_op_init(&op);
    EXPECT_EQ(op.struct_size, sizeof(baton_op_t));
    EXPECT_EQ(op.collective, BATON_ALL_REDUCE);
    float value = float(r.rank + 1);
    op.send = &value;
    op.recv = &value;
    op.count = 1;
    op.root = 100 + r.rank;
    op.peer = -r.rank;
    op.entries = 7;
    EXPECT_TRUE(Succeeds(baton_submit(r.comm, &op, nullptr, nullptr)));
    EXPECT_EQ(value, 10.0f);  // 1 + 2 + 3 + 4

    baton_op_t gather;
    baton_op_init(&gather);
    gather.collective = BATON_ALL_GATHER;
    const float mine = float(r.rank);
    std::vector<float> all(kWorld, -1);
    gather.send = &mine;
    gather.recv = all.data();
    gather.count = 1;
    gather.op = static_cast<baton_reduce_op_t>(99);  // all_gather does not reduce
    baton_request_t* request = nullptr;
    EXPECT_TRUE(Succeeds(baton_submit(r.comm, &gather, nullptr, &request)));
    ASSERT_NE(request, nullptr);
    EXPECT_TRUE(Succeeds(baton_request_wait(request, -1, nullptr)));
    baton_request_free(request);
    EXPECT_EQ(all, (std::vector<float>{0, 1, 2, 3}));

    // Refused at once, nothing submitted.
    EXPECT_TRUE(Fails(baton_submit(r.comm, nullptr, nullptr, nullptr), BATON_INVALID_ARGUMENT));
    baton_op_t small = op;
    small.struct_size = sizeof(baton_op_t) - 1;
    EXPECT_TRUE(FailsWith(baton_submit(r.comm, &small, nullptr, nullptr), BATON_INVALID_ARGUMENT,
                          "baton_op_init"));
    baton_op_t unknown = op;
    unknown.collective = static_cast<baton_collective_t>(12);
    baton_request_t* none = nullptr;
    EXPECT_TRUE(FailsWith(baton_submit(r.comm, &unknown, nullptr, &none), BATON_INVALID_ARGUMENT,
                          "unknown collective 12"));
    EXPECT_EQ(none, nullptr);
    // The communicator is as good as before.
    value = 1;
    EXPECT_TRUE(Succeeds(baton_submit(r.comm, &op, nullptr, nullptr)));
    EXPECT_EQ(value, 4.0f);
  });
}

}  // namespace
}  // namespace baton::testing
