#pragma once

// The daemons' metrics endpoints, as tests read them: HTTP GET over loopback, and a /metrics
// page's samples.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace baton::testing {

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

// Every sample of a /metrics page body: "name{labels}" -> value.
inline std::map<std::string, double> MetricSamples(const std::string& page) {
  std::map<std::string, double> samples;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == std::string::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    samples[line.substr(0, space)] = value;
  }
  return samples;
}

// The samples of the daemon's /metrics at `address` (empty, with a test failure, unless it
// answered 200).
inline std::map<std::string, double> ScrapeMetrics(const std::string& address) {
  const std::string page = HttpGet(address, "/metrics");
  if (page.substr(0, 3) != "200") {
    ADD_FAILURE() << "GET /metrics from " << address << ": " << page;
    return {};
  }
  return MetricSamples(page.substr(4));
}

}  // namespace baton::testing
