#pragma once

// What the integration tests share: a local cluster of real daemons (TestCluster), a client
// connected to one, and HTTP GET for the daemons' metrics endpoints.

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
#include "gtest/gtest.h"
#include "tests/testing/local_test_cluster.h"

namespace baton::testing {

using TestCluster = LocalTestCluster;

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
