// libbaton's C API (<baton/baton.h>) through libbaton.so, against a local cluster of two real
// daemons with two ranks on each (threads, each with its own client): the names, versions and
// defaults, clients, ids and buffers, forced and explained algorithms, split, leave, and the
// error paths the header promises (the collectives' values are checked in
// c_api_collectives_test.cc).

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <latch>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.h"
#include "tests/client/c_api_test_support.h"

namespace baton::testing {
namespace {

::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

// ---- Without daemons: names, versions, defaults, argument checks -------------------------

TEST(CApi, VersionIsTheHeadersVersion) {
  EXPECT_STREQ(baton_version(), BATON_VERSION_STRING);
  char expected[64];
  std::snprintf(expected, sizeof expected, "%d.%d.%d", BATON_VERSION_MAJOR, BATON_VERSION_MINOR,
                BATON_VERSION_PATCH);
  EXPECT_STREQ(baton_version(), expected);
}

TEST(CApi, CodeNamesCoverEveryCode) {
  const char* const kNames[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  static_assert(BATON_UNAUTHENTICATED == 16);
  for (int code = BATON_OK; code <= BATON_UNAUTHENTICATED; ++code) {
    EXPECT_STREQ(baton_code_name(static_cast<baton_code_t>(code)), kNames[code]) << code;
  }
  EXPECT_STREQ(baton_code_name(static_cast<baton_code_t>(17)), "UNKNOWN_CODE");
  EXPECT_STREQ(baton_code_name(static_cast<baton_code_t>(-1)), "UNKNOWN_CODE");
}

TEST(CApi, DataTypesHaveNamesSizesAndParse) {
  struct Expected {
    baton_dtype_t type;
    const char* name;
    size_t size;
  };
  const Expected kTypes[] = {{BATON_INT8, "int8", 1},         {BATON_UINT8, "uint8", 1},
                             {BATON_INT32, "int32", 4},       {BATON_UINT32, "uint32", 4},
                             {BATON_INT64, "int64", 8},       {BATON_UINT64, "uint64", 8},
                             {BATON_FLOAT16, "float16", 2},   {BATON_BFLOAT16, "bfloat16", 2},
                             {BATON_FLOAT32, "float32", 4},   {BATON_FLOAT64, "float64", 8},
                             {BATON_FP8_E4M3, "fp8_e4m3", 1}, {BATON_FP8_E5M2, "fp8_e5m2", 1}};
  for (const Expected& e : kTypes) {
    EXPECT_STREQ(baton_dtype_name(e.type), e.name);
    EXPECT_EQ(baton_dtype_size(e.type), e.size) << e.name;
    baton_dtype_t parsed = static_cast<baton_dtype_t>(-7);
    EXPECT_TRUE(Succeeds(baton_dtype_parse(e.name, &parsed))) << e.name;
    EXPECT_EQ(parsed, e.type) << e.name;
  }
  for (int bad : {99, 12, -1}) {
    EXPECT_STREQ(baton_dtype_name(static_cast<baton_dtype_t>(bad)), "unknown") << bad;
    EXPECT_EQ(baton_dtype_size(static_cast<baton_dtype_t>(bad)), 0u) << bad;
  }
  baton_dtype_t unchanged = BATON_UINT64;
  EXPECT_TRUE(Fails(baton_dtype_parse("float33", &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_NE(std::string(baton_last_error()).find("float33"), std::string::npos)
      << baton_last_error();
  EXPECT_EQ(unchanged, BATON_UINT64);
  EXPECT_TRUE(Fails(baton_dtype_parse("", &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_dtype_parse(nullptr, &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_dtype_parse("int8", nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(unchanged, BATON_UINT64);
}

TEST(CApi, ReduceOpsHaveNamesAndParse) {
  const std::pair<baton_reduce_op_t, const char*> kOps[] = {{BATON_SUM, "sum"},
                                                            {BATON_PROD, "prod"},
                                                            {BATON_MIN, "min"},
                                                            {BATON_MAX, "max"},
                                                            {BATON_AVG, "avg"}};
  for (const auto& [op, name] : kOps) {
    EXPECT_STREQ(baton_reduce_op_name(op), name);
    baton_reduce_op_t parsed = static_cast<baton_reduce_op_t>(-7);
    EXPECT_TRUE(Succeeds(baton_reduce_op_parse(name, &parsed))) << name;
    EXPECT_EQ(parsed, op) << name;
  }
  EXPECT_STREQ(baton_reduce_op_name(static_cast<baton_reduce_op_t>(-1)), "unknown");
  EXPECT_STREQ(baton_reduce_op_name(static_cast<baton_reduce_op_t>(5)), "unknown");
  baton_reduce_op_t unchanged = BATON_MAX;
  EXPECT_TRUE(Fails(baton_reduce_op_parse("mean", &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_reduce_op_parse(nullptr, &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_reduce_op_parse("sum", nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(unchanged, BATON_MAX);
}

TEST(CApi, CollectivesHaveNamesAndParse) {
  const std::pair<baton_collective_t, const char*> kCollectives[] = {
      {BATON_ALL_REDUCE, "all_reduce"},
      {BATON_REDUCE_SCATTER, "reduce_scatter"},
      {BATON_ALL_GATHER, "all_gather"},
      {BATON_BROADCAST, "broadcast"},
      {BATON_REDUCE, "reduce"},
      {BATON_ALL_TO_ALL, "all_to_all"},
      {BATON_BARRIER, "barrier"},
      {BATON_GATHER, "gather"},
      {BATON_SCATTER, "scatter"},
      {BATON_ALL_TO_ALL_V, "all_to_all_v"},
      {BATON_SEND, "send"},
      {BATON_RECV, "recv"}};
  for (const auto& [collective, name] : kCollectives) {
    EXPECT_STREQ(baton_collective_name(collective), name);
    baton_collective_t parsed = static_cast<baton_collective_t>(-7);
    EXPECT_TRUE(Succeeds(baton_collective_parse(name, &parsed))) << name;
    EXPECT_EQ(parsed, collective) << name;
  }
  EXPECT_STREQ(baton_collective_name(static_cast<baton_collective_t>(12)), "unknown");
  EXPECT_STREQ(baton_collective_name(static_cast<baton_collective_t>(-1)), "unknown");
  baton_collective_t unchanged = BATON_BARRIER;
  EXPECT_TRUE(Fails(baton_collective_parse("allreduce", &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_collective_parse(nullptr, &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_collective_parse("barrier", nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(unchanged, BATON_BARRIER);
}

TEST(CApi, AlgorithmsHaveNamesParseAndImplementTheirCollectives) {
  const std::pair<baton_algorithm_t, const char*> kAlgorithms[] = {
      {BATON_ALGORITHM_AUTO, "auto"},
      {BATON_ALGORITHM_RING, "ring"},
      {BATON_ALGORITHM_TREE, "tree"},
      {BATON_ALGORITHM_DIRECT, "direct"},
      {BATON_ALGORITHM_DOUBLING, "doubling"},
      {BATON_ALGORITHM_HALVING_DOUBLING, "halving_doubling"}};
  for (const auto& [algorithm, name] : kAlgorithms) {
    EXPECT_STREQ(baton_algorithm_name(algorithm), name);
    baton_algorithm_t parsed = static_cast<baton_algorithm_t>(-7);
    EXPECT_TRUE(Succeeds(baton_algorithm_parse(name, &parsed))) << name;
    EXPECT_EQ(parsed, algorithm) << name;
  }
  EXPECT_STREQ(baton_algorithm_name(static_cast<baton_algorithm_t>(42)), "unknown");
  EXPECT_STREQ(baton_algorithm_name(static_cast<baton_algorithm_t>(-1)), "unknown");
  baton_algorithm_t unchanged = BATON_ALGORITHM_TREE;
  EXPECT_TRUE(Fails(baton_algorithm_parse("butterfly", &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_algorithm_parse(nullptr, &unchanged), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_algorithm_parse("ring", nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(unchanged, BATON_ALGORITHM_TREE);

  // The table of collective/algorithm.h: rows all_reduce .. barrier, columns auto .. h-d.
  const int kSupports[7][6] = {
      {1, 1, 1, 0, 1, 1},  // all_reduce: ring, tree, doubling, halving_doubling
      {1, 1, 0, 0, 0, 0},  // reduce_scatter: ring
      {1, 1, 0, 0, 0, 0},  // all_gather: ring
      {1, 1, 0, 0, 0, 0},  // broadcast: ring (chain)
      {1, 1, 0, 0, 0, 0},  // reduce: ring (chain)
      {1, 0, 0, 1, 0, 0},  // all_to_all: direct
      {1, 0, 0, 1, 0, 0},  // barrier: direct (dissemination)
  };
  for (int c = BATON_ALL_REDUCE; c <= BATON_BARRIER; ++c) {
    for (int a = BATON_ALGORITHM_AUTO; a <= BATON_ALGORITHM_HALVING_DOUBLING; ++a) {
      EXPECT_EQ(baton_algorithm_supports(static_cast<baton_algorithm_t>(a),
                                         static_cast<baton_collective_t>(c)),
                kSupports[c][a])
          << baton_algorithm_name(static_cast<baton_algorithm_t>(a)) << " for "
          << baton_collective_name(static_cast<baton_collective_t>(c));
    }
  }
  EXPECT_EQ(baton_algorithm_supports(static_cast<baton_algorithm_t>(42), BATON_ALL_REDUCE), 0);
  EXPECT_EQ(baton_algorithm_supports(BATON_ALGORITHM_AUTO, static_cast<baton_collective_t>(12)), 0);
}

TEST(CApi, CallOptionsInitSetsTheDefaults) {
  baton_call_options_t options;
  std::memset(&options, 0xab, sizeof options);
  baton_call_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(baton_call_options_t));
  EXPECT_LE(options.timeout_ms, 0);  // the default, 10 minutes
  EXPECT_EQ(options.algorithm, BATON_ALGORITHM_AUTO);
  baton_call_options_init(nullptr);  // ignored
}

TEST(CApi, DefaultSocketPathIsBatonSocketOrTheSystemPath) {
  const char* saved = getenv("BATON_SOCKET");
  const std::string restore = saved != nullptr ? saved : "";
  unsetenv("BATON_SOCKET");
  EXPECT_STREQ(baton_default_socket_path(), "/run/baton/batond.sock");
  setenv("BATON_SOCKET", "/tmp/somewhere/else.sock", 1);
  EXPECT_STREQ(baton_default_socket_path(), "/tmp/somewhere/else.sock");
  if (saved != nullptr) {
    setenv("BATON_SOCKET", restore.c_str(), 1);
  } else {
    unsetenv("BATON_SOCKET");
  }
}

TEST(CApi, NullHandlesAndOutPointersAreInvalidArguments) {
  char text[BATON_COMM_ID_MAX];
  EXPECT_TRUE(
      Fails(baton_client_connect("/nonexistent.sock", 100, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(
      Fails(baton_client_create_comm_id(nullptr, text, sizeof text), BATON_INVALID_ARGUMENT));
  baton_comm_t* comm = reinterpret_cast<baton_comm_t*>(&text);  // must be reset to NULL
  EXPECT_TRUE(Fails(baton_client_join(nullptr, "id", 2, 0, 100, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(comm, nullptr);
  void* data = &text;
  EXPECT_TRUE(Fails(baton_client_alloc(nullptr, 64, &data), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(data, nullptr);
  EXPECT_TRUE(Fails(baton_client_alloc(nullptr, 64, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_free(nullptr, text), BATON_INVALID_ARGUMENT));
  EXPECT_STREQ(baton_client_node_name(nullptr), "");

  EXPECT_TRUE(Fails(baton_comm_leave(nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Succeeds(baton_comm_destroy(nullptr)));
  comm = reinterpret_cast<baton_comm_t*>(&text);
  EXPECT_TRUE(Fails(baton_comm_split(nullptr, 0, 0, 100, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(comm, nullptr);
  EXPECT_TRUE(Fails(baton_comm_last_algorithm(nullptr, text, sizeof text), BATON_INVALID_ARGUMENT));
  baton_algorithm_estimate_t estimates[4];
  size_t written = 99;
  EXPECT_TRUE(
      Fails(baton_comm_explain(nullptr, BATON_ALL_REDUCE, 8, BATON_FLOAT32, estimates, 4, &written),
            BATON_INVALID_ARGUMENT));
  EXPECT_EQ(written, 0u);
  EXPECT_TRUE(
      Fails(baton_comm_explain(nullptr, BATON_ALL_REDUCE, 8, BATON_FLOAT32, estimates, 4, nullptr),
            BATON_INVALID_ARGUMENT));

  float x = 1;
  EXPECT_TRUE(Fails(baton_all_reduce(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, nullptr),
                    BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_reduce_scatter(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, nullptr),
                    BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(
      Fails(baton_all_gather(nullptr, &x, &x, 1, BATON_FLOAT32, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_broadcast(nullptr, &x, &x, 1, BATON_FLOAT32, 0, nullptr),
                    BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_reduce(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, 0, nullptr),
                    BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(
      Fails(baton_all_to_all(nullptr, &x, &x, 1, BATON_FLOAT32, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_barrier(nullptr, nullptr), BATON_INVALID_ARGUMENT));

  // Each non-blocking call: a NULL comm fails the call and sets *request to NULL; a NULL
  // request pointer fails it too.
  using Submit = std::function<baton_code_t(baton_request_t**)>;
  const std::vector<std::pair<const char*, Submit>> kSubmits = {
      {"all_reduce",
       [&](baton_request_t** r) {
         return baton_all_reduce_async(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, nullptr, r);
       }},
      {"reduce_scatter",
       [&](baton_request_t** r) {
         return baton_reduce_scatter_async(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, nullptr,
                                           r);
       }},
      {"all_gather",
       [&](baton_request_t** r) {
         return baton_all_gather_async(nullptr, &x, &x, 1, BATON_FLOAT32, nullptr, r);
       }},
      {"broadcast",
       [&](baton_request_t** r) {
         return baton_broadcast_async(nullptr, &x, &x, 1, BATON_FLOAT32, 0, nullptr, r);
       }},
      {"reduce",
       [&](baton_request_t** r) {
         return baton_reduce_async(nullptr, &x, &x, 1, BATON_FLOAT32, BATON_SUM, 0, nullptr, r);
       }},
      {"all_to_all",
       [&](baton_request_t** r) {
         return baton_all_to_all_async(nullptr, &x, &x, 1, BATON_FLOAT32, nullptr, r);
       }},
      {"barrier", [&](baton_request_t** r) { return baton_barrier_async(nullptr, nullptr, r); }},
  };
  for (const auto& [name, submit] : kSubmits) {
    baton_request_t* request = reinterpret_cast<baton_request_t*>(&text);
    EXPECT_TRUE(Fails(submit(&request), BATON_INVALID_ARGUMENT)) << name;
    EXPECT_EQ(request, nullptr) << name;
    EXPECT_TRUE(Fails(submit(nullptr), BATON_INVALID_ARGUMENT)) << name;
  }
  int done = 7;
  EXPECT_TRUE(Fails(baton_request_wait(nullptr, 0, &done), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(done, 0);
  // Freeing NULL is a no-op.
  baton_request_free(nullptr);
  baton_client_close(nullptr);
}

TEST(CApi, LastErrorIsPerThreadAndClearedBySuccess) {
  baton_dtype_t type;
  EXPECT_TRUE(Fails(baton_dtype_parse("nope", &type), BATON_INVALID_ARGUMENT));
  std::string other_thread_saw = "not run";
  std::thread other([&] {
    EXPECT_TRUE(Fails(baton_reduce_op_parse("other", nullptr), BATON_INVALID_ARGUMENT));
    other_thread_saw = baton_last_error();
  });
  other.join();
  EXPECT_NE(other_thread_saw, "not run");
  EXPECT_NE(std::string(baton_last_error()), other_thread_saw);
  EXPECT_NE(std::string(baton_last_error()).find("nope"), std::string::npos) << baton_last_error();
  EXPECT_TRUE(Succeeds(baton_dtype_parse("int32", &type)));
  EXPECT_STREQ(baton_last_error(), "");
  EXPECT_NE(baton_last_error(), nullptr);
}

// A unix socket bound in a temp dir that never listens: connecting is refused.
class DeadSocket {
 public:
  DeadSocket() {
    char dir[] = "/tmp/baton-dead-XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/batond.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  ~DeadSocket() {
    close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string missing() const { return dir_ + "/nobody.sock"; }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

TEST(CApi, ConnectWhereNothingListensIsUnavailableWithinItsTimeout) {
  DeadSocket dead;
  for (const std::string& path : {dead.path(), dead.missing()}) {
    SCOPED_TRACE(path);
    baton_client_t* client = reinterpret_cast<baton_client_t*>(&dead);  // must be reset
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(Fails(baton_client_connect(path.c_str(), 500, &client), BATON_UNAVAILABLE));
    const auto took = Clock::now() - start;
    EXPECT_NE(std::string(baton_last_error()).find(path), std::string::npos) << baton_last_error();
    EXPECT_EQ(client, nullptr);
    EXPECT_LT(took, std::chrono::milliseconds(500 + 2000)) << "must give up at its timeout";
  }
}

// ---- Against the cluster: clients, ids, buffers -------------------------------------------

TEST(CApiCluster, ClientsNameTheirNodeAndMintIds) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  baton_client_t* a = Connect(0);
  baton_client_t* b = Connect(1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::string(baton_client_node_name(a)), cluster->daemons()[0].node_name);
  EXPECT_EQ(std::string(baton_client_node_name(b)), cluster->daemons()[1].node_name);
  EXPECT_STRNE(baton_client_node_name(a), baton_client_node_name(b));

  char first[BATON_COMM_ID_MAX];
  char second[BATON_COMM_ID_MAX];
  ASSERT_TRUE(Succeeds(baton_client_create_comm_id(a, first, sizeof first)));
  ASSERT_TRUE(Succeeds(baton_client_create_comm_id(a, second, sizeof second)));
  EXPECT_LT(std::strlen(first), size_t{BATON_COMM_ID_MAX});
  const std::string id = first;
  ASSERT_NE(id.find('/'), std::string::npos) << id;  // "<address>/<secret>"
  EXPECT_EQ(id.substr(0, id.rfind('/')), cluster->daemons()[0].peer_address) << id;
  EXPECT_STRNE(first, second) << "every id is new";

  char small[8];
  EXPECT_TRUE(Fails(baton_client_create_comm_id(a, small, sizeof small), BATON_OUT_OF_RANGE));
  EXPECT_TRUE(Fails(baton_client_create_comm_id(a, nullptr, 64), BATON_INVALID_ARGUMENT));
  // Exactly strlen + 1 bytes suffice.
  EXPECT_TRUE(Succeeds(baton_client_create_comm_id(b, first, sizeof first)));
  std::vector<char> exact(std::strlen(first) + 1);
  EXPECT_TRUE(Succeeds(baton_client_create_comm_id(b, exact.data(), exact.size())));
  EXPECT_EQ(std::strlen(exact.data()), exact.size() - 1);
  std::vector<char> short_by_one(std::strlen(first));
  EXPECT_TRUE(Fails(baton_client_create_comm_id(b, short_by_one.data(), short_by_one.size()),
                    BATON_OUT_OF_RANGE));

  baton_comm_t* comm = reinterpret_cast<baton_comm_t*>(&small);
  EXPECT_TRUE(Fails(baton_client_join(a, nullptr, 2, 0, 100, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(comm, nullptr);
  EXPECT_TRUE(Fails(baton_client_join(a, id.c_str(), 2, 0, 100, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_join(a, "not-an-id", 2, 0, 1000, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_join(a, second, 0, 0, 1000, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_join(a, second, 2, 2, 1000, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_join(a, second, 2, -1, 1000, &comm), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(comm, nullptr);
  baton_client_close(a);
  baton_client_close(b);
}

TEST(CApiCluster, AllocatedBuffersAreFreedOnlyByTheirClient) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  baton_client_t* a = Connect(0);
  baton_client_t* b = Connect(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  void* data = &data;
  EXPECT_TRUE(Fails(baton_client_alloc(a, 0, &data), BATON_INVALID_ARGUMENT));
  EXPECT_EQ(data, nullptr);
  EXPECT_TRUE(Fails(baton_client_alloc(a, 64, nullptr), BATON_INVALID_ARGUMENT));

  ASSERT_TRUE(Succeeds(baton_client_alloc(a, 1 << 20, &data)));
  ASSERT_NE(data, nullptr);
  std::memset(data, 0x5a, 1 << 20);  // writable, all of it
  EXPECT_EQ(static_cast<unsigned char*>(data)[(1 << 20) - 1], 0x5a);

  void* foreign = malloc(64);
  EXPECT_TRUE(Fails(baton_client_free(a, foreign), BATON_INVALID_ARGUMENT));
  free(foreign);
  int on_stack = 0;
  EXPECT_TRUE(Fails(baton_client_free(a, &on_stack), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_free(a, nullptr), BATON_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(baton_client_free(b, data), BATON_INVALID_ARGUMENT)) << "another client's";
  EXPECT_TRUE(Fails(baton_client_free(a, static_cast<char*>(data) + 8), BATON_INVALID_ARGUMENT))
      << "a pointer inside the buffer is not the buffer";
  EXPECT_TRUE(Succeeds(baton_client_free(a, data)));
  EXPECT_TRUE(Fails(baton_client_free(a, data), BATON_INVALID_ARGUMENT)) << "freed twice";

  // Buffers still allocated at close are freed by it.
  void* kept = nullptr;
  EXPECT_TRUE(Succeeds(baton_client_alloc(b, 4096, &kept)));
  baton_client_close(a);
  baton_client_close(b);
}

TEST(CApiCluster, CommunicatorsKnowTheirRankWorldAndDaemons) {
  std::atomic<int> ran{0};
  RunRanks([&](Rank& r) {
    EXPECT_EQ(baton_comm_rank(r.comm), r.rank);
    EXPECT_EQ(baton_comm_world_size(r.comm), kWorld);
    EXPECT_EQ(baton_comm_daemon_count(r.comm), kDaemons);
    ++ran;
  });
  EXPECT_EQ(ran.load(), kWorld);
}

// ---- Argument errors on a live communicator -----------------------------------------------

TEST(CApiCluster, BadArgumentsFailTheCallAndTheCommunicatorFromThere) {
  RunRanks([&](Rank& r) {
    float x[8] = {};
    const baton_call_options_t options = Options();
    EXPECT_TRUE(Fails(
        baton_all_reduce(r.comm, x, x, 8, static_cast<baton_dtype_t>(99), BATON_SUM, &options),
        BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(baton_all_reduce(r.comm, x, x, 8, BATON_FLOAT32,
                                       static_cast<baton_reduce_op_t>(-1), &options),
                      BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(baton_all_gather(r.comm, x, x, 2, static_cast<baton_dtype_t>(-1), &options),
                      BATON_INVALID_ARGUMENT));
    const baton_call_options_t algorithm_42 = Options(static_cast<baton_algorithm_t>(42));
    EXPECT_TRUE(Fails(baton_all_reduce(r.comm, x, x, 8, BATON_FLOAT32, BATON_SUM, &algorithm_42),
                      BATON_INVALID_ARGUMENT));
    EXPECT_NE(std::string(baton_last_error()).find("42"), std::string::npos) << baton_last_error();
    baton_call_options_t old_struct = Options();
    old_struct.struct_size = sizeof(size_t);  // from a header without the fields it needs
    EXPECT_TRUE(Fails(baton_barrier(r.comm, &old_struct), BATON_INVALID_ARGUMENT));
    for (int root : {kWorld, -1, 1000}) {
      EXPECT_TRUE(Fails(baton_broadcast(r.comm, x, x, 8, BATON_FLOAT32, root, &options),
                        BATON_INVALID_ARGUMENT))
          << root;
      EXPECT_TRUE(Fails(baton_reduce(r.comm, x, x, 8, BATON_FLOAT32, BATON_SUM, root, &options),
                        BATON_INVALID_ARGUMENT))
          << root;
    }
    EXPECT_TRUE(Fails(baton_all_reduce(r.comm, nullptr, x, 8, BATON_FLOAT32, BATON_SUM, &options),
                      BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(baton_all_to_all(r.comm, x, nullptr, 2, BATON_FLOAT32, &options),
                      BATON_INVALID_ARGUMENT));
    // The first refusal failed the communicator from there on, on every rank (the others would
    // have waited for this rank's part); each later call still got its own error above.
    float value = float(r.rank + 1);
    EXPECT_TRUE(
        FailsWith(baton_all_reduce(r.comm, &value, &value, 1, BATON_FLOAT32, BATON_SUM, &options),
                  BATON_ABORTED, "was refused"));
    EXPECT_EQ(value, float(r.rank + 1));
    // A success clears the last error.
    char name[32];
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
    EXPECT_STREQ(baton_last_error(), "");
  });
}

// ---- Algorithms: forcing, reporting, explaining -------------------------------------------

TEST(CApiCluster, ForcedAlgorithmsRunAndAreReported) {
  RunRanks([&](Rank& r) {
    char name[32];
    std::memset(name, 'x', sizeof name);
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
    EXPECT_STREQ(name, "") << "before the first operation";
    EXPECT_TRUE(Fails(baton_comm_last_algorithm(r.comm, name, 0), BATON_OUT_OF_RANGE));
    EXPECT_TRUE(Fails(baton_comm_last_algorithm(r.comm, nullptr, 32), BATON_INVALID_ARGUMENT));

    const size_t count = 1027;
    std::vector<float> data(count);
    for (baton_algorithm_t algorithm :
         {BATON_ALGORITHM_RING, BATON_ALGORITHM_TREE, BATON_ALGORITHM_DOUBLING,
          BATON_ALGORITHM_HALVING_DOUBLING}) {
      SCOPED_TRACE(baton_algorithm_name(algorithm));
      for (size_t i = 0; i < count; ++i) data[i] = float(r.rank + 1) * float(i % 97 + 1);
      const baton_call_options_t options = Options(algorithm);
      EXPECT_TRUE(Succeeds(baton_all_reduce(r.comm, data.data(), data.data(), count, BATON_FLOAT32,
                                            BATON_SUM, &options)));
      EXPECT_TRUE(
          ElementsAre(data.data(), count, [](size_t i) { return 10.0f * float(i % 97 + 1); }));
      EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
      EXPECT_STREQ(name, baton_algorithm_name(algorithm));
    }
    const baton_call_options_t ring = Options(BATON_ALGORITHM_RING);
    const baton_call_options_t direct = Options(BATON_ALGORITHM_DIRECT);
    std::vector<float> gathered(4 * kWorld);
    EXPECT_TRUE(
        Succeeds(baton_all_gather(r.comm, data.data(), gathered.data(), 4, BATON_FLOAT32, &ring)));
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
    EXPECT_STREQ(name, "ring");
    EXPECT_TRUE(Succeeds(baton_barrier(r.comm, &direct)));
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
    EXPECT_STREQ(name, "direct");
    // "direct" needs 7 bytes with its NUL.
    char small[6];
    EXPECT_TRUE(Fails(baton_comm_last_algorithm(r.comm, small, sizeof small), BATON_OUT_OF_RANGE));
    char exact[7];
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, exact, sizeof exact)));
    EXPECT_STREQ(exact, "direct");
  });
}

TEST(CApiCluster, AnAlgorithmThatDoesNotImplementTheCollectiveIsRefused) {
  RunRanks([&](Rank& r) {
    std::vector<float> send(4 * kWorld, 1.0f);
    std::vector<float> recv(4 * kWorld);
    const baton_call_options_t ring = Options(BATON_ALGORITHM_RING);
    const baton_call_options_t tree = Options(BATON_ALGORITHM_TREE);
    const baton_call_options_t direct = Options(BATON_ALGORITHM_DIRECT);
    EXPECT_TRUE(Fails(baton_all_to_all(r.comm, send.data(), recv.data(), 4, BATON_FLOAT32, &ring),
                      BATON_INVALID_ARGUMENT));
    EXPECT_NE(std::string(baton_last_error()).find("all_to_all"), std::string::npos)
        << baton_last_error();
    EXPECT_TRUE(Fails(
        baton_reduce_scatter(r.comm, send.data(), recv.data(), 4, BATON_FLOAT32, BATON_SUM, &tree),
        BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(
        baton_all_reduce(r.comm, send.data(), recv.data(), 4, BATON_FLOAT32, BATON_SUM, &direct),
        BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(baton_barrier(r.comm, &ring), BATON_INVALID_ARGUMENT));
    // The communicator fails from the first refusal on.
    EXPECT_TRUE(FailsWith(
        baton_all_reduce(r.comm, send.data(), recv.data(), 4, BATON_FLOAT32, BATON_SUM, &ring),
        BATON_ABORTED, "all_to_all was refused"));
  });
}

TEST(CApiCluster, ExplainListsEveryCandidateCheapestFirst) {
  RunRanks([&](Rank& r) {
    const size_t count = size_t{1} << 16;
    baton_algorithm_estimate_t estimates[8];
    size_t written = 99;
    ASSERT_TRUE(Succeeds(baton_comm_explain(r.comm, BATON_ALL_REDUCE, count, BATON_FLOAT32,
                                            estimates, 8, &written)));
    ASSERT_EQ(written, 4u) << "ring, tree, doubling, halving_doubling";
    std::set<int> seen;
    bool measured = false;
    for (size_t i = 0; i < written; ++i) {
      seen.insert(estimates[i].algorithm);
      EXPECT_TRUE(baton_algorithm_supports(estimates[i].algorithm, BATON_ALL_REDUCE));
      EXPECT_GT(estimates[i].predicted_seconds, 0.0);
      EXPECT_GE(estimates[i].measured_samples, 0);
      if (estimates[i].measured_seconds >= 0) measured = true;
    }
    EXPECT_EQ(seen, (std::set<int>{BATON_ALGORITHM_RING, BATON_ALGORITHM_TREE,
                                   BATON_ALGORITHM_DOUBLING, BATON_ALGORITHM_HALVING_DOUBLING}));
    if (!measured) {  // without measured times the order is the cost model's
      for (size_t i = 1; i < written; ++i) {
        EXPECT_LE(estimates[i - 1].predicted_seconds, estimates[i].predicted_seconds) << i;
      }
    }
    // The daemon runs the first unless the call forces another.
    std::vector<float> data(count, float(r.rank));
    const baton_call_options_t options = Options();
    EXPECT_TRUE(Succeeds(baton_all_reduce(r.comm, data.data(), data.data(), count, BATON_FLOAT32,
                                          BATON_SUM, &options)));
    EXPECT_TRUE(ElementsAre(data.data(), count, [](size_t) { return 6.0f; }));
    char name[32];
    EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
    EXPECT_STREQ(name, baton_algorithm_name(estimates[0].algorithm));

    // Capacity limits what is written.
    baton_algorithm_estimate_t first;
    EXPECT_TRUE(Succeeds(
        baton_comm_explain(r.comm, BATON_ALL_REDUCE, count, BATON_FLOAT32, &first, 1, &written)));
    EXPECT_EQ(written, 1u);
    EXPECT_TRUE(Succeeds(
        baton_comm_explain(r.comm, BATON_ALL_REDUCE, count, BATON_FLOAT32, nullptr, 0, &written)));
    EXPECT_EQ(written, 0u);
    EXPECT_TRUE(Fails(
        baton_comm_explain(r.comm, BATON_ALL_REDUCE, count, BATON_FLOAT32, nullptr, 2, &written),
        BATON_INVALID_ARGUMENT));
    // The collectives with one implementation have one candidate.
    const std::pair<baton_collective_t, baton_algorithm_t> kSingle[] = {
        {BATON_REDUCE_SCATTER, BATON_ALGORITHM_RING}, {BATON_ALL_GATHER, BATON_ALGORITHM_RING},
        {BATON_BROADCAST, BATON_ALGORITHM_RING},      {BATON_REDUCE, BATON_ALGORITHM_RING},
        {BATON_ALL_TO_ALL, BATON_ALGORITHM_DIRECT},   {BATON_BARRIER, BATON_ALGORITHM_DIRECT}};
    for (const auto& [collective, algorithm] : kSingle) {
      SCOPED_TRACE(baton_collective_name(collective));
      EXPECT_TRUE(Succeeds(
          baton_comm_explain(r.comm, collective, 1024, BATON_FLOAT32, estimates, 8, &written)));
      ASSERT_EQ(written, 1u);
      EXPECT_EQ(estimates[0].algorithm, algorithm);
    }
    EXPECT_TRUE(Fails(baton_comm_explain(r.comm, static_cast<baton_collective_t>(99), 8,
                                         BATON_FLOAT32, estimates, 8, &written),
                      BATON_INVALID_ARGUMENT));
    EXPECT_TRUE(Fails(baton_comm_explain(r.comm, BATON_ALL_REDUCE, 8,
                                         static_cast<baton_dtype_t>(99), estimates, 8, &written),
                      BATON_INVALID_ARGUMENT));
    EXPECT_EQ(written, 0u);
  });
}

TEST(CApiCluster, RanksOnOneDaemonRunLocallyWithNothingToExplain) {
  RunRanks(
      [&](Rank& r) {
        EXPECT_EQ(baton_comm_daemon_count(r.comm), 1);
        baton_algorithm_estimate_t estimates[8];
        size_t written = 99;
        EXPECT_TRUE(Succeeds(baton_comm_explain(r.comm, BATON_ALL_REDUCE, 1024, BATON_FLOAT32,
                                                estimates, 8, &written)));
        EXPECT_EQ(written, 0u);
        int64_t value = r.rank + 5;
        EXPECT_TRUE(
            Succeeds(baton_all_reduce(r.comm, &value, &value, 1, BATON_INT64, BATON_SUM, nullptr)));
        EXPECT_EQ(value, 11);
        char name[32];
        EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
        EXPECT_STREQ(name, "arena");  // one node: its ranks meet without the daemon
        // Too large for the arena's slots: the daemon runs it.
        std::vector<int64_t> large(64 * 1024, r.rank);
        EXPECT_TRUE(Succeeds(baton_broadcast(r.comm, large.data(), large.data(), large.size(),
                                             BATON_INT64, 1, nullptr)));
        EXPECT_EQ(large.front(), 1);
        EXPECT_TRUE(Succeeds(baton_comm_last_algorithm(r.comm, name, sizeof name)));
        EXPECT_STREQ(name, "local");
      },
      2, [](int) { return 1; });
}

// ---- Split and leave -----------------------------------------------------------------------

TEST(CApiCluster, SplitGroupsByColourAndOrdersByKey) {
  RunRanks([&](Rank& r) {
    // Colour rank % 2, key -rank: {0, 2} ordered 2, 0 and {1, 3} ordered 3, 1.
    baton_comm_t* half = nullptr;
    ASSERT_TRUE(Succeeds(baton_comm_split(r.comm, r.rank % 2, -r.rank, kJoinMs, &half)));
    ASSERT_NE(half, nullptr);
    EXPECT_EQ(baton_comm_world_size(half), 2);
    EXPECT_EQ(baton_comm_rank(half), r.rank >= 2 ? 0 : 1);
    EXPECT_EQ(baton_comm_daemon_count(half), 2);  // one rank on each daemon
    int32_t mine = r.rank;
    int32_t members[2] = {-1, -1};
    EXPECT_TRUE(Succeeds(baton_all_gather(half, &mine, members, 1, BATON_INT32, nullptr)));
    EXPECT_EQ(members[0], 2 + r.rank % 2);
    EXPECT_EQ(members[1], r.rank % 2);
    float sum = float(r.rank + 1);
    EXPECT_TRUE(Succeeds(baton_all_reduce(half, &sum, &sum, 1, BATON_FLOAT32, BATON_SUM, nullptr)));
    EXPECT_EQ(sum, r.rank % 2 == 0 ? 1.0f + 3.0f : 2.0f + 4.0f);
    EXPECT_TRUE(Succeeds(baton_comm_destroy(half)));

    // A negative colour joins none: rank 3 gets NULL, the others a communicator of 3.
    baton_comm_t* rest = reinterpret_cast<baton_comm_t*>(&mine);
    ASSERT_TRUE(Succeeds(baton_comm_split(r.comm, r.rank == 3 ? -1 : 7, 0, kJoinMs, &rest)));
    if (r.rank == 3) {
      EXPECT_EQ(rest, nullptr);
    } else {
      ASSERT_NE(rest, nullptr);
      EXPECT_EQ(baton_comm_world_size(rest), 3);
      EXPECT_EQ(baton_comm_rank(rest), r.rank);
      int32_t all[3] = {-1, -1, -1};
      EXPECT_TRUE(Succeeds(baton_all_gather(rest, &mine, all, 1, BATON_INT32, nullptr)));
      EXPECT_EQ(all[0], 0);
      EXPECT_EQ(all[1], 1);
      EXPECT_EQ(all[2], 2);
      EXPECT_TRUE(Succeeds(baton_comm_destroy(rest)));
    }
    EXPECT_TRUE(Fails(baton_comm_split(r.comm, 0, 0, kJoinMs, nullptr), BATON_INVALID_ARGUMENT));
    // The parent still works.
    EXPECT_TRUE(Succeeds(baton_barrier(r.comm, nullptr)));
  });
}

TEST(CApiCluster, ASplitThatARankNeverCallsFailsAtItsDeadline) {
  std::latch others_returned(3);
  RunRanks([&](Rank& r) {
    if (r.rank == 3) {  // never calls split; leaves only once the others have given up
      others_returned.wait();
      return;
    }
    baton_comm_t* out = reinterpret_cast<baton_comm_t*>(&r);  // must be reset
    const Clock::time_point start = Clock::now();
    const baton_code_t code = baton_comm_split(r.comm, 0, 0, 1500, &out);
    const auto took = Clock::now() - start;
    others_returned.count_down();
    EXPECT_TRUE(Fails(code, BATON_DEADLINE_EXCEEDED));
    EXPECT_EQ(out, nullptr);
    EXPECT_GE(took, std::chrono::milliseconds(1400)) << "waits for its timeout";
    EXPECT_LT(took, std::chrono::milliseconds(1500 + 8000)) << "and no longer";
  });
}

TEST(CApiCluster, LeaveWaitsForSubmittedOperationsThenOperationsFail) {
  RunRanks([&](Rank& r) {
    const size_t count = 1027;
    std::vector<int64_t> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = int64_t(r.rank) * int64_t(i);
    baton_request_t* pending = nullptr;
    ASSERT_TRUE(Succeeds(baton_all_reduce_async(r.comm, data.data(), data.data(), count,
                                                BATON_INT64, BATON_SUM, nullptr, &pending)));
    ASSERT_TRUE(Succeeds(baton_comm_leave(r.comm)));
    // The operation submitted before leaving has finished, with its result.
    int done = 0;
    EXPECT_TRUE(Succeeds(baton_request_wait(pending, 0, &done)));
    EXPECT_EQ(done, 1);
    baton_request_free(pending);
    EXPECT_TRUE(ElementsAre(data.data(), count, [](size_t i) { return 6 * int64_t(i); }));

    EXPECT_TRUE(Succeeds(baton_comm_leave(r.comm))) << "idempotent";
    EXPECT_TRUE(Fails(
        baton_all_reduce(r.comm, data.data(), data.data(), count, BATON_INT64, BATON_SUM, nullptr),
        BATON_FAILED_PRECONDITION));
    EXPECT_TRUE(Fails(baton_barrier(r.comm, nullptr), BATON_FAILED_PRECONDITION));
    baton_request_t* late = nullptr;
    EXPECT_TRUE(Succeeds(baton_broadcast_async(r.comm, data.data(), data.data(), count, BATON_INT64,
                                               0, nullptr, &late)));
    EXPECT_TRUE(Fails(baton_request_wait(late, -1, &done), BATON_FAILED_PRECONDITION));
    EXPECT_EQ(done, 1);
    baton_request_free(late);
    // RunRanks destroys the handle: that succeeds after a leave.
  });
}

// ---- Joins that cannot complete, clients that go away --------------------------------------

TEST(CApiCluster, AJoinWhosePeersNeverComeNamesTheMissingRanks) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  const std::string id = NewCommId();
  // World of 4: ranks 0 (daemon 0) and 2 (daemon 1) come, 1 and 3 never do.
  std::vector<std::thread> threads;
  for (int rank : {0, 2}) {
    threads.emplace_back([&, rank] {
      baton_client_t* client = Connect(rank / 2);
      if (client == nullptr) return;
      baton_comm_t* comm = reinterpret_cast<baton_comm_t*>(&threads);  // must be reset
      const Clock::time_point start = Clock::now();
      EXPECT_TRUE(Fails(baton_client_join(client, id.c_str(), 4, rank, 1500, &comm),
                        BATON_DEADLINE_EXCEEDED));
      const auto took = Clock::now() - start;
      const std::string message = baton_last_error();
      EXPECT_NE(message.find("[1, 3]"), std::string::npos) << message;
      EXPECT_EQ(comm, nullptr);
      EXPECT_GE(took, std::chrono::milliseconds(1400)) << "waits for its timeout";
      EXPECT_LT(took, std::chrono::milliseconds(1500 + 8000)) << "and no longer";
      baton_client_close(client);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(CApiCluster, ACommunicatorOutlivesItsClientButItsCallsFail) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  baton_client_t* client = Connect(0);
  ASSERT_NE(client, nullptr);
  char id[BATON_COMM_ID_MAX];
  ASSERT_TRUE(Succeeds(baton_client_create_comm_id(client, id, sizeof id)));
  baton_comm_t* comm = nullptr;
  ASSERT_TRUE(Succeeds(baton_client_join(client, id, 1, 0, kJoinMs, &comm)));
  double value = 2.5;
  EXPECT_TRUE(
      Succeeds(baton_all_reduce(comm, &value, &value, 1, BATON_FLOAT64, BATON_SUM, nullptr)));
  EXPECT_EQ(value, 2.5);
  baton_client_close(client);
  EXPECT_EQ(baton_comm_rank(comm), 0);
  const baton_call_options_t options = Options(BATON_ALGORITHM_AUTO, 5000);
  const baton_code_t code =
      baton_all_reduce(comm, &value, &value, 1, BATON_FLOAT64, BATON_SUM, &options);
  EXPECT_NE(code, BATON_OK);
  EXPECT_STRNE(baton_last_error(), "");
  baton_comm_destroy(comm);  // frees the handle whatever leaving returns
}

// ---- Daemon status ----------------------------------------------------------------------

// The integer after `"key": ` in a status document (the first such key), or -1.
int64_t JsonInteger(const std::string& json, const std::string& key) {
  const std::string field = "\"" + key + "\": ";
  const size_t at = json.find(field);
  if (at == std::string::npos) return -1;
  size_t begin = at + field.size();
  if (json[begin] == '"') ++begin;  // 64-bit integers are strings
  return std::strtoll(json.c_str() + begin, nullptr, 10);
}

// The daemon's status as baton_daemon_status_json writes it, asking for the size first.
std::string StatusJson(const char* socket) {
  size_t needed = 0;
  const baton_code_t code = baton_daemon_status_json(socket, 5000, nullptr, 0, &needed);
  EXPECT_TRUE(FailsWith(code, BATON_OUT_OF_RANGE, "needs"));
  std::vector<char> json(needed + 1024);  // room for a status grown since
  EXPECT_TRUE(Succeeds(baton_daemon_status_json(socket, 5000, json.data(), json.size(), &needed)));
  EXPECT_EQ(needed, std::strlen(json.data()) + 1);
  return json.data();
}

TEST(CApiCluster, DaemonStatusJsonShowsTheDaemonItsSessionsAndCommunicators) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  const client::LocalDaemon& daemon = cluster->daemons()[1];
  const std::string before = StatusJson(daemon.socket.c_str());
  ASSERT_EQ(before.front(), '{') << before;
  EXPECT_NE(before.find("\"node_name\": \"" + daemon.node_name + "\""), std::string::npos)
      << before;
  EXPECT_NE(before.find("\"peer_address\": \"" + daemon.peer_address + "\""), std::string::npos)
      << before;
  EXPECT_EQ(JsonInteger(before, "pid"), daemon.pid) << before;
  const int64_t sessions = JsonInteger(before, "sessions");
  EXPECT_GE(sessions, 0) << before;

  // A client's session and a communicator joined through it show; asking opens no session.
  baton_client_t* client = Connect(1);
  ASSERT_NE(client, nullptr);
  char id[BATON_COMM_ID_MAX];
  ASSERT_TRUE(Succeeds(baton_client_create_comm_id(client, id, sizeof id)));
  baton_comm_t* comm = nullptr;
  ASSERT_TRUE(Succeeds(baton_client_join(client, id, 1, 0, kJoinMs, &comm)));
  int64_t value = 7;
  ASSERT_TRUE(Succeeds(baton_all_reduce(comm, &value, &value, 1, BATON_INT64, BATON_SUM, nullptr)));
  const std::string during = StatusJson(daemon.socket.c_str());
  EXPECT_EQ(JsonInteger(during, "sessions"), sessions + 1) << during;
  EXPECT_NE(during.find("\"world_size\": 1"), std::string::npos) << during;
  EXPECT_NE(during.find("\"state\": \"active\""), std::string::npos) << during;
  EXPECT_GE(JsonInteger(during, "ops_completed"), 1) << during;
  EXPECT_GE(JsonInteger(during, "uptime_ms"), JsonInteger(before, "uptime_ms")) << during;

  // Exactly `needed` bytes suffice (unless the status grew in between); one fewer never does.
  size_t needed = 0;
  baton_code_t code = BATON_OUT_OF_RANGE;
  std::vector<char> exact;
  for (int attempt = 0; attempt < 3 && code == BATON_OUT_OF_RANGE; ++attempt) {
    ASSERT_EQ(baton_daemon_status_json(daemon.socket.c_str(), 5000, nullptr, 0, &needed),
              BATON_OUT_OF_RANGE);
    exact.assign(needed, 'x');
    code =
        baton_daemon_status_json(daemon.socket.c_str(), 5000, exact.data(), exact.size(), &needed);
  }
  EXPECT_TRUE(Succeeds(code));
  EXPECT_EQ(std::strlen(exact.data()) + 1, exact.size());
  std::vector<char> short_by_one(needed - 1);
  EXPECT_TRUE(FailsWith(baton_daemon_status_json(daemon.socket.c_str(), 5000, short_by_one.data(),
                                                 short_by_one.size(), nullptr),
                        BATON_OUT_OF_RANGE, "needs"));
  EXPECT_TRUE(Fails(baton_daemon_status_json(daemon.socket.c_str(), 5000, nullptr, 16, &needed),
                    BATON_INVALID_ARGUMENT));

  baton_comm_destroy(comm);
  baton_client_close(client);
}

TEST(CApiCluster, DaemonStatusJsonAsksTheDefaultSocketWhenGivenNone) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  const char* saved = getenv("BATON_SOCKET");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("BATON_SOCKET", cluster->socket(0).c_str(), 1);
  for (const char* socket : {static_cast<const char*>(nullptr), ""}) {
    const std::string json = StatusJson(socket);
    EXPECT_NE(json.find("\"node_name\": \"" + cluster->daemons()[0].node_name + "\""),
              std::string::npos)
        << json;
  }
  if (saved != nullptr) {
    setenv("BATON_SOCKET", restore.c_str(), 1);
  } else {
    unsetenv("BATON_SOCKET");
  }
}

TEST(CApi, DaemonStatusJsonWhereNothingListensIsUnavailableWithinItsTimeout) {
  DeadSocket dead;
  for (const std::string& path : {dead.path(), dead.missing()}) {
    SCOPED_TRACE(path);
    char json[64] = "untouched";
    size_t needed = 12345;
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(FailsWith(baton_daemon_status_json(path.c_str(), 500, json, sizeof json, &needed),
                          BATON_UNAVAILABLE, path));
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500 + 2000));
    EXPECT_STREQ(json, "untouched");
    EXPECT_EQ(needed, 12345u) << "set only with an answer";
  }
}

}  // namespace
}  // namespace baton::testing
