// baton: the command-line tool for users and operators.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "baton/v1/baton.grpc.pb.h"
#include "client/cli/bench.h"
#include "client/lib/absl_interop.h"
#include "client/lib/daemon_status.h"
#include "client/local_cluster.h"
#include "collective/registry.h"
#include "common/options.h"
#include "common/version.h"
#include "grpcpp/grpcpp.h"
#include "topology/discovery.h"
#include "topology/graph_json.h"
#include "topology/paths.h"

namespace {

constexpr char kUsage[] = R"(baton - command-line tool for Baton clusters

Usage: baton <command> [options]

Commands:
  local up|down|status   start, stop or show a development cluster of daemons on this machine
  dev-certs              write a throwaway CA and certificates for daemons' mutual TLS (testing)
  bench                  run an nccl-tests-style collective benchmark over a running cluster
  status                 show one daemon's state: peers, links, communicators
  links                  show one daemon's links: bytes, retransmits, RTT, bandwidth, flags
  topo                   show a node's GPUs, NICs and the path types between them
  comm-id                print a new communicator id rooted at a daemon

Run `baton <command> --help` for a command's options; `baton --version` prints the version.
)";

std::string DefaultLocalDir() {
  if (const char* env = std::getenv("BATON_LOCAL_DIR"); env != nullptr && *env != '\0') return env;
  return absl::StrCat("/tmp/baton-local-", getuid());
}

int Fail(absl::string_view command, const absl::Status& status) {
  std::cerr << "baton " << command << ": " << status.message() << "\n";
  return 1;
}

// Parses flags into `options`, handling --help. Returns -1 to continue, else an exit code.
int ParseOrHelp(baton::OptionSet& options, absl::string_view usage, int argc, char** argv,
                int first, std::vector<std::string>* positional) {
  if (baton::WantsHelp(argc, argv, first)) {
    std::cout << usage << "\nOptions:\n" << options.Help();
    return 0;
  }
  absl::StatusOr<std::vector<std::string>> parsed = options.ParseFlags(argc, argv, first);
  if (!parsed.ok()) {
    std::cerr << "baton: " << parsed.status().message() << "\n";
    return 2;
  }
  if (positional != nullptr) {
    *positional = std::move(*parsed);
  } else if (!parsed->empty()) {
    std::cerr << "baton: unexpected argument '" << parsed->front() << "'\n";
    return 2;
  }
  return -1;
}

int Local(int argc, char** argv) {
  std::string dir = DefaultLocalDir();
  int64_t nodes = 4;
  std::string batond = baton::client::DefaultBatondPath();
  std::string daemon_args;
  bool tls = true;
  baton::OptionSet options;
  options.AddString("dir", &dir, "directory for sockets, logs and cluster.txt ($BATON_LOCAL_DIR)");
  options.AddInt("nodes", &nodes, "number of daemons (local up)");
  options.AddString("batond", &batond, "batond binary to start");
  options.AddString("daemon_args", &daemon_args,
                    "extra flags for every daemon, space-separated (e.g. \"--op-timeout=10s\")");
  options.AddBool("tls", &tls,
                  "mutual TLS between the daemons, with a throwaway CA made for this cluster "
                  "(certificates in <dir>/tls); --tls=false runs them unauthenticated");
  std::vector<std::string> positional;
  const int code =
      ParseOrHelp(options,
                  "Usage: baton local up|down|status [options]\n\n"
                  "Starts, stops or shows a cluster of batond daemons on this machine,\n"
                  "each with its own unix socket, peer, data and metrics port (loopback).",
                  argc, argv, 2, &positional);
  if (code >= 0) return code;
  if (positional.size() != 1) {
    std::cerr << "baton local: expected one of up, down, status\n";
    return 2;
  }
  const std::string& action = positional.front();
  if (action == "up") {
    baton::client::LocalClusterOptions cluster;
    cluster.dir = dir;
    cluster.nodes = static_cast<int>(nodes);
    cluster.batond = batond;
    cluster.tls = tls;
    for (absl::string_view arg : absl::StrSplit(daemon_args, ' ', absl::SkipEmpty())) {
      cluster.extra_args.emplace_back(arg);
    }
    absl::StatusOr<std::vector<baton::client::LocalDaemon>> daemons =
        baton::client::StartLocalCluster(cluster);
    if (!daemons.ok()) return Fail("local up", daemons.status());
    std::printf("started %zu daemons in %s (%s)\n", daemons->size(), dir.c_str(),
                tls ? "mutual TLS, certificates in <dir>/tls" : "insecure: no TLS");
    for (const auto& d : *daemons) {
      std::printf("  %-8s pid %-7d socket %s  peer %s  metrics http://%s/metrics\n",
                  d.node_name.c_str(), d.pid, d.socket.c_str(), d.peer_address.c_str(),
                  d.metrics_address.c_str());
    }
    return 0;
  }
  if (action == "down") {
    absl::Status status = baton::client::StopLocalCluster(dir);
    if (absl::IsNotFound(status)) {
      std::printf("no local cluster in %s\n", dir.c_str());
      return 0;
    }
    if (!status.ok()) return Fail("local down", status);
    std::printf("stopped the local cluster in %s (logs kept there)\n", dir.c_str());
    return 0;
  }
  if (action == "status") {
    absl::StatusOr<std::vector<baton::client::LocalDaemon>> daemons =
        baton::client::ReadLocalCluster(dir);
    if (!daemons.ok()) return Fail("local status", daemons.status());
    int running = 0;
    for (const auto& d : *daemons) {
      const bool up = baton::client::IsRunning(d.pid);
      running += up;
      std::printf("  %-8s pid %-7d %-8s socket %s  log %s\n", d.node_name.c_str(), d.pid,
                  up ? "running" : "STOPPED", d.socket.c_str(), d.log.c_str());
    }
    std::printf("%d of %zu daemons running\n", running, daemons->size());
    return running == static_cast<int>(daemons->size()) ? 0 : 1;
  }
  std::cerr << "baton local: unknown action '" << action << "' (up, down, status)\n";
  return 2;
}

// Accepts nccl-tests' short flags by rewriting them to their long names.
std::vector<std::string> ExpandShortFlags(int argc, char** argv, int first) {
  static const std::vector<std::pair<std::string, std::string>> kShort = {
      {"-b", "--minbytes"}, {"-e", "--maxbytes"},     {"-f", "--stepfactor"},
      {"-n", "--iters"},    {"-w", "--warmup-iters"}, {"-c", "--check"},
      {"-d", "--datatype"}, {"-o", "--op"},           {"-r", "--root"}};
  std::vector<std::string> args = {argv[0]};
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    for (const auto& [short_flag, long_flag] : kShort) {
      if (arg == short_flag) arg = long_flag;
    }
    args.push_back(arg);
  }
  return args;
}

// "64M" -> 67108864; plain numbers are bytes.
absl::StatusOr<int64_t> ParseSize(std::string text) {
  int64_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        multiplier = 1 << 10;
        break;
      case 'M':
      case 'm':
        multiplier = 1 << 20;
        break;
      case 'G':
      case 'g':
        multiplier = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) text.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size (e.g. 8, 64K, 1M)"));
  }
  return value * multiplier;
}

int Bench(int argc, char** argv, bool worker) {
  baton::client::BenchOptions bench;
  std::string min_bytes = "8", max_bytes = "64M", cluster = DefaultLocalDir(), sockets;
  std::string socket, comm_id;
  int64_t world_size = 0, rank = 0, check = 1;
  baton::OptionSet options;
  options.AddString("minbytes", &min_bytes, "-b: smallest message size (K, M, G suffixes)");
  options.AddString("maxbytes", &max_bytes, "-e: largest message size");
  options.AddInt("stepfactor", &bench.step_factor, "-f: multiply the size by this each step");
  options.AddInt("iters", &bench.iters, "-n: timed iterations per size");
  options.AddInt("warmup_iters", &bench.warmup_iters, "-w: untimed iterations per size");
  options.AddInt("check", &check, "-c: check every element of the result (1) or not (0)");
  options.AddString("op", &bench.op,
                    "-o: all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, "
                    "barrier, gather, scatter, all_to_all_v (rank i sends (i + j) % 3 + 1 shares "
                    "to rank j), sendrecv (send to rank + 1, receive from rank - 1, in a group)");
  options.AddString("datatype", &bench.data_type,
                    "-d: int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, "
                    "float64, fp8_e4m3, fp8_e5m2");
  options.AddString("redop", &bench.reduce_op, "sum, prod, min, max, avg");
  options.AddInt("root", &bench.root, "-r: root rank of broadcast, reduce, gather and scatter");
  options.AddString(
      "algorithm", &bench.algorithm,
      "an algorithm of the collective, as listed below (default: the daemons' choice, "
      "\"auto\"); a list such as auto,ring,tree,doubling compares them in one run");
  options.AddBool("explain", &bench.explain,
                  "add the tuner's predicted time of each algorithm and its choice per size");
  options.AddBool("median", &bench.median,
                  "report each rank's median iteration time instead of the mean (comparisons "
                  "always use medians)");
  options.AddBool("barrier", &bench.barrier,
                  "start every iteration after an untimed barrier, as Gloo's and MPI's benchmarks "
                  "do (always so when comparing algorithms); else iterations run back to back");
  options.AddBool("in_place", &bench.in_place,
                  "one buffer for input and result (all_reduce, broadcast, reduce, all_to_all), "
                  "the input put back before every iteration, untimed");
  options.AddInt("ranks_per_daemon", &bench.ranks_per_daemon, "ranks launched per daemon");
  options.AddString("cluster", &cluster, "local cluster directory whose daemons to use");
  options.AddString("sockets", &sockets, "comma-separated daemon sockets (instead of --cluster)");
  options.AddInt("timeout_ms", &bench.timeout_ms, "per-operation timeout in milliseconds");
  if (worker) {
    options.AddString("socket", &socket, "daemon socket of this rank");
    options.AddString("comm_id", &comm_id, "communicator id");
    options.AddInt("world_size", &world_size, "ranks in total");
    options.AddInt("rank", &rank, "this rank");
  }
  std::vector<std::string> expanded = ExpandShortFlags(argc, argv, 2);
  std::vector<const char*> args;
  args.reserve(expanded.size());
  for (const std::string& arg : expanded) args.push_back(arg.c_str());
  const std::string usage = absl::StrCat(
      "Usage: baton bench [-o all_reduce] [-d float32] [--redop sum] [-r 0] [-b 8] [-e 64M]\n"
      "                   [-f 2] [-n 20] [-w 5] [-c 1] [--ranks-per-daemon 2] [--explain] "
      "[--median]\n"
      "                   [--barrier] [--in-place] [--cluster DIR | --sockets A,B,...]\n\n"
      "Runs one collective over every daemon of a running cluster, launching --ranks-per-daemon\n"
      "rank processes on each, and prints per size the time, algbw = size / time and busbw =\n"
      "algbw * factor (nccl-tests: 2(n-1)/n for all_reduce; (n-1)/n for reduce_scatter,\n"
      "all_gather, all_to_all, gather, scatter and all_to_all_v, whose size is the largest\n"
      "buffer; 1 for broadcast, reduce and sendrecv), and how many elements of the checked\n"
      "result were wrong. all_to_all_v's count column is the elements of one share.\n\n"
      "Algorithms (--algorithm) of each collective, the first its default on one daemon\n"
      "(collective/registry.h):\n",
      baton::collective::DescribeImplementations());
  const int code = ParseOrHelp(options, usage, static_cast<int>(args.size()),
                               const_cast<char**>(args.data()), 1, nullptr);
  if (code >= 0) return code;
  bench.check = check != 0;
  absl::StatusOr<int64_t> min = ParseSize(min_bytes);
  absl::StatusOr<int64_t> max = ParseSize(max_bytes);
  if (!min.ok()) return Fail("bench", min.status());
  if (!max.ok()) return Fail("bench", max.status());
  bench.min_bytes = *min;
  bench.max_bytes = *max;
  if (worker) {
    absl::Status status = baton::client::RunBenchRank(
        bench, socket, comm_id, static_cast<int>(world_size), static_cast<int>(rank));
    if (!status.ok()) {
      std::cerr << "baton bench: rank " << rank << ": " << status << "\n";
      return 1;
    }
    return 0;
  }
  if (!sockets.empty()) {
    bench.sockets = absl::StrSplit(sockets, ',', absl::SkipEmpty());
  } else {
    absl::StatusOr<std::vector<baton::client::LocalDaemon>> daemons =
        baton::client::ReadLocalCluster(cluster);
    if (!daemons.ok()) {
      return Fail("bench", absl::NotFoundError(absl::StrCat(
                               daemons.status().message(),
                               "; start one with `baton local up`, or pass --sockets")));
    }
    for (const auto& d : *daemons) bench.sockets.push_back(d.socket);
  }
  absl::Status status = baton::client::RunBench(bench);
  if (!status.ok()) return Fail("bench", status);
  return 0;
}

// The daemon's GetStatus answer; with `probe_links`, after a fresh round of link probes.
absl::StatusOr<baton::v1::DaemonStatus> FetchStatus(const std::string& socket, bool probe_links) {
  // A probe round takes at most a few seconds per unreachable peer.
  return baton::core::FetchDaemonStatus(socket, probe_links,
                                        probe_links ? absl::Seconds(60) : absl::Seconds(5));
}

std::string PeerLabel(const baton::v1::LinkStatus& link) {
  if (!link.peer_node().empty()) return link.peer_node();
  return link.peer_address().empty() ? link.peer() : link.peer_address();
}

// 1536 -> "1.5 KiB".
std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f B", bytes)
                   : absl::StrFormat("%.1f %s", bytes, units[unit]);
}

int Status(int argc, char** argv) {
  std::string socket = baton::Client::DefaultSocketPath();
  bool json = false;
  baton::OptionSet options;
  options.AddString("socket", &socket, "daemon socket ($BATON_SOCKET)");
  options.AddBool("json", &json, "print the daemon's status as JSON");
  const int code = ParseOrHelp(options,
                               "Usage: baton status [--socket PATH] [--json]\n\n"
                               "Shows one daemon: its addresses, sessions, communicators, and its "
                               "peers (up or down).",
                               argc, argv, 2, nullptr);
  if (code >= 0) return code;
  absl::StatusOr<baton::v1::DaemonStatus> fetched = FetchStatus(socket, /*probe_links=*/false);
  if (!fetched.ok()) return Fail("status", fetched.status());
  const baton::v1::DaemonStatus& status = *fetched;
  if (json) {
    absl::StatusOr<std::string> text = baton::core::ToJson(status);
    if (!text.ok()) return Fail("status", text.status());
    std::printf("%s", text->c_str());
    return 0;
  }
  std::printf("node %s (batond %s, pid %lld, up %.0f s)\n", status.node_name().c_str(),
              status.version().c_str(), static_cast<long long>(status.pid()),
              static_cast<double>(status.uptime_ms()) / 1000.0);
  std::printf("  peer %s  data %s  metrics %s  sessions %d\n", status.peer_address().c_str(),
              status.data_address().c_str(), status.metrics_address().c_str(), status.sessions());
  std::printf("communicators: %d\n", status.communicators_size());
  for (const auto& c : status.communicators()) {
    std::printf("  %016llx  world %d  daemons %d  local ranks %d  ops %llu  %s\n",
                static_cast<unsigned long long>(c.comm_tag()), c.world_size(), c.daemon_count(),
                c.local_ranks_size(), static_cast<unsigned long long>(c.ops_completed()),
                c.state().c_str());
  }
  int up = 0;
  for (const auto& l : status.links()) up += l.peer_up() ? 1 : 0;
  std::printf("peers: %d (%d up, %d down or not yet probed)\n", status.links_size(), up,
              status.links_size() - up);
  for (const auto& l : status.links()) {
    std::printf("  %-16s %-22s %-5s tx %s  rx %s  errors %llu%s\n", PeerLabel(l).c_str(),
                l.peer_address().c_str(), l.peer_up() ? "up" : "down",
                HumanBytes(static_cast<double>(l.tx_bytes())).c_str(),
                HumanBytes(static_cast<double>(l.rx_bytes())).c_str(),
                static_cast<unsigned long long>(l.errors()),
                l.flagged_bandwidth() || l.flagged_rtt() ? "  FLAGGED (see baton links)" : "");
  }
  return 0;
}

int Links(int argc, char** argv) {
  std::string socket = baton::Client::DefaultSocketPath();
  bool json = false;
  bool probe = false;
  baton::OptionSet options;
  options.AddString("socket", &socket, "daemon socket ($BATON_SOCKET)");
  options.AddBool("json", &json, "print the links as JSON");
  options.AddBool("probe", &probe, "probe every link now instead of showing the last round");
  const int code = ParseOrHelp(
      options,
      "Usage: baton links [--socket PATH] [--json] [--probe]\n\n"
      "Shows the daemon's link to every peer daemon: data-plane bytes, errors and TCP\n"
      "retransmits, and the background probes' RTT and bandwidth (medians of the recent\n"
      "probes). A link is FLAGGED when its bandwidth is below half the median of this\n"
      "daemon's links, or its RTT above three times theirs (and 1 ms more); at least three\n"
      "probed links are needed to compare.",
      argc, argv, 2, nullptr);
  if (code >= 0) return code;
  absl::StatusOr<baton::v1::DaemonStatus> fetched = FetchStatus(socket, probe);
  if (!fetched.ok()) return Fail("links", fetched.status());
  if (json) {
    baton::v1::DaemonStatus links;
    links.set_node_name(fetched->node_name());
    *links.mutable_links() = fetched->links();
    absl::StatusOr<std::string> text = baton::core::ToJson(links);
    if (!text.ok()) return Fail("links", text.status());
    std::printf("%s", text->c_str());
    return 0;
  }
  std::printf("node %s: %d links\n", fetched->node_name().c_str(), fetched->links_size());
  std::printf("%-16s %-22s %-5s %11s %11s %7s %6s %10s %10s %12s  %s\n", "peer", "peer address",
              "state", "tx", "rx", "retrans", "errors", "rtt", "data rtt", "bandwidth", "flags");
  for (const auto& l : fetched->links()) {
    std::string flags;
    if (l.flagged_bandwidth()) flags += "FLAGGED:bandwidth ";
    if (l.flagged_rtt()) flags += "FLAGGED:rtt ";
    if (!l.last_probe_error().empty()) flags += "probe failed: " + l.last_probe_error();
    auto micros = [](double seconds) {
      return seconds > 0 ? absl::StrFormat("%.0f us", seconds * 1e6) : std::string("-");
    };
    const std::string rtt = micros(l.rtt_seconds());
    const std::string data_rtt = micros(l.data_rtt_seconds());
    const std::string bandwidth =
        l.bandwidth_bytes_per_second() > 0
            ? absl::StrFormat("%.1f MB/s", l.bandwidth_bytes_per_second() / 1e6)
            : std::string("-");
    std::printf("%-16s %-22s %-5s %11s %11s %7llu %6llu %10s %10s %12s  %s\n", PeerLabel(l).c_str(),
                l.peer_address().c_str(), l.peer_up() ? "up" : "down",
                HumanBytes(static_cast<double>(l.tx_bytes())).c_str(),
                HumanBytes(static_cast<double>(l.rx_bytes())).c_str(),
                static_cast<unsigned long long>(l.retransmits()),
                static_cast<unsigned long long>(l.errors()), rtt.c_str(), data_rtt.c_str(),
                bandwidth.c_str(), flags.empty() ? "-" : flags.c_str());
  }
  return 0;
}

int Topo(int argc, char** argv) {
  std::string socket = baton::Client::DefaultSocketPath();
  std::string file;
  bool json = false;
  baton::OptionSet options;
  options.AddString("socket", &socket, "daemon socket ($BATON_SOCKET)");
  options.AddString("file", &file,
                    "show a recorded topology (NCCL XML, hwloc XML, nvidia-smi topo -m, JSON) "
                    "instead of asking the daemon");
  options.AddBool("json", &json, "print the node graph as JSON");
  const int code = ParseOrHelp(options,
                               "Usage: baton topo [--socket PATH | --file TOPOLOGY] [--json]\n\n"
                               "Shows a node's GPUs and NICs with the path type between every pair "
                               "(NVL, PIX,\nPXB, PHB, SYS, as NCCL names them) and their NUMA "
                               "affinity, then the peers\nthe daemon knows.",
                               argc, argv, 2, nullptr);
  if (code >= 0) return code;
  if (!file.empty()) {
    absl::StatusOr<baton::topology::Graph> graph = baton::topology::LoadTopologyFile(file);
    if (!graph.ok()) return Fail("topo", graph.status());
    if (json) {
      std::printf("%s\n", baton::topology::GraphToJson(*graph).c_str());
    } else {
      std::printf(
          "%s",
          baton::topology::FormatPathMatrix(*graph, baton::topology::PathTable(*graph)).c_str());
    }
    return 0;
  }
  auto channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
  auto stub = baton::v1::Client::NewStub(channel);
  baton::v1::Topology topology;
  baton::v1::DaemonStatus status;
  for (int call = 0; call < 2; ++call) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status rpc = call == 0
                           ? stub->GetTopology(&context, baton::v1::GetTopologyRequest(), &topology)
                           : stub->GetStatus(&context, baton::v1::GetStatusRequest(), &status);
    if (!rpc.ok()) {
      std::cerr << "baton topo: cannot reach batond at " << socket << ": " << rpc.error_message()
                << "\n";
      return 1;
    }
  }
  if (json) {
    std::printf("%s\n", topology.graph_json().c_str());
    return 0;
  }
  std::printf("node %s (%s)\n", topology.node_name().c_str(), topology.source().c_str());
  if (!topology.note().empty()) std::printf("note: %s\n", topology.note().c_str());
  std::printf("%s", topology.path_matrix().c_str());
  std::printf("\ncluster (this daemon and the peer daemons it knows; `baton links` has more):\n");
  std::printf("  %-16s %-22s %-5s %s\n", "node", "peer address", "state", "locality");
  std::printf("  %-16s %-22s %-5s %s\n", status.node_name().c_str(), status.peer_address().c_str(),
              "self", absl::StrJoin(status.locality(), ",").c_str());
  for (const auto& link : status.links()) {
    std::printf("  %-16s %-22s %-5s %s\n", PeerLabel(link).c_str(), link.peer_address().c_str(),
                link.peer_up() ? "up" : "down", absl::StrJoin(link.peer_locality(), ",").c_str());
  }
  return 0;
}

int DevCerts(int argc, char** argv) {
  std::string dir;
  std::string names;
  baton::OptionSet options;
  options.AddString("dir", &dir, "directory to write ca.pem, <name>.pem and <name>.key into");
  options.AddString("names", &names, "comma-separated node names, one certificate each");
  const int code = ParseOrHelp(
      options,
      "Usage: baton dev-certs --dir DIR --names NODE[,NODE...]\n\n"
      "Writes a throwaway CA certificate (DIR/ca.pem; its key is not kept, so nothing more can\n"
      "be issued from it) and, per node, a certificate that names it (DIR/NODE.pem) with its key\n"
      "(DIR/NODE.key, mode 0600), for batond's tls_ca, tls_cert and tls_key. For test and\n"
      "development clusters only; production certificates come from the cluster's own CA.",
      argc, argv, 2, nullptr);
  if (code >= 0) return code;
  std::vector<std::string> nodes = absl::StrSplit(names, ',', absl::SkipWhitespace());
  if (dir.empty() || nodes.empty()) {
    std::cerr << "baton dev-certs: --dir and --names are required\n";
    return 2;
  }
  absl::Status written = baton::client::WriteDevCertificates(dir, nodes);
  if (!written.ok()) return Fail("dev-certs", written);
  std::printf("wrote %s/ca.pem and certificates for %zu nodes\n", dir.c_str(), nodes.size());
  return 0;
}

int CommId(int argc, char** argv) {
  std::string socket = baton::Client::DefaultSocketPath();
  baton::OptionSet options;
  options.AddString("socket", &socket, "daemon socket ($BATON_SOCKET)");
  const int code =
      ParseOrHelp(options,
                  "Usage: baton comm-id [--socket PATH]\n\n"
                  "Prints a new communicator id rooted at the daemon, for BATON_COMM_ID.",
                  argc, argv, 2, nullptr);
  if (code >= 0) return code;
  baton::StatusOr<std::unique_ptr<baton::Client>> client = baton::Client::Connect(socket);
  if (!client.ok()) return Fail("comm-id", baton::ToAbsl(client.status()));
  baton::StatusOr<std::string> id = (*client)->CreateCommId();
  if (!id.ok()) return Fail("comm-id", baton::ToAbsl(id.status()));
  std::printf("%s\n", id->c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || absl::string_view(argv[1]) == "--help" || absl::string_view(argv[1]) == "-h" ||
      absl::string_view(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const absl::string_view command = argv[1];
  if (command == "--version" || command == "version") {
    std::cout << "baton " << baton::kBatonVersion << "\n";
    return 0;
  }
  if (command == "local") return Local(argc, argv);
  if (command == "bench") return Bench(argc, argv, /*worker=*/false);
  if (command == "bench-rank") return Bench(argc, argv, /*worker=*/true);
  if (command == "status") return Status(argc, argv);
  if (command == "links") return Links(argc, argv);
  if (command == "comm-id") return CommId(argc, argv);
  if (command == "dev-certs") return DevCerts(argc, argv);
  if (command == "topo") return Topo(argc, argv);
  std::cerr << "baton: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
