#include "daemon/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
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

struct ProcessSample {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double start_time_seconds = 0;
};

// Reads this process's figures from /proc (proc(5)); nullopt if /proc is unreadable.
std::optional<ProcessSample> SampleProcess() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start at field 3, "state".
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  auto field = [&fields](int number) -> double {  // proc(5) numbering
    const size_t index = static_cast<size_t>(number - 3);
    double value = 0;
    if (index < fields.size()) (void)absl::SimpleAtod(fields[index], &value);
    return value;
  };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessSample sample;
  sample.cpu_seconds = (field(14) + field(15)) / ticks;
  sample.virtual_bytes = field(23);
  sample.resident_bytes = field(24) * page;
  double boot_time = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "btime ")) (void)absl::SimpleAtod(rest, &boot_time);
  }
  sample.start_time_seconds = boot_time + field(22) / ticks;
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    sample.open_fds += 1;
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) sample.max_fds = static_cast<double>(limit.rlim_cur);
  return sample;
}

class PrometheusMetrics final : public Metrics {
 public:
  PrometheusMetrics(const std::string& node_name, const std::string& version)
      : node_name_(node_name),
        version_(version),
        latency_(prometheus::BuildHistogram()
                     .Name("baton_collective_duration_seconds")
                     .Help("Time from the last local rank's submission to completion, by "
                           "operation, algorithm and outcome.")
                     .Register(registry_)),
        phases_(prometheus::BuildCounter()
                    .Name("baton_collective_time_seconds_total")
                    .Help("Time operations spent waiting on the transport, in reduction kernels, "
                          "and in dispatch (the rest), by operation and algorithm.")
                    .Register(registry_)),
        staged_(prometheus::BuildCounter()
                    .Name("baton_device_staged_bytes_total")
                    .Help("Bytes copied between device and host memory, either way, to run "
                          "operations on device memory through host memory, by operation.")
                    .Register(registry_)),
        unregistered_(prometheus::BuildCounter()
                          .Name("baton_data_unregistered_bytes_total")
                          .Help("Bytes operations sent or received from memory not registered "
                                "with the data plane, which a transport that moves registered "
                                "memory only must copy, by operation.")
                          .Register(registry_)) {}

  void SetNode(Node* node) override {
    absl::MutexLock lock(&mu_);
    node_ = node;
  }

  void SetProgress(const transport::ProgressEngine* progress) override {
    absl::MutexLock lock(&mu_);
    progress_ = progress;
  }

  void OnOperation(const OpRecord& record) override {
    absl::MutexLock lock(&mu_);
    const OpSeries& series = SeriesLocked(record.kind, record.algorithm);
    (record.ok ? series.ok : series.error)->Observe(absl::ToDoubleSeconds(record.total));
    const absl::Duration dispatch =
        std::max(record.total - record.transport - record.reduce, absl::ZeroDuration());
    series.transport->Increment(absl::ToDoubleSeconds(record.transport));
    series.reduce->Increment(absl::ToDoubleSeconds(record.reduce));
    series.dispatch->Increment(absl::ToDoubleSeconds(dispatch));
    if (record.staged_bytes > 0) {
      StagedLocked(record.kind).Increment(static_cast<double>(record.staged_bytes));
    }
    if (record.unregistered_bytes > 0) {
      ByOpLocked(unregistered_, unregistered_series_, record.kind)
          .Increment(static_cast<double>(record.unregistered_bytes));
    }
  }

  std::string Render() override {
    std::vector<prometheus::MetricFamily> families = registry_.Collect();
    {
      absl::MutexLock lock(&mu_);
      if (node_ != nullptr) AppendNodeState(*node_, families);
      if (progress_ != nullptr) AppendProgress(*progress_, families);
    }
    AppendProcess(families);
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
  }

 private:
  void AppendNodeState(Node& node, std::vector<prometheus::MetricFamily>& families) {
    const std::string& local = node_name_;
    using prometheus::MetricType;
    auto tx_bytes = Family("baton_link_transmitted_bytes_total",
                           "Bytes sent to a peer daemon, framing included.", MetricType::Counter);
    auto rx_bytes =
        Family("baton_link_received_bytes_total",
               "Bytes received from a peer daemon, framing included.", MetricType::Counter);
    auto tx_messages = Family("baton_link_transmitted_messages_total",
                              "Messages sent to a peer daemon.", MetricType::Counter);
    auto rx_messages = Family("baton_link_received_messages_total",
                              "Messages received from a peer daemon.", MetricType::Counter);
    auto errors =
        Family("baton_link_errors_total", "Transport errors on a link.", MetricType::Counter);
    auto retransmits =
        Family("baton_link_retransmits_total",
               "TCP segments retransmitted on the connections to a peer.", MetricType::Counter);
    auto refused = Family("baton_link_refused_messages_total",
                          "Messages from a peer dropped because the peer is not a daemon of "
                          "the communicator they claim.",
                          MetricType::Counter);
    auto checksum_failures =
        Family("baton_link_checksum_failures_total",
               "Messages from a peer whose payload checksum did not match (data_checksum).",
               MetricType::Counter);
    auto seal_failures = Family("baton_link_seal_failures_total",
                                "Messages from a peer on a sealed or authenticated connection "
                                "with a record that did not open: altered, dropped or replayed "
                                "on the way (data_encryption, data_integrity).",
                                MetricType::Counter);
    auto credit_violations =
        Family("baton_link_credit_violations_total",
               "Messages from a peer dropped because it sent them beyond the credit it was "
               "granted (flow control); its receives failed and its connections were closed.",
               MetricType::Counter);
    auto refused_writes =
        Family("baton_link_refused_writes_total",
               "One-sided writes from a peer refused: under a key that is unknown, revoked or "
               "exposed to another peer or communicator, or outside the exposed region.",
               MetricType::Counter);
    auto up = Family("baton_link_up", "1 while a connection with the peer is established.",
                     MetricType::Gauge);
    auto rtt = Family("baton_link_rtt_seconds",
                      "Round-trip time to a peer, median of the recent probes.", MetricType::Gauge);
    auto data_rtt = Family("baton_link_data_rtt_seconds",
                           "Round-trip time to a peer over the data plane (a ping frame), median "
                           "of the recent probes; the tuner's message latency is half of it.",
                           MetricType::Gauge);
    auto bandwidth = Family("baton_link_bandwidth_bytes_per_second",
                            "Bandwidth to a peer, median of the recent probes.", MetricType::Gauge);
    auto probes =
        Family("baton_link_probes_total", "Link probe rounds by outcome.", MetricType::Counter);
    auto flagged = Family("baton_link_flagged",
                          "1 while the link is flagged as degraded for the reason, else 0.",
                          MetricType::Gauge);
    auto peer_up =
        Family("baton_peer_up", "1 while the peer daemon answers probes.", MetricType::Gauge);
    for (const LinkView& link : node.Links()) {
      const std::string peer =
          link.peer.node_name.empty() ? link.peer.peer_address : link.peer.node_name;
      std::vector<prometheus::ClientMetric::Label> labels = {
          Label("local_node", local), Label("peer_node", peer), Label("transport", "tcp")};
      const LinkTraffic& traffic = link.traffic;
      AddSample(tx_bytes, labels, static_cast<double>(traffic.tx_bytes));
      AddSample(rx_bytes, labels, static_cast<double>(traffic.rx_bytes));
      AddSample(tx_messages, labels, static_cast<double>(traffic.tx_messages));
      AddSample(rx_messages, labels, static_cast<double>(traffic.rx_messages));
      AddSample(errors, labels, static_cast<double>(traffic.errors));
      AddSample(retransmits, labels, static_cast<double>(traffic.retransmits));
      AddSample(refused, labels, static_cast<double>(traffic.refused_messages));
      AddSample(checksum_failures, labels, static_cast<double>(traffic.checksum_failures));
      AddSample(seal_failures, labels, static_cast<double>(traffic.seal_failures));
      AddSample(credit_violations, labels, static_cast<double>(traffic.credit_violations));
      AddSample(refused_writes, labels, static_cast<double>(traffic.refused_writes));
      AddSample(up, labels, traffic.up ? 1 : 0);
      if (!link.health) continue;
      const LinkHealth& health = *link.health;
      if (health.rtt > absl::ZeroDuration()) {
        AddSample(rtt, labels, absl::ToDoubleSeconds(health.rtt));
      }
      if (health.data_rtt > absl::ZeroDuration()) {
        AddSample(data_rtt, labels, absl::ToDoubleSeconds(health.data_rtt));
      }
      if (health.bandwidth > 0) AddSample(bandwidth, labels, health.bandwidth);
      auto with = [&labels](const char* name, const char* value) {
        auto extended = labels;
        extended.push_back(Label(name, value));
        return extended;
      };
      AddSample(probes, with("outcome", "ok"), static_cast<double>(health.probes_ok));
      AddSample(probes, with("outcome", "error"), static_cast<double>(health.probes_failed));
      AddSample(flagged, with("reason", "bandwidth"), health.flagged_bandwidth ? 1 : 0);
      AddSample(flagged, with("reason", "rtt"), health.flagged_rtt ? 1 : 0);
      AddSample(peer_up, {Label("local_node", local), Label("peer_node", peer)}, health.up ? 1 : 0);
    }
    auto communicators = Family("baton_communicators", "Communicators this daemon takes part in.",
                                MetricType::Gauge);
    AddSample(communicators, {Label("local_node", local)},
              static_cast<double>(node.communicators().List().size()));
    auto ranks = Family("baton_ranks", "Ranks of local processes in this daemon's communicators.",
                        MetricType::Gauge);
    AddSample(ranks, {Label("local_node", local)}, node.LocalRanks());
    auto channels = Family("baton_submission_channels",
                           "Ranks that submit through a shared-memory channel; the other ranks "
                           "make one gRPC call per operation.",
                           MetricType::Gauge);
    AddSample(channels, {Label("local_node", local)}, node.SubmissionChannels());
    auto completed =
        Family("baton_collectives_completed_total",
               "Collective operations completed since the daemon started.", MetricType::Counter);
    AddSample(completed, {Label("local_node", local)},
              static_cast<double>(node.collectives_completed()));
    auto arena_ops = Family("baton_arena_operations_total",
                            "Operations the ranks of a node ran in their communicator's node "
                            "arena (shared memory, without the daemon), by outcome.",
                            MetricType::Counter);
    auto arena_bytes = Family("baton_arena_bytes_total",
                              "Bytes of the buffers of the node arena's completed operations "
                              "(one rank's).",
                              MetricType::Counter);
    auto arena_time = Family("baton_arena_time_seconds_total",
                             "Time the ranks spent in node arena operations, the mean of the "
                             "local ranks': waiting for peers, and the rest (work).",
                             MetricType::Counter);
    auto arena_phases = Family("baton_arena_local_phases_total",
                               "Operations across nodes whose local phase the node's ranks ran "
                               "in the node arena (the daemon ran the rest, for the node).",
                               MetricType::Counter);
    const ArenaCounts arena = node.communicators().ArenaTotals();
    for (int kind = 0; kind < collective::NodeArena::kCountedKinds; ++kind) {
      const collective::NodeArena::Counters& count = arena[kind];
      // The collectives the arena runs (all but all_to_all), whether used yet or not.
      if (static_cast<collective::Collective>(kind) == collective::Collective::kAllToAll) continue;
      const std::string op(collective::CollectiveName(static_cast<collective::Collective>(kind)));
      const std::vector<prometheus::ClientMetric::Label> labels = {Label("local_node", local),
                                                                   Label("op", op)};
      auto with = [&labels](const char* name, const char* value) {
        auto extended = labels;
        extended.push_back(Label(name, value));
        return extended;
      };
      AddSample(arena_ops, with("outcome", "ok"), static_cast<double>(count.operations));
      AddSample(arena_ops, with("outcome", "error"), static_cast<double>(count.failed));
      AddSample(arena_bytes, labels, static_cast<double>(count.bytes));
      AddSample(arena_phases, labels, static_cast<double>(count.local_phases));
      const uint64_t work_ns = count.busy_ns - std::min(count.busy_ns, count.wait_ns);
      AddSample(arena_time, with("phase", "wait"), static_cast<double>(count.wait_ns) * 1e-9);
      AddSample(arena_time, with("phase", "work"), static_cast<double>(work_ns) * 1e-9);
    }
    auto refused_total =
        Family("baton_data_refused_messages_total",
               "Messages dropped because their sender is not a daemon of the communicator they "
               "claim, from any peer (also those in none of this daemon's plans).",
               MetricType::Counter);
    AddSample(refused_total, {Label("local_node", local)},
              static_cast<double>(node.RefusedMessages()));
    auto sessions =
        Family("baton_client_sessions", "Client sessions open on this daemon.", MetricType::Gauge);
    AddSample(sessions, {Label("local_node", local)}, node.sessions().Count());
    for (auto* family : {&tx_bytes,      &rx_bytes,          &tx_messages,    &rx_messages,
                         &errors,        &retransmits,       &refused,        &checksum_failures,
                         &seal_failures, &credit_violations, &refused_writes, &up,
                         &rtt,           &data_rtt,          &bandwidth,      &probes,
                         &flagged,       &peer_up,           &communicators,  &ranks,
                         &channels,      &completed,         &arena_ops,      &arena_bytes,
                         &arena_time,    &arena_phases,      &refused_total,  &sessions}) {
      families.push_back(std::move(*family));
    }
  }

  void AppendProgress(const transport::ProgressEngine& progress,
                      std::vector<prometheus::MetricFamily>& families) const {
    auto waits = Family("baton_progress_waits_total",
                        "Waits of the threads that drive the data plane while an operation waits, "
                        "by how they ended: work found while looking (spin), work found after "
                        "sleeping on readiness (sleep), the completion came another way (woken), "
                        "nothing within the wait's slice (timeout).",
                        prometheus::MetricType::Counter);
    const transport::ProgressEngine::Stats stats = progress.stats();
    for (const auto& [ended, count] :
         {std::pair{"spin", stats.spun}, std::pair{"sleep", stats.slept},
          std::pair{"woken", stats.woken}, std::pair{"timeout", stats.timed_out}}) {
      AddSample(waits, {Label("local_node", node_name_), Label("ended", ended)},
                static_cast<double>(count));
    }
    families.push_back(std::move(waits));
  }

  // The standard process metrics (as Prometheus' client libraries export them), from /proc.
  void AppendProcess(std::vector<prometheus::MetricFamily>& families) const {
    using prometheus::MetricType;
    const std::vector<prometheus::ClientMetric::Label> labels = {Label("local_node", node_name_)};
    auto build = Family("baton_build_info", "Always 1; the daemon's version.", MetricType::Gauge);
    AddSample(build, {Label("local_node", node_name_), Label("version", version_)}, 1);
    families.push_back(std::move(build));
    const std::optional<ProcessSample> process = SampleProcess();
    if (!process) return;
    auto cpu =
        Family("process_cpu_seconds_total", "User and system CPU time spent.", MetricType::Counter);
    AddSample(cpu, labels, process->cpu_seconds);
    auto rss = Family("process_resident_memory_bytes", "Resident memory size.", MetricType::Gauge);
    AddSample(rss, labels, process->resident_bytes);
    auto vsize = Family("process_virtual_memory_bytes", "Virtual memory size.", MetricType::Gauge);
    AddSample(vsize, labels, process->virtual_bytes);
    auto fds = Family("process_open_fds", "Open file descriptors.", MetricType::Gauge);
    AddSample(fds, labels, process->open_fds);
    auto max_fds = Family("process_max_fds", "Limit on open file descriptors.", MetricType::Gauge);
    AddSample(max_fds, labels, process->max_fds);
    auto start = Family("process_start_time_seconds",
                        "Start time of the process since the Unix epoch.", MetricType::Gauge);
    AddSample(start, labels, process->start_time_seconds);
    for (auto* family : {&cpu, &rss, &vsize, &fds, &max_fds, &start}) {
      families.push_back(std::move(*family));
    }
  }

  // One operation kind and algorithm's series, looked up once: building the label sets and
  // finding them in the families on every operation cost more than the rest of its accounting.
  struct OpSeries {
    prometheus::Histogram* ok;
    prometheus::Histogram* error;
    prometheus::Counter* transport;
    prometheus::Counter* reduce;
    prometheus::Counter* dispatch;
  };

  const OpSeries& SeriesLocked(collective::Collective kind, const std::string& algorithm_in)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string algorithm = algorithm_in.empty() ? "none" : algorithm_in;
    auto key = std::make_pair(static_cast<int>(kind), algorithm);
    if (auto it = series_.find(key); it != series_.end()) return it->second;
    const std::string op(collective::CollectiveName(kind));
    // Both outcomes' series exist from the first operation on, so that the first failure is a
    // change from 0 that rate() and increase() see.
    auto histogram = [&](const char* outcome) {
      return &latency_.Add(
          {{"local_node", node_name_}, {"op", op}, {"algorithm", algorithm}, {"outcome", outcome}},
          LatencyBuckets());
    };
    auto phase = [&](const char* name) {
      return &phases_.Add(
          {{"local_node", node_name_}, {"op", op}, {"algorithm", algorithm}, {"phase", name}});
    };
    OpSeries series{histogram("ok"), histogram("error"), phase("transport"), phase("reduce"),
                    phase("dispatch")};
    return series_.emplace(std::move(key), series).first->second;
  }

  // An operation's series appears with its first staged bytes.
  prometheus::Counter& StagedLocked(collective::Collective kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ByOpLocked(staged_, staged_series_, kind);
  }
  // The series of `family` for operation `kind`, made on first use and kept in `series`.
  prometheus::Counter& ByOpLocked(prometheus::Family<prometheus::Counter>& family,
                                  absl::flat_hash_map<int, prometheus::Counter*>& series,
                                  collective::Collective kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    prometheus::Counter*& counter = series[static_cast<int>(kind)];
    if (counter == nullptr) {
      const std::string op(collective::CollectiveName(kind));
      counter = &family.Add({{"local_node", node_name_}, {"op", op}});
    }
    return *counter;
  }

  const std::string node_name_;
  const std::string version_;
  prometheus::Registry registry_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& phases_;
  prometheus::Family<prometheus::Counter>& staged_;
  prometheus::Family<prometheus::Counter>& unregistered_;
  absl::Mutex mu_;
  Node* node_ ABSL_GUARDED_BY(mu_) = nullptr;
  const transport::ProgressEngine* progress_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<std::pair<int, std::string>, OpSeries> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, prometheus::Counter*> staged_series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, prometheus::Counter*> unregistered_series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Metrics> Metrics::Create(const std::string& node_name, const std::string& version) {
  return std::make_unique<PrometheusMetrics>(node_name, version);
}

}  // namespace baton::daemon
