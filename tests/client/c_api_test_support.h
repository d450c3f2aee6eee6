#pragma once

// What the C API tests (c_api_test.cc, c_api_collectives_test.cc) share: checks on a call's code
// and baton_last_error(), a local cluster of two daemons started once per test program, ranks run
// as threads with their own client and communicator, and buffers of either kind of memory. Only
// <baton/baton.h> from Baton, plus the local-cluster launcher.

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.h"
#include "tests/testing/local_test_cluster.h"

namespace baton::testing {

using Clock = std::chrono::steady_clock;

constexpr int kDaemons = 2;
constexpr int kWorld = 4;           // ranks 0 and 1 on daemon 0, ranks 2 and 3 on daemon 1
constexpr int64_t kJoinMs = 30000;  // every wait in these tests ends well before ctest's limit
constexpr int64_t kCallMs = 60000;

// ---- Checks ------------------------------------------------------------------------------

// The call failed with `want` and left a message in baton_last_error().
inline ::testing::AssertionResult Fails(baton_code_t got, baton_code_t want) {
  const std::string message = baton_last_error();
  if (got != want) {
    return ::testing::AssertionFailure() << "got " << baton_code_name(got) << " (\"" << message
                                         << "\"), want " << baton_code_name(want);
  }
  if (message.empty()) {
    return ::testing::AssertionFailure() << baton_code_name(got) << " with no message";
  }
  return ::testing::AssertionSuccess() << message;
}

// The call failed with `want` and its message contains `text`.
inline ::testing::AssertionResult FailsWith(baton_code_t got, baton_code_t want,
                                            const std::string& text) {
  ::testing::AssertionResult failed = Fails(got, want);
  if (!failed) return failed;
  const std::string message = baton_last_error();
  if (message.find(text) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" lacks \"" << text << "\"";
  }
  return ::testing::AssertionSuccess() << message;
}

// The call succeeded and cleared this thread's last error.
inline ::testing::AssertionResult Succeeds(baton_code_t got) {
  const std::string message = baton_last_error();
  if (got != BATON_OK) {
    return ::testing::AssertionFailure() << baton_code_name(got) << ": " << message;
  }
  if (!message.empty()) {
    return ::testing::AssertionFailure() << "OK, but baton_last_error() is \"" << message << "\"";
  }
  return ::testing::AssertionSuccess();
}

inline baton_call_options_t Options(baton_algorithm_t algorithm = BATON_ALGORITHM_AUTO,
                                    int64_t timeout_ms = kCallMs) {
  baton_call_options_t options;
  baton_call_options_init(&options);
  options.timeout_ms = timeout_ms;
  options.algorithm = algorithm;
  return options;
}

// ---- The cluster -------------------------------------------------------------------------

inline LocalTestCluster* cluster = nullptr;

// Starts the daemons on the main thread before the first test and stops them after the last;
// each test program registers it once (AddGlobalTestEnvironment).
class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { cluster = new LocalTestCluster(kDaemons, {"--chunk-bytes=4096"}); }
  void TearDown() override {
    delete cluster;
    cluster = nullptr;
  }
};

inline baton_client_t* Connect(int daemon) {
  baton_client_t* client = nullptr;
  EXPECT_TRUE(Succeeds(baton_client_connect(cluster->socket(daemon).c_str(), 10000, &client)));
  return client;
}

inline std::string NewCommId(int daemon = 0) {
  baton_client_t* client = Connect(daemon);
  if (client == nullptr) return "";
  char id[BATON_COMM_ID_MAX];
  EXPECT_TRUE(Succeeds(baton_client_create_comm_id(client, id, sizeof id)));
  baton_client_close(client);
  return id;
}

struct Rank {
  int rank = 0;
  baton_client_t* client = nullptr;
  baton_comm_t* comm = nullptr;  // the body may destroy it and set it to NULL
};

inline int BlockPlacement(int rank) { return rank / 2; }

// Runs body(rank) on one thread per rank of a new communicator of `world` ranks, rank r on daemon
// daemon_of(r), each through its own client; then destroys the communicators and clients.
inline void RunRanks(const std::function<void(Rank&)>& body, int world = kWorld,
                     int (*daemon_of)(int) = BlockPlacement) {
  ASSERT_TRUE(cluster != nullptr && cluster->ok());
  const std::string id = NewCommId(daemon_of(0));
  ASSERT_FALSE(id.empty());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Rank rank;
      rank.rank = r;
      rank.client = Connect(daemon_of(r));
      if (rank.client == nullptr) return;
      EXPECT_TRUE(
          Succeeds(baton_client_join(rank.client, id.c_str(), world, r, kJoinMs, &rank.comm)));
      if (rank.comm != nullptr) {
        body(rank);
        EXPECT_TRUE(Succeeds(baton_comm_destroy(rank.comm)));
      }
      baton_client_close(rank.client);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Memory for a collective: from baton_client_alloc (shared with the daemon) or plain malloc
// (staged through the library's shared buffer).
enum class Memory { kMalloc, kShared };

class Buffer {
 public:
  Buffer(baton_client_t* client, Memory memory, size_t bytes) : client_(client), memory_(memory) {
    const size_t size = bytes > 0 ? bytes : 1;  // baton_client_alloc refuses 0 bytes
    if (memory_ == Memory::kShared) {
      EXPECT_TRUE(Succeeds(baton_client_alloc(client_, size, &data_)));
    } else {
      data_ = malloc(size);
    }
  }
  ~Buffer() {
    if (memory_ == Memory::kShared) {
      EXPECT_TRUE(Succeeds(baton_client_free(client_, data_)));
    } else {
      free(data_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }

 private:
  baton_client_t* const client_;
  const Memory memory_;
  void* data_ = nullptr;
};

}  // namespace baton::testing
