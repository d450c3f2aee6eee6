#pragma once

// The daemon's Prometheus metrics (the only user of prometheus-cpp). Link and communicator state
// is read from the node at scrape time, so the data plane keeps one set of counters; operation
// latencies are recorded as they complete. docs/metrics.md lists every metric.

#include <memory>
#include <string>

#include "daemon/communicator.h"
#include "daemon/node.h"
#include "transport/progress.h"

namespace baton::daemon {

class Metrics : public OpObserver {
 public:
  // `node` must outlive the metrics; it may be set after construction (SetNode) because the node
  // takes this object as its operation observer.
  static std::unique_ptr<Metrics> Create(const std::string& node_name, const std::string& version);
  ~Metrics() override = default;

  virtual void SetNode(Node* node) = 0;
  // The daemon's progress engine, whose waits are counted (baton_progress_waits_total); must
  // outlive the metrics.
  virtual void SetProgress(const transport::ProgressEngine* progress) = 0;
  // The Prometheus text exposition of every metric.
  virtual std::string Render() = 0;
};

}  // namespace baton::daemon
