#include "daemon/http_server.h"

#include <civetweb.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/tcp/socket.h"

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
  explicit CivetHttpServer(std::vector<HttpRoute> routes) : routes_(std::move(routes)) {}
  ~CivetHttpServer() override {
    if (context_ == nullptr) return;
    // civetweb's accept loop sees its stop flag only between polls of up to 2 s
    // (SOCKET_TIMEOUT_QUANTUM); a connection to the listening port ends the poll at once, so
    // connect every few milliseconds until mg_stop has returned.
    std::atomic<bool> stopped{false};
    std::thread waker([this, &stopped] {
      while (!stopped.load()) {
        (void)transport::ConnectWithRetry(wake_address_, absl::Now() + absl::Milliseconds(10),
                                          [&stopped] { return stopped.load(); });
        absl::SleepFor(absl::Milliseconds(10));
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
    // A wildcard listening address is reached through loopback.
    absl::StatusOr<transport::HostPort> bound = transport::SplitHostPort(address_);
    if (bound.ok()) {
      std::string wake_host = bound->host;
      if (wake_host.empty() || wake_host == "0.0.0.0") wake_host = "127.0.0.1";
      if (wake_host == "::") wake_host = "::1";
      wake_address_ = transport::JoinHostPort(wake_host, n > 0 ? ports[0].port : 0);
    }
    return absl::OkStatus();
  }

  std::string address() const override { return address_; }

 private:
  std::vector<HttpRoute> routes_;  // addresses handed to civetweb: never resized after Start
  mg_context* context_ = nullptr;
  std::string address_;
  std::string wake_address_;  // where the destructor connects to wake civetweb's accept loop
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen_address,
                                                              std::vector<HttpRoute> routes) {
  auto server = std::make_unique<CivetHttpServer>(std::move(routes));
  if (absl::Status status = server->Start(listen_address); !status.ok()) return status;
  return server;
}

}  // namespace baton::daemon
