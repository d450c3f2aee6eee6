#pragma once

// A local cluster of real batond processes in a fresh temp dir, stopped when the test ends.

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "client/baton.h"
#include "client/local_cluster.h"
#include "gtest/gtest.h"

namespace baton::testing {

class TestCluster {
 public:
  explicit TestCluster(int nodes, std::vector<std::string> extra_args = {}) {
    char dir[] = "/tmp/baton-it-XXXXXX";
    dir_ = mkdtemp(dir);
    client::LocalClusterOptions options;
    options.dir = dir_;
    options.nodes = nodes;
    options.batond = BATOND_PATH;
    options.extra_args = std::move(extra_args);
    absl::StatusOr<std::vector<client::LocalDaemon>> daemons = client::StartLocalCluster(options);
    EXPECT_TRUE(daemons.ok()) << daemons.status();
    if (daemons.ok()) daemons_ = std::move(*daemons);
  }
  ~TestCluster() {
    client::StopLocalCluster(dir_, absl::Seconds(10)).IgnoreError();
    if (::testing::Test::HasFailure()) {
      // Keep the logs of a failed test and say where they are.
      std::cerr << "daemon logs kept in " << dir_ << "\n";
    } else {
      std::error_code error;
      std::filesystem::remove_all(dir_, error);
    }
  }

  bool ok() const { return !daemons_.empty(); }
  const std::vector<client::LocalDaemon>& daemons() const { return daemons_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<client::LocalDaemon> daemons_;
};

// Connects to a daemon or fails the test.
inline std::unique_ptr<Client> MustConnect(const std::string& socket) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket, absl::Seconds(10));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

}  // namespace baton::testing
