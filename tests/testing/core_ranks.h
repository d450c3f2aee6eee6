#pragma once

// A communicator's ranks as threads, each with its own client of the library's core
// (client/lib/client_core.h, not the public API), on the daemons of a LocalTestCluster: for tests
// that need what only the core exposes (device memory on the fake device, the node arena's
// routing). RunCoreRanks runs them; CoreClusterTest is a test suite's fixture with its own cluster.

#include <stdlib.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/lib/client_core.h"
#include "gtest/gtest.h"
#include "tests/testing/local_test_cluster.h"

namespace baton::testing {

// A client of `cluster`'s daemon `daemon`, or null (with a test failure).
inline std::unique_ptr<core::Client> ConnectCore(const LocalTestCluster& cluster, int daemon) {
  absl::StatusOr<std::unique_ptr<core::Client>> client =
      core::Client::Connect(cluster.socket(daemon));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Runs body(rank, comm, client) on one thread per rank of a new communicator of `world` ranks,
// rank r on daemon daemon_of(r), and waits for them. A rank that cannot connect or join fails the
// test and skips its body.
inline void RunCoreRanks(
    const LocalTestCluster& cluster, int world, const std::function<int(int rank)>& daemon_of,
    const std::function<void(int rank, core::Communicator& comm, core::Client& client)>& body) {
  ASSERT_TRUE(cluster.ok());
  std::string id;
  {
    std::unique_ptr<core::Client> client = ConnectCore(cluster, 0);
    ASSERT_NE(client, nullptr);
    absl::StatusOr<std::string> created = client->CreateCommId();
    ASSERT_TRUE(created.ok()) << created.status();
    id = *created;
  }
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<core::Client> client = ConnectCore(cluster, daemon_of(rank));
      ASSERT_NE(client, nullptr);
      absl::StatusOr<std::unique_ptr<core::Communicator>> comm =
          client->Join(id, world, rank, absl::Seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(rank, **comm, *client);
    });
  }
  for (std::thread& t : threads) t.join();
}

// A test suite over a cluster of real daemons (without TLS) started before its first test and
// stopped after its last, its ranks on the library's core. `Cluster` describes it:
//   static constexpr int kDaemons;                    // how many daemons
//   static constexpr bool kFakeDevice;                // the daemons (--device=fake) and this
//                                                     // process ($BATON_DEVICE) on the host fake
//                                                     // device (device/host_fake.h)
//   static std::vector<std::string> DaemonFlags();    // batond's other flags
// Use it as `using MyTest = testing::CoreClusterTest<MyCluster>;` with TEST_F(MyTest, ...).
template <typename Cluster>
class CoreClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> flags = Cluster::DaemonFlags();
    if constexpr (Cluster::kFakeDevice) {
      setenv("BATON_DEVICE", "fake", 1);  // before the library opens this process's device
      flags.push_back("--device=fake");
    }
    cluster_ = new LocalTestCluster(Cluster::kDaemons, std::move(flags), /*tls=*/false);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // A client of daemon `daemon`, or null (with a test failure).
  static std::unique_ptr<core::Client> Connect(int daemon) {
    return ConnectCore(*cluster_, daemon);
  }

  // RunCoreRanks on this suite's cluster.
  static void RunRanks(
      int world, const std::function<int(int rank)>& daemon_of,
      const std::function<void(int rank, core::Communicator& comm, core::Client& client)>& body) {
    RunCoreRanks(*cluster_, world, daemon_of, body);
  }

  inline static LocalTestCluster* cluster_ = nullptr;
};

}  // namespace baton::testing
