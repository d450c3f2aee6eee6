#pragma once

// A communicator's ranks as threads, each with its own client of the library's core
// (client/lib/client_core.h, not the public API), on the daemons of a LocalTestCluster: for tests
// that need what only the core exposes (device memory on the fake device, the node arena's
// routing).

#include <functional>
#include <memory>
#include <string>
#include <thread>
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
// rank r on daemon daemon_of(r), and waits for them.
inline void RunCoreRanks(const LocalTestCluster& cluster, int world,
                         const std::function<int(int)>& daemon_of,
                         const std::function<void(int, core::Communicator&, core::Client&)>& body) {
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

}  // namespace baton::testing
