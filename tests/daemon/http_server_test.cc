#include "daemon/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

// "GET path" over a fresh connection to 127.0.0.1:port; the whole response.
std::string Get(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    (void)write(fd, request.data(), request.size());
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  }
  close(fd);
  return response;
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

TEST(HttpServerTest, ServesItsRoutes) {
  auto server =
      HttpServer::Start("127.0.0.1:0", {HttpRoute{"/healthz", [] {
                                                    return HttpResponse{200, "text/plain", "ok\n"};
                                                  }}});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string response = Get(PortOf((*server)->address()), "/healthz");
  EXPECT_NE(response.find("200"), std::string::npos) << response;
  EXPECT_NE(response.find("ok\n"), std::string::npos) << response;
}

// civetweb's accept loop looks at its stop flag only between polls of up to 2 s; the server wakes
// it, so that a daemon stops at once on SIGTERM. Without that, each of these stops took 1.96 s.
TEST(HttpServerTest, StopsPromptly) {
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0", "127.0.0.1:0"}) {
    SCOPED_TRACE(listen);
    auto server = HttpServer::Start(listen, {HttpRoute{"/", [] { return HttpResponse{}; }}});
    ASSERT_TRUE(server.ok()) << server.status();
    // A request served, and a moment: the accept loop is back in its poll.
    ASSERT_NE(Get(PortOf((*server)->address()), "/").find("200"), std::string::npos);
    absl::SleepFor(absl::Milliseconds(50));
    const absl::Time start = absl::Now();
    server->reset();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  }
}

}  // namespace
}  // namespace baton::daemon
