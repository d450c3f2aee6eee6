#include "topology/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::topology {

namespace {

double SymmetricCost(const LinkCosts& costs, int a, int b) {
  return (costs.Get(a, b) + costs.Get(b, a)) / 2;
}

// Labels padded to `depth` so that missing levels compare as "".
std::vector<std::string> PaddedLabels(const DaemonLocality& d, size_t depth) {
  std::vector<std::string> labels = d.labels;
  labels.resize(std::max(depth, labels.size()));
  return labels;
}

// Improves ring[begin, end) in place by 2-opt segment reversals; the neighbours of the segment
// outside it stay put, so group contiguity is preserved.
void TwoOpt(const LinkCosts& costs, std::vector<int>& ring, int begin, int end) {
  const int n = static_cast<int>(ring.size());
  auto cost = [&](int x, int y) { return SymmetricCost(costs, ring[x], ring[y]); };
  constexpr double kEpsilon = 1e-12;
  for (int pass = 0; pass < 100; ++pass) {
    bool improved = false;
    for (int i = begin; i < end; ++i) {
      for (int j = i + 1; j < end; ++j) {
        const int before = (i - 1 + n) % n;
        const int after = (j + 1) % n;
        if (before == j || after == i) continue;  // the segment is the whole ring
        const double delta = cost(before, j) + cost(i, after) - cost(before, i) - cost(j, after);
        if (delta < -kEpsilon) {
          std::reverse(ring.begin() + i, ring.begin() + j + 1);
          improved = true;
        }
      }
    }
    if (!improved) return;
  }
}

// Reorders ring[begin, end) by nearest neighbour.
void NearestNeighbour(const LinkCosts& costs, std::vector<int>& ring, int begin, int end) {
  if (end - begin < 2) return;
  // The first group keeps its first member (by name) first; later groups start next to the
  // previous group's last member.
  int previous = begin == 0 ? -1 : ring[begin - 1];
  for (int pos = begin; pos < end; ++pos) {
    if (previous < 0) {
      previous = ring[pos];
      continue;
    }
    int best = pos;
    for (int k = pos + 1; k < end; ++k) {
      if (SymmetricCost(costs, previous, ring[k]) < SymmetricCost(costs, previous, ring[best])) {
        best = k;
      }
    }
    std::swap(ring[pos], ring[best]);
    previous = ring[pos];
  }
}

}  // namespace

absl::StatusOr<std::vector<int>> PlanDaemonRing(const std::vector<DaemonLocality>& daemons,
                                                const LinkCosts* costs) {
  const int n = static_cast<int>(daemons.size());
  std::set<std::string> names;
  size_t depth = 0;
  for (const DaemonLocality& d : daemons) {
    if (d.name.empty() || !names.insert(d.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("daemon name \"", d.name, "\" is empty or not unique"));
    }
    depth = std::max(depth, d.labels.size());
  }
  if (costs != nullptr) {
    if (costs->size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("link costs are for ", costs->size(), " daemons, not ", n));
    }
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i != j && !(std::isfinite(costs->Get(i, j)) && costs->Get(i, j) >= 0)) {
          return absl::InvalidArgumentError(absl::StrCat("bad link cost ", i, "->", j));
        }
      }
    }
  }
  std::vector<std::vector<std::string>> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = PaddedLabels(daemons[i], depth);
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  std::sort(ring.begin(), ring.end(), [&](int a, int b) {
    return std::tie(keys[a], daemons[a].name) < std::tie(keys[b], daemons[b].name);
  });
  if (costs == nullptr || n < 3) return ring;
  // Finest groups are runs of equal label tuples; only their insides are reordered.
  std::vector<std::pair<int, int>> groups;
  for (int begin = 0; begin < n;) {
    int end = begin + 1;
    while (end < n && keys[ring[end]] == keys[ring[begin]]) ++end;
    groups.emplace_back(begin, end);
    begin = end;
  }
  for (const auto& [begin, end] : groups) NearestNeighbour(*costs, ring, begin, end);
  for (int round = 0; round < 4; ++round) {
    for (const auto& [begin, end] : groups) {
      // A lone group is the whole ring: keep position 0 fixed so the ring stays anchored.
      TwoOpt(*costs, ring, groups.size() == 1 ? 1 : begin, end);
    }
  }
  return ring;
}

int CountBoundaryHops(const std::vector<DaemonLocality>& daemons, const std::vector<int>& ring,
                      int level) {
  const int n = static_cast<int>(ring.size());
  if (n < 2) return 0;
  size_t depth = 0;
  for (const DaemonLocality& d : daemons) depth = std::max(depth, d.labels.size());
  auto prefix = [&](int daemon) {
    std::vector<std::string> labels = PaddedLabels(daemons[daemon], depth);
    labels.resize(std::min<size_t>(labels.size(), level + 1));
    return labels;
  };
  int hops = 0;
  for (int k = 0; k < n; ++k) hops += prefix(ring[k]) != prefix(ring[(k + 1) % n]) ? 1 : 0;
  return hops;
}

double RingCost(const LinkCosts& costs, const std::vector<int>& ring) {
  const int n = static_cast<int>(ring.size());
  if (n < 2) return 0;
  double total = 0;
  for (int k = 0; k < n; ++k) total += SymmetricCost(costs, ring[k], ring[(k + 1) % n]);
  return total;
}

namespace {

std::vector<int> GpusInOrder(const Graph& graph) {
  std::vector<int> gpus = graph.NodesOfType(NodeType::kGpu);
  // Known device indices first, then PCI bus order (how NVML numbers GPUs), then node order.
  auto key = [&](int id) {
    const Node& node = graph.nodes[id];
    return std::make_tuple(node.gpu.index < 0, node.gpu.index, node.pci.bus_id.empty(),
                           node.pci.bus_id);
  };
  std::stable_sort(gpus.begin(), gpus.end(), [&](int a, int b) { return key(a) < key(b); });
  return gpus;
}

// A hop used in both directions: the worse of the two paths.
Path RingHop(const PathTable& paths, int a, int b) {
  const Path& x = paths.Get(a, b);
  const Path& y = paths.Get(b, a);
  return Path{std::max(x.type, y.type), std::min(x.bandwidth_gbps, y.bandwidth_gbps),
              std::max(x.hops, y.hops)};
}

constexpr int kInfeasible = std::numeric_limits<int>::max() / 4;

// Exact search: ring over positions 0..n-1 starting at 0 using hops with bw >= threshold and the
// minimum sum of types; lexicographically smallest among the minima. Empty if none exists.
std::vector<int> BestRing(const std::vector<std::vector<Path>>& hop, double threshold) {
  const int n = static_cast<int>(hop.size());
  if (n == 1) return {0};
  const int full = (1 << n) - 1;
  auto cost = [&](int a, int b) {
    return hop[a][b].bandwidth_gbps >= threshold ? static_cast<int>(hop[a][b].type) : kInfeasible;
  };
  // rest[mask][last]: cheapest way to visit the GPUs outside `mask` from `last`, then return to 0.
  std::vector<std::vector<int>> rest(full + 1, std::vector<int>(n, kInfeasible));
  for (int last = 0; last < n; ++last) rest[full][last] = cost(last, 0);
  for (int mask = full - 1; mask >= 1; --mask) {
    if ((mask & 1) == 0) continue;
    for (int last = 0; last < n; ++last) {
      if ((mask & (1 << last)) == 0) continue;
      int best = kInfeasible;
      for (int next = 1; next < n; ++next) {
        if (mask & (1 << next)) continue;
        const int c = cost(last, next);
        const int r = rest[mask | (1 << next)][next];
        if (c < kInfeasible && r < kInfeasible) best = std::min(best, c + r);
      }
      rest[mask][last] = best;
    }
  }
  if (rest[1][0] >= kInfeasible) return {};
  std::vector<int> ring = {0};
  int mask = 1, last = 0;
  while (mask != full) {
    for (int next = 1; next < n; ++next) {
      if (mask & (1 << next)) continue;
      const int c = cost(last, next);
      const int r = rest[mask | (1 << next)][next];
      if (c < kInfeasible && r < kInfeasible && c + r == rest[mask][last]) {
        ring.push_back(next);
        mask |= 1 << next;
        last = next;
        break;
      }
    }
  }
  return ring;
}

}  // namespace

absl::StatusOr<GpuRing> PlanGpuRing(const Graph& graph, const PathTable& paths) {
  const std::vector<int> gpus = GpusInOrder(graph);
  const int n = static_cast<int>(gpus.size());
  if (n == 0) return absl::FailedPreconditionError("the node has no GPU");
  std::vector<std::vector<Path>> hop(n, std::vector<Path>(n));
  std::vector<double> bandwidths;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      hop[a][b] = RingHop(paths, gpus[a], gpus[b]);
      bandwidths.push_back(hop[a][b].bandwidth_gbps);
    }
  }
  std::vector<int> order;
  if (n <= 16) {
    std::sort(bandwidths.begin(), bandwidths.end(), std::greater<>());
    bandwidths.erase(std::unique(bandwidths.begin(), bandwidths.end()), bandwidths.end());
    if (bandwidths.empty()) bandwidths.push_back(0);
    // Feasibility only shrinks as the threshold rises: binary search the highest feasible one.
    int lo = 0, hi = static_cast<int>(bandwidths.size()) - 1;  // bandwidths descending
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (!BestRing(hop, bandwidths[mid]).empty()) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    order = BestRing(hop, bandwidths[lo]);
  }
  if (order.empty()) {
    // Greedy: from GPU 0, always go to the best remaining hop.
    std::vector<bool> used(n, false);
    order.push_back(0);
    used[0] = true;
    for (int step = 1; step < n; ++step) {
      int best = -1;
      for (int c = 0; c < n; ++c) {
        if (!used[c] && (best < 0 || BetterPath(hop[order.back()][c], hop[order.back()][best]))) {
          best = c;
        }
      }
      order.push_back(best);
      used[best] = true;
    }
  }
  GpuRing ring;
  ring.bottleneck_gbps = n == 1 ? kLocalBandwidth : std::numeric_limits<double>::max();
  for (int k = 0; k < n; ++k) {
    ring.gpus.push_back(gpus[order[k]]);
    if (n == 1) break;
    const Path& h = hop[order[k]][order[(k + 1) % n]];
    ring.bottleneck_gbps = std::min(ring.bottleneck_gbps, h.bandwidth_gbps);
    ring.worst_type = std::max(ring.worst_type, h.type);
  }
  return ring;
}

std::vector<NicAssignment> AssignNics(const Graph& graph, const PathTable& paths) {
  struct Candidate {
    int nic;
    int port;
  };
  std::vector<Candidate> candidates;
  for (const int nic : graph.NodesOfType(NodeType::kNic)) {
    const int ports = static_cast<int>(graph.nodes[nic].nic.ports.size());
    if (ports == 0) candidates.push_back({nic, -1});
    for (int p = 0; p < ports; ++p) candidates.push_back({nic, p});
  }
  std::vector<NicAssignment> out;
  if (candidates.empty()) return out;
  std::map<std::pair<int, int>, int> load;
  for (const int gpu : GpusInOrder(graph)) {
    NicAssignment best;
    int best_load = 0;
    int best_hops = 0;
    for (const Candidate& c : candidates) {
      const Path& path = paths.Get(gpu, c.nic);
      if (path.type == PathType::kDis) continue;
      double bw = path.bandwidth_gbps;
      if (c.port >= 0) {
        const int64_t mbps = graph.nodes[c.nic].nic.ports[c.port].speed_mbps;
        if (mbps > 0) bw = std::min(bw, static_cast<double>(mbps) / 8000.0);
      }
      const int l = load[{c.nic, c.port}];
      const bool better = best.nic < 0 || std::tie(path.type, best.bandwidth_gbps, l, path.hops) <
                                              std::tie(best.type, bw, best_load, best_hops);
      if (better) {
        best = NicAssignment{gpu, c.nic, c.port, path.type, bw};
        best_load = l;
        best_hops = path.hops;
      }
    }
    if (best.nic < 0) continue;
    ++load[{best.nic, best.port}];
    out.push_back(best);
  }
  return out;
}

}  // namespace baton::topology
