#include "daemon/metrics.h"

#include <sstream>

#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace baton::daemon {
namespace {

prometheus::ClientMetric::Label Label(std::string name, std::string value) {
  return prometheus::ClientMetric::Label{std::move(name), std::move(value)};
}

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddSample(prometheus::MetricFamily& family,
               std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

// Latency buckets from 10 us to ~84 s, a factor of 2 apart: small all-reduces take tens of
// microseconds, 1 GiB ones seconds.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double b = 10e-6; b < 100; b *= 2) buckets.push_back(b);
  return buckets;
}

class PrometheusMetrics final : public Metrics {
 public:
  explicit PrometheusMetrics(const std::string& node_name)
      : node_name_(node_name),
        latency_(prometheus::BuildHistogram()
                     .Name("baton_collective_duration_seconds")
                     .Help("Time from the last local rank's submission to completion, by "
                           "operation, algorithm and outcome.")
                     .Register(registry_)) {}

  void SetNode(Node* node) override {
    absl::MutexLock lock(&mu_);
    node_ = node;
  }

  void OnOperation(const OpRecord& record) override {
    absl::MutexLock lock(&mu_);
    latency_
        .Add({{"local_node", node_name_},
              {"op", std::string(collective::CollectiveName(record.kind))},
              {"algorithm", record.algorithm.empty() ? "none" : record.algorithm},
              {"outcome", record.ok ? "ok" : "error"}},
             LatencyBuckets())
        .Observe(absl::ToDoubleSeconds(record.total));
  }

  std::string Render() override {
    std::vector<prometheus::MetricFamily> families = registry_.Collect();
    {
      absl::MutexLock lock(&mu_);
      if (node_ != nullptr) AppendNodeState(*node_, families);
    }
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
  }

 private:
  void AppendNodeState(Node& node, std::vector<prometheus::MetricFamily>& families) {
    const std::string& local = node_name_;
    auto tx_bytes =
        Family("baton_link_transmitted_bytes_total",
               "Bytes sent to a peer daemon, framing included.", prometheus::MetricType::Counter);
    auto rx_bytes = Family("baton_link_received_bytes_total",
                           "Bytes received from a peer daemon, framing included.",
                           prometheus::MetricType::Counter);
    auto tx_messages = Family("baton_link_transmitted_messages_total",
                              "Messages sent to a peer daemon.", prometheus::MetricType::Counter);
    auto rx_messages =
        Family("baton_link_received_messages_total", "Messages received from a peer daemon.",
               prometheus::MetricType::Counter);
    auto errors = Family("baton_link_errors_total", "Transport errors on a link.",
                         prometheus::MetricType::Counter);
    auto up = Family("baton_link_up", "1 while a connection from the peer is established.",
                     prometheus::MetricType::Gauge);
    for (const transport::LinkStats& link : node.endpoint()->Stats()) {
      std::vector<prometheus::ClientMetric::Label> labels = {
          Label("local_node", local), Label("peer_node", node.PeerName(link.peer)),
          Label("transport", "tcp")};
      AddSample(tx_bytes, labels, static_cast<double>(link.tx_bytes));
      AddSample(rx_bytes, labels, static_cast<double>(link.rx_bytes));
      AddSample(tx_messages, labels, static_cast<double>(link.tx_messages));
      AddSample(rx_messages, labels, static_cast<double>(link.rx_messages));
      AddSample(errors, labels, static_cast<double>(link.errors));
      AddSample(up, labels, link.up ? 1 : 0);
    }
    auto communicators = Family("baton_communicators", "Communicators this daemon takes part in.",
                                prometheus::MetricType::Gauge);
    AddSample(communicators, {Label("local_node", local)},
              static_cast<double>(node.communicators().List().size()));
    auto completed = Family("baton_collectives_completed_total",
                            "Collective operations completed since the daemon started.",
                            prometheus::MetricType::Counter);
    AddSample(completed, {Label("local_node", local)},
              static_cast<double>(node.collectives_completed()));
    auto sessions = Family("baton_client_sessions", "Client sessions open on this daemon.",
                           prometheus::MetricType::Gauge);
    AddSample(sessions, {Label("local_node", local)}, node.sessions().Count());
    for (auto* family : {&tx_bytes, &rx_bytes, &tx_messages, &rx_messages, &errors, &up,
                         &communicators, &completed, &sessions}) {
      families.push_back(std::move(*family));
    }
  }

  const std::string node_name_;
  prometheus::Registry registry_;
  prometheus::Family<prometheus::Histogram>& latency_;
  absl::Mutex mu_;
  Node* node_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

std::unique_ptr<Metrics> Metrics::Create(const std::string& node_name) {
  return std::make_unique<PrometheusMetrics>(node_name);
}

}  // namespace baton::daemon
