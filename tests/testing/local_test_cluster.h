#pragma once

// A local cluster of real batond processes in a fresh temp dir for the tests that need daemons
// (tests/client, tests/integration), stopped when the object is destroyed or when the thread
// that started it ends (construct it on the test's main thread, e.g. in SetUpTestSuite). It uses
// only the local-cluster launcher, never the client core or protobuf code, so tests that link
// libbaton.so can use it too.

#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "client/local_cluster.h"
#include "gtest/gtest.h"

namespace baton::testing {

class LocalTestCluster {
 public:
  // `tls`: the daemons run mutual TLS on their peer API with a CA made for this cluster.
  explicit LocalTestCluster(int nodes, std::vector<std::string> extra_args = {}, bool tls = true) {
    char dir[] = "/tmp/baton-lib-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    dir_ = dir;
    client::LocalClusterOptions options;
    options.dir = dir_;
    options.nodes = nodes;
    options.batond = BATOND_PATH;
    options.extra_args = std::move(extra_args);
    options.stop_with_caller = true;
    options.tls = tls;
    absl::StatusOr<std::vector<client::LocalDaemon>> daemons = client::StartLocalCluster(options);
    EXPECT_TRUE(daemons.ok()) << daemons.status();
    if (daemons.ok()) daemons_ = *std::move(daemons);
  }
  ~LocalTestCluster() {
    if (dir_.empty()) return;
    client::StopLocalCluster(dir_, absl::Seconds(10)).IgnoreError();
    if (::testing::Test::HasFailure()) {
      std::cerr << "daemon logs kept in " << dir_ << "\n";  // for the failed test
    } else {
      std::error_code error;
      std::filesystem::remove_all(dir_, error);
    }
  }
  LocalTestCluster(const LocalTestCluster&) = delete;
  LocalTestCluster& operator=(const LocalTestCluster&) = delete;

  bool ok() const { return !daemons_.empty(); }
  const std::vector<client::LocalDaemon>& daemons() const { return daemons_; }
  const std::string& socket(int daemon) const { return daemons_.at(daemon).socket; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<client::LocalDaemon> daemons_;
};

// Checks n elements of `data` against expected(i); reports the first mismatch and how many.
template <typename T, typename Expected>
::testing::AssertionResult ElementsAre(const T* data, size_t n, Expected expected) {
  size_t wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(data[i] == static_cast<T>(expected(i)))) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << wrong << " of " << n << " elements wrong; the first is [" << first
         << "] = " << +data[first] << ", expected " << +static_cast<T>(expected(first));
}

}  // namespace baton::testing
