// libbaton's header-only C++ API (<baton/baton.hpp>) through libbaton.so, against a local cluster
// of two real daemons with two ranks on each (threads, each with its own Client): Status and
// StatusOr, every collective once with its values checked, Wait/Test on requests, Split, Explain,
// Destroy, device memory and stream-ordered calls (the daemons and this process on the host fake
// device, device/host_fake.h), and handles that move but never copy.

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "baton/baton.hpp"
#include "tests/integration/test_cluster.h"
#include "tests/testing/local_test_cluster.h"

namespace {

using baton::testing::ElementsAre;
using baton::testing::LocalTestCluster;
using baton::testing::RunRanks;
using namespace std::chrono_literals;

constexpr int kWorld = 4;  // ranks 0 and 1 on daemon 0, ranks 2 and 3 on daemon 1

// Handles are owned through unique_ptr (Client, Communicator) or shared_ptr (Request): they can
// be moved around but never copied, so no handle is freed twice.
static_assert(!std::is_copy_constructible_v<baton::Client>);
static_assert(!std::is_copy_assignable_v<baton::Client>);
static_assert(!std::is_copy_constructible_v<baton::Communicator>);
static_assert(!std::is_copy_assignable_v<baton::Communicator>);
static_assert(!std::is_copy_constructible_v<baton::Request>);
static_assert(!std::is_copy_constructible_v<baton::StatusOr<std::unique_ptr<baton::Communicator>>>);
static_assert(std::is_move_constructible_v<baton::StatusOr<std::unique_ptr<baton::Communicator>>>);
static_assert(std::is_nothrow_move_constructible_v<std::unique_ptr<baton::Communicator>>);

LocalTestCluster* cluster = nullptr;

class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("BATON_DEVICE", "fake", 1);  // before libbaton opens the process's device
    cluster = new LocalTestCluster(2, {"--chunk-bytes=4096", "--device=fake"});
  }
  void TearDown() override {
    delete cluster;
    cluster = nullptr;
  }
};
::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

// Where rank `rank` of kWorld joins.
int DaemonOf(int rank) { return rank / 2; }

// ---- Status and StatusOr --------------------------------------------------------------------

TEST(CppApi, StatusCarriesACodeAndAMessage) {
  const baton::Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), baton::StatusCode::kOk);
  EXPECT_EQ(ok.message(), "");
  EXPECT_EQ(ok.ToString(), "OK");

  const baton::Status bad(baton::StatusCode::kInvalidArgument, "count is odd");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), baton::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "count is odd");
  EXPECT_EQ(bad.ToString(), "INVALID_ARGUMENT: count is odd");
  std::ostringstream out;
  out << bad << " | " << ok;
  EXPECT_EQ(out.str(), "INVALID_ARGUMENT: count is odd | OK");

  EXPECT_EQ(baton::Status(baton::StatusCode::kOk, "dropped").message(), "") << "OK has none";
  EXPECT_TRUE(bad == baton::Status(baton::StatusCode::kInvalidArgument, "count is odd"));
  EXPECT_FALSE(bad == baton::Status(baton::StatusCode::kInvalidArgument, "other"));
  EXPECT_FALSE(bad == baton::Status(baton::StatusCode::kInternal, "count is odd"));
  EXPECT_EQ(baton::StatusCodeName(baton::StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(baton::StatusCodeName(baton::StatusCode::kUnauthenticated), "UNAUTHENTICATED");

  // FromC reads the message of the C call that just failed on this thread.
  baton_dtype_t type;
  const baton::Status parsed = baton::Status::FromC(baton_dtype_parse("float99", &type));
  EXPECT_EQ(parsed.code(), baton::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.message().find("float99"), std::string::npos) << parsed;
  EXPECT_TRUE(baton::Status::FromC(BATON_OK).ok());
}

TEST(CppApi, StatusOrHoldsAValueOrWhyNot) {
  baton::StatusOr<std::string> value(std::string("ring"));
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(value.status().ok());
  EXPECT_EQ(*value, "ring");
  EXPECT_EQ(value->size(), 4u);
  EXPECT_EQ(value.value(), "ring");

  baton::StatusOr<std::string> error(baton::Status(baton::StatusCode::kNotFound, "no such"));
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), baton::StatusCode::kNotFound);
  EXPECT_EQ(error.status().message(), "no such");

  // An OK status without a value is a bug, reported as kInternal rather than as success.
  baton::StatusOr<int> confused{baton::Status()};
  EXPECT_FALSE(confused.ok());
  EXPECT_EQ(confused.status().code(), baton::StatusCode::kInternal);

  // A move-only value moves out.
  baton::StatusOr<std::unique_ptr<int>> owned(std::make_unique<int>(7));
  std::unique_ptr<int> taken = *std::move(owned);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 7);
}

TEST(CppApi, NamesAndParsing) {
  EXPECT_EQ(baton::DataTypeName(baton::DataType::kBfloat16), "bfloat16");
  EXPECT_EQ(baton::DataTypeSize(baton::DataType::kFloat64), 8u);
  EXPECT_EQ(baton::DataTypeSize(baton::DataType::kFp8E4M3), 1u);
  EXPECT_EQ(baton::ReduceOpName(baton::ReduceOp::kAvg), "avg");
  EXPECT_EQ(baton::CollectiveName(baton::Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(baton::AlgorithmName(baton::Algorithm::kHalvingDoubling), "halving_doubling");
  EXPECT_EQ(baton::ParseDataType("uint32"), baton::DataType::kUint32);
  EXPECT_EQ(baton::ParseDataType("uint33"), std::nullopt);
  EXPECT_EQ(baton::ParseReduceOp("min"), baton::ReduceOp::kMin);
  EXPECT_EQ(baton::ParseReduceOp("median"), std::nullopt);
  EXPECT_EQ(baton::ParseCollective("all_to_all"), baton::Collective::kAllToAll);
  EXPECT_EQ(baton::ParseCollective("gather"), baton::Collective::kGather);
  EXPECT_EQ(baton::ParseCollective("all_to_all_v"), baton::Collective::kAllToAllV);
  EXPECT_EQ(baton::CollectiveName(baton::Collective::kRecv), "recv");
  EXPECT_EQ(baton::ParseCollective("gatherv"), std::nullopt);
  EXPECT_EQ(baton::ParseAlgorithm("tree"), baton::Algorithm::kTree);
  EXPECT_EQ(baton::ParseAlgorithm("auto"), std::nullopt) << "auto is no algorithm here";
  EXPECT_EQ(baton::ParseAlgorithm("butterfly"), std::nullopt);
  EXPECT_TRUE(baton::IsSupported(baton::Collective::kAllReduce, baton::Algorithm::kDoubling));
  EXPECT_FALSE(baton::IsSupported(baton::Collective::kAllToAll, baton::Algorithm::kRing));
  EXPECT_TRUE(baton::IsSupported(baton::Collective::kBarrier, baton::Algorithm::kDirect));

  const baton::CallOptions defaults;
  EXPECT_EQ(defaults.timeout, std::chrono::minutes(10));
  EXPECT_EQ(defaults.algorithm, std::nullopt);
  const baton::CallOptions five = 5000ms;  // a bare duration is a timeout
  EXPECT_EQ(five.timeout, 5000ms);
  baton::CallOptions tree;
  tree.algorithm = baton::Algorithm::kTree;
  const baton_call_options_t c = tree.ToC();
  EXPECT_EQ(c.struct_size, sizeof(baton_call_options_t));
  EXPECT_EQ(c.algorithm, BATON_ALGORITHM_TREE);
  EXPECT_EQ(c.timeout_ms, 600000);
}

TEST(CppApi, ConnectWhereNothingListensIsUnavailable) {
  const auto start = std::chrono::steady_clock::now();
  baton::StatusOr<std::unique_ptr<baton::Client>> client =
      baton::Client::Connect("/tmp/baton-cpp-api-test-nobody.sock", 300ms);
  EXPECT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), baton::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find("baton-cpp-api-test-nobody.sock"), std::string::npos)
      << client.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// ---- Against the cluster -------------------------------------------------------------------

TEST(CppApiCluster, ClientMintsIdsAndOwnsItsBuffers) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  std::unique_ptr<baton::Client> client = baton::testing::MustConnect(cluster->socket(1));
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->node_name(), cluster->daemons()[1].node_name);
  baton::StatusOr<std::string> a = client->CreateCommId();
  baton::StatusOr<std::string> b = client->CreateCommId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->substr(0, a->rfind('/')), cluster->daemons()[1].peer_address);

  baton::StatusOr<void*> memory = client->Allocate(4096);
  ASSERT_TRUE(memory.ok()) << memory.status();
  int on_stack = 0;
  const baton::Status foreign = client->Free(&on_stack);
  EXPECT_EQ(foreign.code(), baton::StatusCode::kInvalidArgument) << foreign;
  EXPECT_FALSE(foreign.message().empty());
  EXPECT_TRUE(client->Free(*memory).ok());
  EXPECT_EQ(client->Allocate(0).status().code(), baton::StatusCode::kInvalidArgument);

  // A join whose peer never comes fails at its deadline, naming the missing rank.
  baton::StatusOr<std::unique_ptr<baton::Communicator>> lonely = client->Join(*a, 2, 0, 1s);
  EXPECT_EQ(lonely.status().code(), baton::StatusCode::kDeadlineExceeded) << lonely.status();
  EXPECT_NE(lonely.status().message().find("[1]"), std::string::npos) << lonely.status();
}

TEST(CppApiCluster, EveryCollectiveComputesItsResult) {
  RunRanks(
      *cluster, kWorld, DaemonOf, [](int rank, baton::Communicator& comm, baton::Client& client) {
        EXPECT_EQ(comm.rank(), rank);
        EXPECT_EQ(comm.world_size(), kWorld);
        EXPECT_EQ(comm.daemon_count(), 2);
        const size_t n = 1001;
        const baton::CallOptions options(60s);

        // all_reduce on memory shared with the daemon: sum of (rank + 1) * (i + 1) is 10 (i + 1).
        baton::StatusOr<void*> shared = client.Allocate(n * sizeof(float));
        ASSERT_TRUE(shared.ok()) << shared.status();
        auto* f = static_cast<float*>(*shared);
        for (size_t i = 0; i < n; ++i) f[i] = float(rank + 1) * float(i + 1);
        EXPECT_TRUE(
            comm.AllReduce(f, f, n, baton::DataType::kFloat32, baton::ReduceOp::kSum, options)
                .ok());
        EXPECT_TRUE(ElementsAre(f, n, [](size_t i) { return 10.0f * float(i + 1); }));
        EXPECT_TRUE(client.Free(f).ok());

        // Shared memory from a place that is not a whole float in (the daemon refuses such
        // offsets: its kernels access elements as their type) is staged instead: the same result.
        shared = client.Allocate((n + 1) * sizeof(float));
        ASSERT_TRUE(shared.ok()) << shared.status();
        std::byte* unaligned = static_cast<std::byte*>(*shared) + 2;
        std::vector<float> values(n);
        for (size_t i = 0; i < n; ++i) values[i] = float(rank + 1) * float(i + 1);
        std::memcpy(unaligned, values.data(), n * sizeof(float));
        baton::Status unaligned_sum = comm.AllReduce(
            unaligned, unaligned, n, baton::DataType::kFloat32, baton::ReduceOp::kSum, options);
        EXPECT_TRUE(unaligned_sum.ok()) << unaligned_sum;
        std::memcpy(values.data(), unaligned, n * sizeof(float));
        EXPECT_TRUE(ElementsAre(values.data(), n, [](size_t i) { return 10.0f * float(i + 1); }));
        EXPECT_TRUE(client.Free(*shared).ok());

        // reduce_scatter: block `rank` of the max over ranks of rank * 1000 + j is 3000 + j.
        std::vector<int64_t> rs_send(n * kWorld);
        std::vector<int64_t> rs_recv(n);
        for (size_t j = 0; j < rs_send.size(); ++j) rs_send[j] = rank * 1000 + int64_t(j);
        EXPECT_TRUE(comm.ReduceScatter(rs_send.data(), rs_recv.data(), n, baton::DataType::kInt64,
                                       baton::ReduceOp::kMax, options)
                        .ok());
        EXPECT_TRUE(
            ElementsAre(rs_recv.data(), n, [&](size_t i) { return 3000 + int64_t(rank * n + i); }));

        // all_gather in rank order.
        std::vector<int32_t> ag_send(n, rank * 7);
        std::vector<int32_t> ag_recv(n * kWorld, -1);
        EXPECT_TRUE(
            comm.AllGather(ag_send.data(), ag_recv.data(), n, baton::DataType::kInt32, options)
                .ok());
        EXPECT_TRUE(
            ElementsAre(ag_recv.data(), n * kWorld, [&](size_t j) { return int32_t(j / n) * 7; }));

        // broadcast from rank 1, in place.
        std::vector<double> bc(n);
        for (size_t i = 0; i < n; ++i) bc[i] = rank == 1 ? 0.25 * double(i) : -1.0;
        EXPECT_TRUE(
            comm.Broadcast(bc.data(), bc.data(), n, baton::DataType::kFloat64, 1, options).ok());
        EXPECT_TRUE(ElementsAre(bc.data(), n, [](size_t i) { return 0.25 * double(i); }));

        // reduce to rank 2: the product of (rank + 1) is 24.
        std::vector<float> red_send(n, float(rank + 1));
        std::vector<float> red_recv(n, -1.0f);
        EXPECT_TRUE(comm.Reduce(red_send.data(), red_recv.data(), n, baton::DataType::kFloat32,
                                baton::ReduceOp::kProd, 2, options)
                        .ok());
        EXPECT_TRUE(
            ElementsAre(red_recv.data(), n, [&](size_t) { return rank == 2 ? 24.0f : -1.0f; }));

        // all_to_all: block j of rank r's send is r * 100 + j.
        std::vector<uint8_t> a2a_send(n * kWorld);
        std::vector<uint8_t> a2a_recv(n * kWorld, 255);
        for (size_t j = 0; j < a2a_send.size(); ++j) a2a_send[j] = uint8_t(rank * 10 + j / n);
        EXPECT_TRUE(
            comm.AllToAll(a2a_send.data(), a2a_recv.data(), n, baton::DataType::kUint8, options)
                .ok());
        EXPECT_TRUE(ElementsAre(a2a_recv.data(), n * kWorld,
                                [&](size_t j) { return uint8_t(j / n * 10 + rank); }));

        const baton::Status barrier = comm.Barrier(options);
        EXPECT_TRUE(barrier.ok()) << "rank " << rank << ": " << barrier;
        EXPECT_FALSE(comm.last_algorithm().empty());

        // A bad argument is a Status; the communicator fails from that call on (every rank's later
        // collectives fail naming the refusal), since the other ranks would wait for it.
        const baton::Status bad =
            comm.Broadcast(bc.data(), bc.data(), n, baton::DataType::kFloat64, kWorld, options);
        EXPECT_EQ(bad.code(), baton::StatusCode::kInvalidArgument) << bad;
        EXPECT_EQ(bad.ToString().rfind("INVALID_ARGUMENT: ", 0), 0u) << bad;
        const baton::Status later = comm.Barrier();
        EXPECT_EQ(later.code(), baton::StatusCode::kAborted) << later;
        EXPECT_NE(later.message().find("was refused"), std::string::npos) << later;
      });
}

TEST(CppApiCluster, AsyncRequestsTestAndWait) {
  std::latch seen_pending(1);
  RunRanks(*cluster, kWorld, DaemonOf, [&](int rank, baton::Communicator& comm) {
    std::vector<int32_t> data(64, rank + 1);
    if (rank != 0) {
      seen_pending.wait();  // rank 0's request cannot finish before this
    }
    std::shared_ptr<baton::Request> request = comm.AllReduceAsync(
        data.data(), data.data(), data.size(), baton::DataType::kInt32, baton::ReduceOp::kSum);
    ASSERT_NE(request, nullptr);
    if (rank == 0) {
      EXPECT_EQ(request->Test(), std::nullopt) << "pending while the others have not come";
      const baton::Status waited = request->Wait(50ms);
      EXPECT_EQ(waited.code(), baton::StatusCode::kDeadlineExceeded) << waited;
      seen_pending.count_down();
    }
    EXPECT_TRUE(request->Wait().ok());
    std::optional<baton::Status> tested = request->Test();
    ASSERT_TRUE(tested.has_value());
    EXPECT_TRUE(tested->ok()) << *tested;
    EXPECT_TRUE(ElementsAre(data.data(), data.size(), [](size_t) { return 10; }));

    // Several in flight run in order; an argument error comes back through the request, in its
    // place: the calls before it complete, the communicator fails from it on.
    std::vector<float> a(100, float(rank));
    std::vector<float> gathered(100 * kWorld);
    auto first = comm.AllReduceAsync(a.data(), a.data(), a.size(), baton::DataType::kFloat32,
                                     baton::ReduceOp::kSum);
    auto second =
        comm.AllGatherAsync(a.data(), gathered.data(), a.size(), baton::DataType::kFloat32);
    auto broken = comm.BroadcastAsync(a.data(), a.data(), a.size(), baton::DataType::kFloat32, -1);
    auto barrier = comm.BarrierAsync();
    const baton::Status after = barrier->Wait(30s);
    EXPECT_EQ(after.code(), baton::StatusCode::kAborted) << "rank " << rank << ": " << after;
    EXPECT_NE(after.message().find("was refused"), std::string::npos) << after;
    const baton::Status first_status = first->Wait();
    EXPECT_TRUE(first_status.ok()) << "rank " << rank << ": " << first_status;
    const baton::Status second_status = second->Wait();
    EXPECT_TRUE(second_status.ok()) << "rank " << rank << ": " << second_status;
    const baton::Status refused = broken->Wait();
    EXPECT_EQ(refused.code(), baton::StatusCode::kInvalidArgument) << refused;
    EXPECT_TRUE(ElementsAre(gathered.data(), gathered.size(), [](size_t) { return 6.0f; }))
        << "the gather ran after the sum";
  });
}

TEST(CppApiCluster, AsyncFormsOfTheOtherCollectives) {
  RunRanks(*cluster, kWorld, DaemonOf, [](int rank, baton::Communicator& comm) {
    const size_t n = 33;
    std::vector<int64_t> rs_send(n * kWorld, rank + 1);
    std::vector<int64_t> rs_recv(n, -1);
    std::vector<int64_t> bc(n, rank == 3 ? 42 : 0);
    std::vector<int64_t> red(n, rank);
    std::vector<int64_t> a2a_send(n * kWorld);
    std::vector<int64_t> a2a_recv(n * kWorld, -1);
    for (size_t j = 0; j < a2a_send.size(); ++j) a2a_send[j] = rank * 10 + int64_t(j / n);
    std::vector<std::shared_ptr<baton::Request>> requests = {
        comm.ReduceScatterAsync(rs_send.data(), rs_recv.data(), n, baton::DataType::kInt64,
                                baton::ReduceOp::kSum),
        comm.BroadcastAsync(bc.data(), bc.data(), n, baton::DataType::kInt64, 3),
        comm.ReduceAsync(red.data(), red.data(), n, baton::DataType::kInt64, baton::ReduceOp::kMax,
                         0),
        comm.AllToAllAsync(a2a_send.data(), a2a_recv.data(), n, baton::DataType::kInt64)};
    for (const auto& request : requests) {
      ASSERT_NE(request, nullptr);
      EXPECT_TRUE(request->Wait(60s).ok());
    }
    EXPECT_TRUE(ElementsAre(rs_recv.data(), n, [](size_t) { return 10; }));
    EXPECT_TRUE(ElementsAre(bc.data(), n, [](size_t) { return 42; }));
    if (rank == 0) {
      EXPECT_TRUE(ElementsAre(red.data(), n, [](size_t) { return 3; }));
    }
    EXPECT_TRUE(ElementsAre(a2a_recv.data(), a2a_recv.size(),
                            [&](size_t j) { return int64_t(j / n) * 10 + rank; }));
  });
}

TEST(CppApiCluster, SplitExplainAndForcedAlgorithms) {
  RunRanks(*cluster, kWorld, DaemonOf, [](int rank, baton::Communicator& comm) {
    // Colour rank / 2 puts each pair on one daemon; key 10 - rank reverses them.
    baton::StatusOr<std::unique_ptr<baton::Communicator>> pair = comm.Split(rank / 2, 10 - rank);
    ASSERT_TRUE(pair.ok()) << pair.status();
    ASSERT_NE(*pair, nullptr);
    std::unique_ptr<baton::Communicator> mine = *std::move(pair);  // move-only handle
    EXPECT_EQ(mine->world_size(), 2);
    EXPECT_EQ(mine->rank(), 1 - rank % 2);
    EXPECT_EQ(mine->daemon_count(), 1);
    int32_t value = rank;
    EXPECT_TRUE(
        mine->AllReduce(&value, &value, 1, baton::DataType::kInt32, baton::ReduceOp::kSum).ok());
    EXPECT_EQ(value, rank / 2 == 0 ? 0 + 1 : 2 + 3);
    EXPECT_EQ(mine->last_algorithm(), "arena");  // one node: its ranks meet without the daemon
    baton::StatusOr<std::vector<baton::AlgorithmEstimate>> none =
        mine->Explain(baton::Collective::kAllReduce, 1024, baton::DataType::kFloat32);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE(none->empty()) << "one daemon has nothing to choose";

    baton::StatusOr<std::unique_ptr<baton::Communicator>> nobody = comm.Split(-1, 0);
    ASSERT_TRUE(nobody.ok()) << nobody.status();
    EXPECT_EQ(*nobody, nullptr);

    baton::StatusOr<std::vector<baton::AlgorithmEstimate>> estimates =
        comm.Explain(baton::Collective::kAllReduce, 4096, baton::DataType::kFloat32);
    ASSERT_TRUE(estimates.ok()) << estimates.status();
    ASSERT_EQ(estimates->size(), 4u);
    std::set<baton::Algorithm> algorithms;
    for (const baton::AlgorithmEstimate& e : *estimates) {
      algorithms.insert(e.algorithm);
      EXPECT_GT(e.predicted.count(), 0);
      EXPECT_GE(e.measured_samples, 0);
      if (e.measured) {
        EXPECT_GT(e.measured->count(), 0);
      }
    }
    EXPECT_EQ(algorithms.size(), 4u);
    EXPECT_EQ(algorithms.count(baton::Algorithm::kDirect), 0u);
    const baton::StatusOr<std::vector<baton::AlgorithmEstimate>> bad =
        comm.Explain(static_cast<baton::Collective>(99), 1, baton::DataType::kFloat32);
    EXPECT_EQ(bad.status().code(), baton::StatusCode::kInvalidArgument);

    for (baton::Algorithm algorithm : {baton::Algorithm::kTree, baton::Algorithm::kDoubling}) {
      baton::CallOptions options(30s);
      options.algorithm = algorithm;
      std::vector<float> data(300, 1.5f);
      EXPECT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), baton::DataType::kFloat32,
                                 baton::ReduceOp::kSum, options)
                      .ok());
      EXPECT_TRUE(ElementsAre(data.data(), data.size(), [](size_t) { return 6.0f; }));
      EXPECT_EQ(comm.last_algorithm(), baton::AlgorithmName(algorithm));
    }
    baton::CallOptions ring;
    ring.algorithm = baton::Algorithm::kRing;
    const baton::Status refused = comm.Barrier(ring);
    EXPECT_EQ(refused.code(), baton::StatusCode::kInvalidArgument) << refused;
  });
}

TEST(CppApiCluster, DestroyThenEveryOperationFails) {
  RunRanks(*cluster, kWorld, DaemonOf, [](int rank, baton::Communicator& comm) {
    float x = 1;
    EXPECT_TRUE(comm.AllReduce(&x, &x, 1, baton::DataType::kFloat32, baton::ReduceOp::kSum).ok());
    EXPECT_EQ(x, 4.0f);
    EXPECT_TRUE(comm.Destroy().ok());
    EXPECT_TRUE(comm.Destroy().ok()) << "idempotent";
    const baton::Status after =
        comm.AllReduce(&x, &x, 1, baton::DataType::kFloat32, baton::ReduceOp::kSum);
    EXPECT_EQ(after.code(), baton::StatusCode::kFailedPrecondition) << after;
    std::ostringstream printed;
    printed << after;
    EXPECT_EQ(printed.str(), "FAILED_PRECONDITION: " + after.message());
    EXPECT_FALSE(after.message().empty());
    std::shared_ptr<baton::Request> late = comm.BarrierAsync();
    ASSERT_NE(late, nullptr);
    EXPECT_EQ(late->Wait().code(), baton::StatusCode::kFailedPrecondition);
    EXPECT_EQ(x, 4.0f) << "a failed call leaves the buffer alone";
  });
}

// Device memory through the C++ API: AllocateDevice, a blocking all-reduce on it, then one
// stream-ordered on the default stream by rank 0 (it returns at once; its result lands when the
// stream reaches it: the fake's default stream is a thread, so the test polls the host-visible
// "device" memory) while the other ranks, threads of the same process, are refused that stream
// (a rank of the same communicator has a call pending on it) and take part blocking; AsyncError,
// RegisterDevice/DeregisterDevice refusals, and FreeDevice.
TEST(CppApiCluster, DeviceMemoryAndStreamOrderedCalls) {
  std::latch rank0_queued(1);
  RunRanks(
      *cluster, kWorld, DaemonOf, [&](int rank, baton::Communicator& comm, baton::Client& client) {
        constexpr size_t kCount = 1000;
        baton::StatusOr<void*> memory = client.AllocateDevice(kCount * sizeof(float), 0);
        ASSERT_TRUE(memory.ok()) << memory.status();
        auto* data = static_cast<float*>(*memory);
        for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank + i);
        ASSERT_TRUE(
            comm.AllReduce(data, data, kCount, baton::DataType::kFloat32, baton::ReduceOp::kSum)
                .ok());
        for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(data[i], static_cast<float>(6 + 4 * i)) << i;

        auto expected = [](size_t i) { return static_cast<float>(4 * (6 + 4 * i)); };
        if (rank == 0) {
          const baton::Status queued =
              comm.AllReduce(data, data, kCount, baton::DataType::kFloat32, baton::ReduceOp::kSum,
                             baton::CallOptions::OnStream(nullptr));
          rank0_queued.count_down();
          ASSERT_TRUE(queued.ok()) << queued;
          const auto deadline = std::chrono::steady_clock::now() + 30s;
          while (data[kCount - 1] != expected(kCount - 1) &&
                 std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(1ms);
          }
        } else {
          rank0_queued.wait();
          const baton::Status shared =
              comm.AllReduce(data, data, kCount, baton::DataType::kFloat32, baton::ReduceOp::kSum,
                             baton::CallOptions::OnStream(nullptr));
          EXPECT_EQ(shared.code(), baton::StatusCode::kInvalidArgument) << shared;
          EXPECT_NE(shared.message().find("its own stream"), std::string::npos) << shared;
          ASSERT_TRUE(
              comm.AllReduce(data, data, kCount, baton::DataType::kFloat32, baton::ReduceOp::kSum)
                  .ok());
        }
        for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(data[i], expected(i)) << i;
        EXPECT_TRUE(comm.AsyncError().ok()) << comm.AsyncError();

        // Host memory cannot be stream-ordered; the refusal is the call's own error.
        float host = 1;
        const baton::Status on_host =
            comm.AllReduce(&host, &host, 1, baton::DataType::kFloat32, baton::ReduceOp::kSum,
                           baton::CallOptions::OnStream(nullptr));
        EXPECT_EQ(on_host.code(), baton::StatusCode::kInvalidArgument) << on_host;
        EXPECT_EQ(client.DeregisterDevice(data).code(), baton::StatusCode::kInvalidArgument)
            << "memory from AllocateDevice is released by FreeDevice";
        EXPECT_NE(client.RegisterDevice(&host, sizeof host).code(), baton::StatusCode::kOk);
        EXPECT_TRUE(client.FreeDevice(data).ok());
        EXPECT_EQ(client.FreeDevice(data).code(), baton::StatusCode::kInvalidArgument);
      });
}

}  // namespace
