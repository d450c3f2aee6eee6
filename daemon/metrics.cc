#include "daemon/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"

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

// Reads the node's state on every scrape.
class NodeCollector final : public prometheus::Collectable {
 public:
  explicit NodeCollector(Node* node) : node_(node) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const std::string& local = node_->self().node_name;
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
    for (const transport::LinkStats& link : node_->endpoint()->Stats()) {
      std::vector<prometheus::ClientMetric::Label> labels = {
          Label("local_node", local), Label("peer", link.peer), Label("transport", "tcp")};
      AddSample(tx_bytes, labels, static_cast<double>(link.tx_bytes));
      AddSample(rx_bytes, labels, static_cast<double>(link.rx_bytes));
      AddSample(tx_messages, labels, static_cast<double>(link.tx_messages));
      AddSample(rx_messages, labels, static_cast<double>(link.rx_messages));
      AddSample(errors, labels, static_cast<double>(link.errors));
      AddSample(up, labels, link.up ? 1 : 0);
    }
    auto communicators = Family("baton_communicators", "Communicators this daemon takes part in.",
                                prometheus::MetricType::Gauge);
    auto ops = Family("baton_collectives_completed_total",
                      "Collective operations completed since the daemon started.",
                      prometheus::MetricType::Counter);
    const double completed = static_cast<double>(node_->collectives_completed());
    const auto comms = node_->communicators().List();
    AddSample(communicators, {Label("local_node", local)}, static_cast<double>(comms.size()));
    AddSample(ops, {Label("local_node", local)}, completed);
    auto sessions = Family("baton_client_sessions", "Client sessions open on this daemon.",
                           prometheus::MetricType::Gauge);
    AddSample(sessions, {Label("local_node", local)}, node_->sessions().Count());
    return {tx_bytes, rx_bytes, tx_messages, rx_messages, errors, up, communicators, ops, sessions};
  }

 private:
  Node* const node_;
};

class PrometheusMetricsServer final : public MetricsServer {
 public:
  PrometheusMetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                          std::shared_ptr<NodeCollector> collector, std::string address)
      : exposer_(std::move(exposer)),
        collector_(std::move(collector)),
        address_(std::move(address)) {
    exposer_->RegisterCollectable(collector_);
  }
  std::string address() const override { return address_; }

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<NodeCollector> collector_;
  std::string address_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen_address, Node* node) {
  // prometheus-cpp reports a failed bind by throwing; this is the one place we catch it.
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen_address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen_address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  const std::string host = listen_address.substr(0, listen_address.rfind(':'));
  std::string address = absl::StrCat(host, ":", ports.empty() ? 0 : ports.front());
  return std::unique_ptr<MetricsServer>(new PrometheusMetricsServer(
      std::move(exposer), std::make_shared<NodeCollector>(node), std::move(address)));
}

}  // namespace baton::daemon
