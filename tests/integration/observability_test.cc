// What an operator sees of a running cluster: link probe gauges, retransmit counters, the time
// split of collectives, process metrics, GetStatus links, and series of departed peers going
// away after peer_linger.

#include <atomic>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "baton/v1/baton.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

std::map<std::string, double> Scrape(const TestCluster& cluster, int daemon) {
  return testing::ScrapeMetrics(cluster.daemons()[daemon].metrics_address);
}

std::string LinkLabels(int peer) {
  return absl::StrCat("{local_node=\"node-0\",peer_node=\"node-", peer, "\",transport=\"tcp\"}");
}

// Polls node-0's metrics until `ready` holds for them, or 60 s pass.
std::map<std::string, double> ScrapeUntil(
    const TestCluster& cluster,
    const std::function<bool(const std::map<std::string, double>&)>& ready) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::map<std::string, double> samples = Scrape(cluster, 0);
  while (!ready(samples) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    samples = Scrape(cluster, 0);
  }
  return samples;
}

// One operation's series on node-0, summed over its algorithms: the phases of
// baton_collective_time_seconds_total, and baton_collective_duration_seconds' sum (ok and error)
// and counts.
struct PhaseSplit {
  double transport = 0, reduce = 0, dispatch = 0, total = 0;
  double ok_count = 0, error_count = 0;
};
PhaseSplit Split(const std::map<std::string, double>& samples, const std::string& op) {
  PhaseSplit split;
  const std::string of_op = absl::StrCat("local_node=\"node-0\",op=\"", op, "\",");
  for (const auto& [series, value] : samples) {
    if (series.find(of_op) == std::string::npos) continue;
    auto is = [&series](absl::string_view name, absl::string_view label) {
      return absl::StartsWith(series, absl::StrCat(name, "{")) &&
             absl::EndsWith(series, absl::StrCat(label, "}"));
    };
    if (is("baton_collective_time_seconds_total", "phase=\"transport\"")) split.transport += value;
    if (is("baton_collective_time_seconds_total", "phase=\"reduce\"")) split.reduce += value;
    if (is("baton_collective_time_seconds_total", "phase=\"dispatch\"")) split.dispatch += value;
    if (is("baton_collective_duration_seconds_sum", "")) split.total += value;
    if (is("baton_collective_duration_seconds_count", "outcome=\"ok\"")) split.ok_count += value;
    if (is("baton_collective_duration_seconds_count", "outcome=\"error\"")) {
      split.error_count += value;
    }
  }
  return split;
}

TEST(ObservabilityTest, ProbesTimeSplitStatusAndDepartedPeers) {
  constexpr int kDaemons = 4;
  // With payload checksums, so that the daemons' data plane runs them end to end.
  TestCluster cluster(kDaemons,
                      {"--probe-interval=200ms", "--peer-linger=2s", "--data-checksum=true"});
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();

  // One rank per daemon runs five 4 MiB all-reduces, a 4 MiB broadcast and a barrier, then keeps
  // its communicator until told.
  constexpr int kAllReduces = 5;
  absl::Duration all_reduces_took;  // as rank 0, on node-0, saw them
  absl::Notification checked;
  std::atomic<int> done{0};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kDaemons; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
      auto comm = client->Join(id, kDaemons, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data(1 << 20, 1.0f);
      // The ring, whatever the tuner would pick for the links measured so far: the checks below
      // read its series.
      CallOptions ring;
      ring.algorithm = Algorithm::kRing;
      const absl::Time start = absl::Now();
      for (int i = 0; i < kAllReduces; ++i) {
        ASSERT_TRUE((*comm)
                        ->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                    ReduceOp::kSum, ring)
                        .ok());
      }
      if (rank == 0) all_reduces_took = absl::Now() - start;
      // Operations that reduce nothing: a broadcast and a barrier.
      ASSERT_TRUE((*comm)
                      ->Broadcast(data.data(), data.data(), data.size(), DataType::kFloat32,
                                  /*root=*/1)
                      .ok());
      ASSERT_TRUE((*comm)->Barrier().ok());
      ++done;
      checked.WaitForNotificationWithTimeout(absl::Seconds(120));
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (done.load() < kDaemons && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_EQ(done.load(), kDaemons);

  // Probes of every peer: RTT, bandwidth, rounds, up; flags exported for both reasons.
  std::map<std::string, double> samples = ScrapeUntil(cluster, [](const auto& s) {
    for (int peer = 1; peer < kDaemons; ++peer) {
      if (!s.contains("baton_link_bandwidth_bytes_per_second" + LinkLabels(peer))) return false;
    }
    return true;
  });
  for (int peer = 1; peer < kDaemons; ++peer) {
    SCOPED_TRACE(peer);
    const std::string labels = LinkLabels(peer);
    EXPECT_GT(samples["baton_link_rtt_seconds" + labels], 0);
    EXPECT_LT(samples["baton_link_rtt_seconds" + labels], 5);
    EXPECT_GT(samples["baton_link_data_rtt_seconds" + labels], 0);
    EXPECT_LT(samples["baton_link_data_rtt_seconds" + labels], 5);
    EXPECT_GT(samples["baton_link_bandwidth_bytes_per_second" + labels], 0);
    EXPECT_TRUE(samples.contains("baton_link_retransmits_total" + labels));
    ASSERT_TRUE(samples.contains("baton_link_checksum_failures_total" + labels));
    EXPECT_EQ(samples["baton_link_checksum_failures_total" + labels], 0);
    // Protocol refusals, none between honest daemons.
    ASSERT_TRUE(samples.contains("baton_link_credit_violations_total" + labels));
    EXPECT_EQ(samples["baton_link_credit_violations_total" + labels], 0);
    ASSERT_TRUE(samples.contains("baton_link_refused_writes_total" + labels));
    EXPECT_EQ(samples["baton_link_refused_writes_total" + labels], 0);
    const std::string with = labels.substr(0, labels.size() - 1);
    EXPECT_GE(samples[absl::StrCat("baton_link_probes_total", with, ",outcome=\"ok\"}")], 1);
    EXPECT_TRUE(
        samples.contains(absl::StrCat("baton_link_probes_total", with, ",outcome=\"error\"}")));
    EXPECT_TRUE(
        samples.contains(absl::StrCat("baton_link_flagged", with, ",reason=\"bandwidth\"}")));
    EXPECT_TRUE(samples.contains(absl::StrCat("baton_link_flagged", with, ",reason=\"rtt\"}")));
    EXPECT_EQ(
        samples[absl::StrCat("baton_peer_up{local_node=\"node-0\",peer_node=\"node-", peer, "\"}")],
        1);
  }
  // Every byte the operations moved was in memory registered with the data plane: the rank's
  // buffer, mapped and registered once, and the daemon's scratch.
  for (const auto& [name, value] : samples) {
    if (name.starts_with("baton_data_unregistered_bytes_total")) {
      EXPECT_EQ(value, 0) << name;
    }
  }
  EXPECT_EQ(samples["baton_ranks{local_node=\"node-0\"}"], 1);
  EXPECT_EQ(samples["baton_submission_channels{local_node=\"node-0\"}"], 1);
  EXPECT_EQ(samples["baton_communicators{local_node=\"node-0\"}"], 1);
  EXPECT_EQ(samples["baton_build_info{local_node=\"node-0\",version=\"0.1.0\"}"], 1);
  EXPECT_GT(samples["process_resident_memory_bytes{local_node=\"node-0\"}"], 1 << 20);
  EXPECT_GT(samples["process_open_fds{local_node=\"node-0\"}"], 3);
  EXPECT_GE(samples["process_max_fds{local_node=\"node-0\"}"],
            samples["process_open_fds{local_node=\"node-0\"}"]);
  EXPECT_GT(samples["process_start_time_seconds{local_node=\"node-0\"}"], 1.6e9);

  // The time split (docs/metrics.md): the phases add up to the operations' total time; a 4-daemon
  // all-reduce spends some of it on the transport, some reducing and some dispatching (setup,
  // the signature check's bookkeeping: never nothing), and all of it within the time rank 0's
  // calls took. Dispatch is the rest of the total, clamped at 0 per operation, so a phase
  // counted twice or left out shows as a sum off the total or as no dispatch at all.
  const PhaseSplit all_reduce = Split(samples, "all_reduce");
  EXPECT_EQ(all_reduce.ok_count, kAllReduces);
  EXPECT_EQ(all_reduce.error_count, 0);
  EXPECT_GT(all_reduce.transport, 0);
  EXPECT_GT(all_reduce.reduce, 0);
  EXPECT_GT(all_reduce.dispatch, 0);
  EXPECT_NEAR(all_reduce.transport + all_reduce.reduce + all_reduce.dispatch, all_reduce.total,
              1e-6 + all_reduce.total * 1e-6);
  EXPECT_LE(all_reduce.total, absl::ToDoubleSeconds(all_reduces_took) + 1e-3)
      << "node-0 counted more time than rank 0's calls took";
  // A broadcast and a barrier reduce nothing: no reduce time at all, the rest split as above.
  for (const char* op : {"broadcast", "barrier"}) {
    SCOPED_TRACE(op);
    const PhaseSplit split = Split(samples, op);
    EXPECT_EQ(split.ok_count, 1);
    EXPECT_EQ(split.reduce, 0);
    EXPECT_GT(split.transport, 0);
    EXPECT_GT(split.dispatch, 0);
    EXPECT_NEAR(split.transport + split.dispatch, split.total, 1e-6 + split.total * 1e-6);
  }
  // The failure series exists, at 0, from the first operation on.
  ASSERT_TRUE(samples.contains(
      "baton_collective_duration_seconds_count{algorithm=\"ring\",local_node=\"node-0\",op=\"all_"
      "reduce\",outcome=\"error\"}"));

  // GetStatus with a fresh probe round: three links with measured figures and node names.
  auto stub = v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster.daemons()[0].socket,
                                                      grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GetStatusRequest request;
  request.set_probe_links(true);
  v1::DaemonStatus status;
  ASSERT_TRUE(stub->GetStatus(&context, request, &status).ok());
  ASSERT_EQ(status.links_size(), kDaemons - 1);
  for (const v1::LinkStatus& link : status.links()) {
    SCOPED_TRACE(link.peer_node());
    EXPECT_TRUE(link.peer_up());
    EXPECT_GT(link.rtt_seconds(), 0);
    EXPECT_GT(link.data_rtt_seconds(), 0);
    EXPECT_GT(link.bandwidth_bytes_per_second(), 0);
    EXPECT_EQ(link.transport(), "tcp");
    EXPECT_FALSE(link.peer_address().empty());
    EXPECT_EQ(link.peer_node().substr(0, 5), "node-");
  }

  // The ranks leave; after peer_linger (2 s) node-0 exports no series of its former peers.
  checked.Notify();
  for (auto& t : ranks) t.join();
  samples = ScrapeUntil(cluster, [](const auto& s) {
    for (const auto& [series, value] : s) {
      if (series.find("peer_node=") != std::string::npos) return false;
    }
    return true;
  });
  for (const auto& [series, value] : samples) {
    EXPECT_EQ(series.find("peer_node="), std::string::npos) << series;
  }
  EXPECT_EQ(samples["baton_communicators{local_node=\"node-0\"}"], 0);
  EXPECT_EQ(samples["baton_ranks{local_node=\"node-0\"}"], 0);
  EXPECT_EQ(samples["baton_submission_channels{local_node=\"node-0\"}"], 0);
}

TEST(ObservabilityTest, ConfiguredPeersAreProbedWithoutAnyJob) {
  // Start two daemons, then a third told to probe them: it learns their names from the probes.
  TestCluster cluster(2, {"--probe-interval=200ms"});
  ASSERT_TRUE(cluster.ok());
  TestCluster prober(1, {"--probe-interval=200ms",
                         absl::StrCat("--probe-peers=", cluster.daemons()[0].peer_address, ",",
                                      cluster.daemons()[1].peer_address)});
  ASSERT_TRUE(prober.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::map<std::string, double> samples;
  // Both clusters name their daemons node-0, node-1: the prober's peers are node-0 and node-1.
  auto has_both = [](const std::map<std::string, double>& s) {
    return s.contains("baton_peer_up{local_node=\"node-0\",peer_node=\"node-0\"}") &&
           s.contains("baton_peer_up{local_node=\"node-0\",peer_node=\"node-1\"}");
  };
  while (absl::Now() < deadline) {
    samples = Scrape(prober, 0);
    if (has_both(samples)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(has_both(samples));
  EXPECT_EQ(samples["baton_peer_up{local_node=\"node-0\",peer_node=\"node-1\"}"], 1);
  // Stop one peer: it turns down, and stays known (configured peers never linger out).
  ASSERT_TRUE(client::StopProcess(cluster.daemons()[1].pid, absl::Seconds(10)));
  while (absl::Now() < deadline) {
    samples = Scrape(prober, 0);
    if (samples["baton_peer_up{local_node=\"node-0\",peer_node=\"node-1\"}"] == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(samples["baton_peer_up{local_node=\"node-0\",peer_node=\"node-1\"}"], 0);
  EXPECT_GE(samples["baton_link_probes_total{local_node=\"node-0\",peer_node=\"node-1\",transport="
                    "\"tcp\",outcome=\"error\"}"],
            1);
  EXPECT_EQ(samples["baton_peer_up{local_node=\"node-0\",peer_node=\"node-0\"}"], 1);
}

}  // namespace
}  // namespace baton
