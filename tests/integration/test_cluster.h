#pragma once

// What the tests of the C++ API (<baton/baton.hpp>) share, in tests/integration (over libbaton's
// code linked statically) and tests/client (over libbaton.so): a local cluster of real daemons
// (TestCluster), a client connected to one, a communicator's ranks run as threads (RunRanks);
// HTTP GET for the daemons' metrics endpoints is in tests/testing/metrics_page.h. Nothing here
// uses the library's internals or generated protobuf code. (tests/testing/core_ranks.h runs
// ranks on the library's core, tests/client/c_api_test_support.h on the C API.)

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.hpp"
#include "gtest/gtest.h"
#include "tests/testing/local_test_cluster.h"
#include "tests/testing/metrics_page.h"

namespace baton::testing {

using TestCluster = LocalTestCluster;

// Connects to a daemon or fails the test.
inline std::unique_ptr<Client> MustConnect(const std::string& socket) {
  StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket, std::chrono::seconds(10));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// A new communicator id from daemon `daemon`, or "" after failing the test.
inline std::string NewCommId(const TestCluster& cluster, int daemon = 0) {
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[daemon].socket);
  if (client == nullptr) return "";
  StatusOr<std::string> id = client->CreateCommId();
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : "";
}

// Which daemon each rank joins through: daemon_of(rank) indexes cluster.daemons().
using Placement = std::function<int(int rank)>;

// Ranks in blocks of ceil(world / daemons): with 6 ranks on 3 daemons, ranks 0-1 on daemon 0.
inline Placement BlockPlacement(int world, int daemons) {
  const int per_daemon = (world + daemons - 1) / daemons;
  return [per_daemon](int rank) { return rank / per_daemon; };
}
inline Placement BlockPlacement(const TestCluster& cluster, int world) {
  return BlockPlacement(world, static_cast<int>(cluster.daemons().size()));
}

// Runs the `world` ranks of communicator `comm_id` on one thread each: rank r connects to daemon
// daemon_of(r), joins (30 s), and calls body(rank, comm, client); returns once every rank's body
// has returned. A rank that cannot connect or join fails the test and skips its body.
inline void RunRanks(
    const TestCluster& cluster, const std::string& comm_id, int world, const Placement& daemon_of,
    const std::function<void(int rank, Communicator& comm, Client& client)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[daemon_of(rank)].socket);
      if (client == nullptr) return;
      StatusOr<std::unique_ptr<Communicator>> comm =
          client->Join(comm_id, world, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      ASSERT_NE(comm->get(), nullptr) << "rank " << rank;
      body(rank, **comm, *client);
    });
  }
  for (auto& t : threads) t.join();
}

// The same, for bodies that need no client.
inline void RunRanks(const TestCluster& cluster, const std::string& comm_id, int world,
                     const Placement& daemon_of,
                     const std::function<void(int rank, Communicator& comm)>& body) {
  RunRanks(cluster, comm_id, world, daemon_of,
           [&body](int rank, Communicator& comm, Client&) { body(rank, comm); });
}

// Both, on a new communicator (its id from daemon 0).
inline void RunRanks(
    const TestCluster& cluster, int world, const Placement& daemon_of,
    const std::function<void(int rank, Communicator& comm, Client& client)>& body) {
  ASSERT_TRUE(cluster.ok());
  const std::string comm_id = NewCommId(cluster);
  ASSERT_FALSE(comm_id.empty());
  RunRanks(cluster, comm_id, world, daemon_of, body);
}
inline void RunRanks(const TestCluster& cluster, int world, const Placement& daemon_of,
                     const std::function<void(int rank, Communicator& comm)>& body) {
  ASSERT_TRUE(cluster.ok());
  const std::string comm_id = NewCommId(cluster);
  ASSERT_FALSE(comm_id.empty());
  RunRanks(cluster, comm_id, world, daemon_of, body);
}

}  // namespace baton::testing
