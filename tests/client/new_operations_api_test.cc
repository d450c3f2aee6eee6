// The C and C++ APIs of gather, scatter, all_to_all_v, send/recv, groups and abort through
// libbaton.so, against a local cluster of two daemons with two ranks on each: every argument the
// client checks before submitting (roots, peers, null buffers, arrays of the wrong length,
// overflowing counts, overlapping blocks), that a group queues its calls until group_end, and that
// an abort fails this rank's queued operations and every rank's next one with its reason. The
// values these operations move are checked through the daemons in
// tests/integration/new_operations_test.cc.

#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.h"
#include "baton/baton.hpp"
#include "tests/client/c_api_test_support.h"

namespace baton::testing {
namespace {

::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

TEST(NewOperationsApi, NullCommunicatorsAndRequestsAreInvalidArguments) {
  float x = 0;
  size_t counts[1] = {1};
  baton_request_t* request = nullptr;
  EXPECT_TRUE(
      Fails(baton_gather(nullptr, &x, &x, 1, BATON_FLOAT32, 0, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(
      Fails(baton_scatter(nullptr, &x, &x, 1, BATON_FLOAT32, 0, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_all_to_all_v(nullptr, &x, counts, counts, &x, counts, counts, 1,
                                       BATON_FLOAT32, nullptr),
                    BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_send(nullptr, &x, 1, BATON_FLOAT32, 0, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_recv(nullptr, &x, 1, BATON_FLOAT32, 0, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_send_async(nullptr, &x, 1, BATON_FLOAT32, 0, nullptr, &request),
                    BATON_INVALID_ARGUMENT));
  EXPECT_EQ(request, nullptr);
  EXPECT_TRUE(Fails(baton_comm_abort(nullptr, "why"), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(FailsWith(baton_group_end(), BATON_FAILED_PRECONDITION,
                        "without a matching baton_group_start"));
}

TEST(NewOperationsApi, RootsAndPeersOutOfRangeAreRefused) {
  RunRanks([&](Rank& r) {
    float x[kWorld] = {};
    for (int bad : {-1, kWorld}) {
      const std::string root = "root " + std::to_string(bad) + " is out of range for world size 4";
      const std::string peer = "peer " + std::to_string(bad) + " is out of range for world size 4";
      EXPECT_TRUE(FailsWith(baton_gather(r.comm, x, x, 1, BATON_FLOAT32, bad, nullptr),
                            BATON_INVALID_ARGUMENT, root));
      EXPECT_TRUE(FailsWith(baton_scatter(r.comm, x, x, 1, BATON_FLOAT32, bad, nullptr),
                            BATON_INVALID_ARGUMENT, root));
      EXPECT_TRUE(FailsWith(baton_send(r.comm, x, 1, BATON_FLOAT32, bad, nullptr),
                            BATON_INVALID_ARGUMENT, peer));
      EXPECT_TRUE(FailsWith(baton_recv(r.comm, x, 1, BATON_FLOAT32, bad, nullptr),
                            BATON_INVALID_ARGUMENT, peer));
      // The non-blocking forms report it through their request.
      baton_request_t* request = nullptr;
      ASSERT_TRUE(Succeeds(baton_recv_async(r.comm, x, 1, BATON_FLOAT32, bad, nullptr, &request)));
      int done = 0;
      EXPECT_TRUE(FailsWith(baton_request_wait(request, -1, &done), BATON_INVALID_ARGUMENT, peer));
      EXPECT_EQ(done, 1);
      baton_request_free(request);
      ASSERT_TRUE(
          Succeeds(baton_gather_async(r.comm, x, x, 1, BATON_FLOAT32, bad, nullptr, &request)));
      EXPECT_TRUE(FailsWith(baton_request_wait(request, 0, &done), BATON_INVALID_ARGUMENT, root));
      baton_request_free(request);
    }
    // An unknown data type, as for every collective.
    EXPECT_TRUE(FailsWith(
        baton_send(r.comm, x, 1, static_cast<baton_dtype_t>(99), (r.rank + 1) % kWorld, nullptr),
        BATON_INVALID_ARGUMENT, "unknown data type 99"));
    // A refused send or recv fails alone; the refused gather failed the communicator from there
    // on, on every rank.
    float value = float(r.rank);
    EXPECT_TRUE(
        FailsWith(baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, nullptr),
                  BATON_ABORTED, "gather was refused"));
  });
}

TEST(NewOperationsApi, NullBuffersAreRefusedWhereTheyWouldBeRead) {
  RunRanks([&](Rank& r) {
    float x[kWorld] = {};
    const int peer = (r.rank + 1) % kWorld;
    EXPECT_TRUE(FailsWith(baton_send(r.comm, nullptr, 4, BATON_FLOAT32, peer, nullptr),
                          BATON_INVALID_ARGUMENT, "send is null but send reads 16 bytes"));
    EXPECT_TRUE(FailsWith(baton_recv(r.comm, nullptr, 2, BATON_INT64, peer, nullptr),
                          BATON_INVALID_ARGUMENT, "recv is null but recv writes 16 bytes"));
    // Every rank's send is read by a gather; the root's recv (world * count elements) written.
    EXPECT_TRUE(FailsWith(baton_gather(r.comm, nullptr, x, 1, BATON_FLOAT32, 1, nullptr),
                          BATON_INVALID_ARGUMENT, "send is null"));
    if (r.rank == 1) {
      EXPECT_TRUE(FailsWith(baton_gather(r.comm, x, nullptr, 1, BATON_FLOAT32, 1, nullptr),
                            BATON_INVALID_ARGUMENT, "recv is null but gather writes 16 bytes"));
      EXPECT_TRUE(FailsWith(baton_scatter(r.comm, nullptr, x, 1, BATON_FLOAT32, 1, nullptr),
                            BATON_INVALID_ARGUMENT, "send is null but scatter reads 16 bytes"));
    }
    EXPECT_TRUE(FailsWith(baton_scatter(r.comm, x, nullptr, 1, BATON_FLOAT32, 1, nullptr),
                          BATON_INVALID_ARGUMENT, "recv is null"));
  });
}

TEST(NewOperationsApi, AllToAllVChecksItsArraysBeforeSubmitting) {
  RunRanks([&](Rank& r) {
    std::vector<float> send(64), recv(64);
    std::vector<size_t> counts(kWorld, 2), displs = {0, 2, 4, 6};
    auto call = [&](const std::vector<size_t>& sc, const std::vector<size_t>& sd,
                    const std::vector<size_t>& rc, const std::vector<size_t>& rd, size_t entries,
                    const void* s = nullptr, void* d = nullptr) {
      return baton_all_to_all_v(r.comm, s != nullptr ? s : send.data(), sc.data(), sd.data(),
                                d != nullptr ? d : recv.data(), rc.data(), rd.data(), entries,
                                BATON_FLOAT32, nullptr);
    };
    // Arrays of another length than the world size.
    EXPECT_TRUE(FailsWith(call(counts, displs, counts, displs, 3), BATON_INVALID_ARGUMENT,
                          "need one per rank (world size 4)"));
    EXPECT_TRUE(
        FailsWith(call(counts, displs, counts, displs, 5), BATON_INVALID_ARGUMENT, "world size 4"));
    // Null arrays.
    EXPECT_TRUE(
        FailsWith(baton_all_to_all_v(r.comm, send.data(), counts.data(), nullptr, recv.data(),
                                     counts.data(), displs.data(), kWorld, BATON_FLOAT32, nullptr),
                  BATON_INVALID_ARGUMENT, "must not be null"));
    // A displacement plus its count that overflows.
    std::vector<size_t> huge = displs;
    huge[2] = SIZE_MAX - 1;
    EXPECT_TRUE(FailsWith(call(counts, huge, counts, displs, kWorld), BATON_INVALID_ARGUMENT,
                          "send_displs[2] + send_counts[2] overflows"));
    EXPECT_TRUE(FailsWith(call(counts, displs, counts, huge, kWorld), BATON_INVALID_ARGUMENT,
                          "recv_displs[2] + recv_counts[2] overflows"));
    // A span whose bytes overflow.
    std::vector<size_t> big = counts;
    big[3] = SIZE_MAX / 2;
    EXPECT_TRUE(
        FailsWith(call(big, displs, counts, displs, kWorld), BATON_INVALID_ARGUMENT, "overflows"));
    // Receive blocks that overlap (ranks 1 and 2 both land at element 2).
    std::vector<size_t> overlapping = {0, 2, 3, 6};
    EXPECT_TRUE(FailsWith(call(counts, displs, counts, overlapping, kWorld), BATON_INVALID_ARGUMENT,
                          "recv blocks of ranks 1 and 2 overlap"));
    // A null buffer with a block in it; a null one with none is fine to pass the checks.
    EXPECT_TRUE(
        FailsWith(baton_all_to_all_v(r.comm, nullptr, counts.data(), displs.data(), recv.data(),
                                     counts.data(), displs.data(), kWorld, BATON_FLOAT32, nullptr),
                  BATON_INVALID_ARGUMENT, "send is null"));
    // The async form reports the same through its request.
    baton_request_t* request = nullptr;
    ASSERT_TRUE(Succeeds(baton_all_to_all_v_async(r.comm, send.data(), counts.data(), displs.data(),
                                                  recv.data(), counts.data(), displs.data(), 2,
                                                  BATON_FLOAT32, nullptr, &request)));
    EXPECT_TRUE(FailsWith(baton_request_wait(request, -1, nullptr), BATON_INVALID_ARGUMENT,
                          "world size 4"));
    baton_request_free(request);
  });
}

TEST(NewOperationsApi, CppCallsCheckTheirArgumentsToo) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  const std::string id = NewCommId(0);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      StatusOr<std::unique_ptr<Client>> client = Client::Connect(cluster->socket(rank / 2));
      ASSERT_TRUE(client.ok()) << client.status();
      StatusOr<std::unique_ptr<Communicator>> comm =
          (*client)->Join(id, kWorld, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      Communicator& c = **comm;
      float x[8] = {};
      EXPECT_EQ(c.Send(x, 1, DataType::kFloat32, kWorld).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(c.Recv(x, 1, DataType::kFloat32, -1).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(c.Gather(x, x, 1, DataType::kFloat32, 7).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(c.Scatter(x, x, 1, DataType::kFloat32, -2).code(), StatusCode::kInvalidArgument);
      const std::vector<size_t> ok(kWorld, 1), displs = {0, 1, 2, 3}, short_one(kWorld - 1, 1);
      Status mismatched = c.AllToAllV(x, ok, displs, x + 4, short_one, displs, DataType::kFloat32);
      EXPECT_EQ(mismatched.code(), StatusCode::kInvalidArgument) << mismatched;
      EXPECT_NE(mismatched.message().find("each needs one per rank"), std::string::npos)
          << mismatched;
      std::shared_ptr<Request> async =
          c.AllToAllVAsync(x, ok, displs, x + 4, ok, short_one, DataType::kFloat32);
      EXPECT_EQ(async->Wait().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(c.SendAsync(x, 1, DataType::kFloat32, 4)->Wait().code(),
                StatusCode::kInvalidArgument);
      // The sends and receives were refused alone; the refused gather failed the communicator
      // from there on, on every rank.
      const Status later = c.Barrier();
      EXPECT_EQ(later.code(), StatusCode::kAborted) << later;
      EXPECT_NE(later.message().find("gather was refused"), std::string::npos) << later;
      EXPECT_TRUE(c.Destroy().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NewOperationsApi, AGroupQueuesItsCallsUntilGroupEnd) {
  RunRanks([&](Rank& r) {
    // Nesting: only the outermost end acts, and an empty group is fine.
    ASSERT_TRUE(Succeeds(baton_group_start()));
    ASSERT_TRUE(Succeeds(baton_group_start()));
    EXPECT_TRUE(Succeeds(baton_group_end()));
    EXPECT_TRUE(Succeeds(baton_group_end()));

    float value = float(r.rank + 1);
    float sum = -1;
    float max = -1;
    baton_request_t* request = nullptr;
    ASSERT_TRUE(Succeeds(baton_group_start()));
    EXPECT_TRUE(
        Succeeds(baton_all_reduce(r.comm, &value, &sum, 1, BATON_FLOAT32, BATON_SUM, nullptr)));
    EXPECT_EQ(sum, -1.0f) << "a blocking call in a group must not run before group_end";
    ASSERT_TRUE(Succeeds(baton_all_reduce_async(r.comm, &value, &max, 1, BATON_FLOAT32, BATON_MAX,
                                                nullptr, &request)));
    int done = 1;
    EXPECT_TRUE(FailsWith(baton_request_wait(request, -1, &done), BATON_FAILED_PRECONDITION,
                          "group that has not ended"));
    EXPECT_EQ(done, 0);
    EXPECT_TRUE(FailsWith(baton_request_wait(request, 0, &done), BATON_FAILED_PRECONDITION,
                          "group that has not ended"));
    // Split is a collective of its own: not inside a group.
    baton_comm_t* split = nullptr;
    EXPECT_TRUE(FailsWith(baton_comm_split(r.comm, 0, 0, 1000, &split), BATON_FAILED_PRECONDITION,
                          "inside a group"));
    // An argument error returns at once, and group_end reports it after running the rest.
    EXPECT_TRUE(FailsWith(baton_send(r.comm, &value, 1, BATON_FLOAT32, 9, nullptr),
                          BATON_INVALID_ARGUMENT, "peer 9"));
    EXPECT_TRUE(FailsWith(baton_group_end(), BATON_INVALID_ARGUMENT, "peer 9"));
    EXPECT_EQ(sum, 10.0f);
    EXPECT_TRUE(Succeeds(baton_request_wait(request, -1, &done)));
    EXPECT_EQ(done, 1);
    EXPECT_EQ(max, 4.0f);
    baton_request_free(request);

    // The C++ RAII group.
    sum = -1;
    {
      baton::Group group;
      baton_all_reduce(r.comm, &value, &sum, 1, BATON_FLOAT32, BATON_SUM, nullptr);
      EXPECT_EQ(sum, -1.0f);
      EXPECT_TRUE(group.End().ok());
      EXPECT_TRUE(group.End().ok());  // once
    }
    EXPECT_EQ(sum, 10.0f);
  });
}

TEST(NewOperationsApi, AbortFailsQueuedAndLaterOperationsOnEveryRankWithTheReason) {
  std::latch aborted(1);
  RunRanks([&](Rank& r) {
    const std::string reason = "the trainer saw a NaN";
    float value = 1;
    if (r.rank == 0) {
      // A barrier the others never enter, and an all-reduce queued behind it.
      baton_request_t* barrier = nullptr;
      baton_request_t* queued = nullptr;
      ASSERT_TRUE(Succeeds(baton_barrier_async(r.comm, nullptr, &barrier)));
      ASSERT_TRUE(Succeeds(baton_all_reduce_async(r.comm, &value, &value, 1, BATON_FLOAT32,
                                                  BATON_SUM, nullptr, &queued)));
      const Clock::time_point start = Clock::now();
      EXPECT_TRUE(Succeeds(baton_comm_abort(r.comm, reason.c_str())));
      aborted.count_down();
      for (baton_request_t* request : {queued, barrier}) {
        EXPECT_TRUE(FailsWith(baton_request_wait(request, 20000, nullptr), BATON_ABORTED, reason));
        baton_request_free(request);
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_LT(seconds, 5.0) << "the aborting rank's operations took " << seconds << " s to fail";
      EXPECT_TRUE(Succeeds(baton_comm_abort(r.comm, "again")));  // idempotent
    } else {
      // The others' next operation fails with rank 0's reason.
      aborted.wait();
      const baton_call_options_t options = Options(BATON_ALGORITHM_AUTO, 20000);
      const Clock::time_point start = Clock::now();
      const baton_code_t code =
          baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, &options);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_TRUE(FailsWith(code, BATON_ABORTED, reason));
      EXPECT_LT(seconds, 5.0) << "rank " << r.rank << "'s operation took " << seconds
                              << " s to fail";
      EXPECT_TRUE(FailsWith(code, BATON_ABORTED, "aborted by rank 0"));
    }
    // And every later one, on every rank.
    EXPECT_TRUE(
        FailsWith(baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, nullptr),
                  BATON_ABORTED, reason));
  });
}

}  // namespace
}  // namespace baton::testing
