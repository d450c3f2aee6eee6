#pragma once

// The daemon's Prometheus endpoint (the only user of prometheus-cpp). Metrics are read from the
// node at scrape time, so the data plane keeps one set of counters and nothing is double-counted.
// docs/metrics.md lists every metric.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/node.h"

namespace baton::daemon {

class MetricsServer {
 public:
  // Serves /metrics on `listen_address` ("host:port", port 0 picks one). `node` must outlive it.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen_address,
                                                              Node* node);
  virtual ~MetricsServer() = default;
  // "host:port" actually bound.
  virtual std::string address() const = 0;
};

}  // namespace baton::daemon
