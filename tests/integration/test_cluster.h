#pragma once

// A local cluster of real batond processes in a fresh temp dir, stopped when the test ends, or
// when its process dies (construct it on the test's main thread: the daemons are stopped when
// the thread that started them ends).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "baton/baton.hpp"
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
    options.stop_with_caller = true;
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

// GET http://<address><path> over loopback; returns "<status code>\n<body>" or an error text.
inline std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &peer.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0) {
    close(fd);
    return "connect failed";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  const size_t space = response.find(' ');
  const size_t body = response.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) return "bad response: " + response;
  return response.substr(space + 1, 3) + "\n" + response.substr(body + 4);
}

// Connects to a daemon or fails the test.
inline std::unique_ptr<Client> MustConnect(const std::string& socket) {
  StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket, std::chrono::seconds(10));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

}  // namespace baton::testing
