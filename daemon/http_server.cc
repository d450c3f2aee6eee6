#include "daemon/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace baton::daemon {
namespace {

int Serve(mg_connection* connection, void* data) {
  const auto* route = static_cast<const HttpRoute*>(data);
  const mg_request_info* request = mg_get_request_info(connection);
  if (std::string(request->request_method) != "GET" &&
      std::string(request->request_method) != "HEAD") {
    mg_send_http_error(connection, 405, "%s", "only GET is served here\n");
    return 405;
  }
  const HttpResponse response = route->handler();
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            response.status, mg_get_response_code_text(connection, response.status),
            response.content_type.c_str(), response.body.size());
  if (std::string(request->request_method) == "GET") {
    mg_write(connection, response.body.data(), response.body.size());
  }
  return response.status;
}

class CivetHttpServer final : public HttpServer {
 public:
  CivetHttpServer(std::vector<HttpRoute> routes) : routes_(std::move(routes)) {}
  ~CivetHttpServer() override {
    if (context_ == nullptr) return;
    // civetweb's accept loop sees its stop flag only between polls of up to 2 s
    // (SOCKET_TIMEOUT_QUANTUM); a connection to the listening port ends the poll at once, so
    // connect every few milliseconds until mg_stop has returned.
    std::atomic<bool> stopped{false};
    std::thread waker([this, &stopped] {
      while (!stopped.load()) {
        Poke();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    mg_stop(context_);
    stopped.store(true);
    waker.join();
  }

  absl::Status Start(const std::string& listen_address) {
    static std::once_flag init;
    std::call_once(init, [] { mg_init_library(0); });
    const std::string threads = "4";
    const char* options[] = {"listening_ports", listen_address.c_str(), "num_threads",
                             threads.c_str(), nullptr};
    mg_callbacks callbacks{};
    // civetweb logs bind failures itself; we report them as a status instead.
    callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
    context_ = mg_start(&callbacks, nullptr, options);
    if (context_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", listen_address));
    }
    for (HttpRoute& route : routes_) {
      mg_set_request_handler(context_, route.path.c_str(), &Serve, &route);
    }
    mg_server_port ports[4] = {};
    const int n = mg_get_server_ports(context_, 4, ports);
    const std::string host = listen_address.substr(0, listen_address.rfind(':'));
    address_ = absl::StrCat(host, ":", n > 0 ? ports[0].port : 0);
    port_ = n > 0 ? static_cast<uint16_t>(ports[0].port) : 0;
    host_ = host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
    ipv6_ = host_.find(':') != std::string::npos;
    return absl::OkStatus();
  }

  std::string address() const override { return address_; }

 private:
  // Opens and closes a connection to the listening port (a wildcard address through loopback).
  void Poke() const {
    sockaddr_storage addr{};
    socklen_t length = 0;
    if (port_ == 0) return;
    if (ipv6_) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(port_);
      if (inet_pton(AF_INET6, host_.c_str(), &in6->sin6_addr) != 1 ||
          IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) {
        in6->sin6_addr = in6addr_loopback;
      }
      length = sizeof(sockaddr_in6);
    } else {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      in->sin_family = AF_INET;
      in->sin_port = htons(port_);
      if (inet_pton(AF_INET, host_.c_str(), &in->sin_addr) != 1 ||
          in->sin_addr.s_addr == htonl(INADDR_ANY)) {
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      }
      length = sizeof(sockaddr_in);
    }
    const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    const timeval timeout{0, 100 * 1000};  // bounds connect(); a local port answers at once
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    (void)connect(fd, reinterpret_cast<const sockaddr*>(&addr), length);
    close(fd);
  }

  std::vector<HttpRoute> routes_;  // addresses handed to civetweb: never resized after Start
  mg_context* context_ = nullptr;
  std::string address_;
  std::string host_;  // the listening host, without brackets
  uint16_t port_ = 0;
  bool ipv6_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen_address,
                                                              std::vector<HttpRoute> routes) {
  auto server = std::make_unique<CivetHttpServer>(std::move(routes));
  if (absl::Status status = server->Start(listen_address); !status.ok()) return status;
  return server;
}

}  // namespace baton::daemon
