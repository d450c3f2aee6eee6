#pragma once

// The daemon's small HTTP server (civetweb): /metrics, /healthz, /readyz. Handlers run on the
// server's worker threads and must be thread-safe.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::daemon {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpRoute {
  std::string path;  // exact path, e.g. "/metrics"
  std::function<HttpResponse()> handler;
};

class HttpServer {
 public:
  // Serves GET on `routes` at `listen_address` ("host:port"; port 0 picks a free port).
  // Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen_address,
                                                           std::vector<HttpRoute> routes);
  virtual ~HttpServer() = default;  // stops serving; in-flight requests finish first
  // "host:port" actually bound.
  virtual std::string address() const = 0;
};

}  // namespace baton::daemon
