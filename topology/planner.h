#pragma once

// Pure planning functions over topology: ring order across daemons, a ring over one node's GPUs,
// and the NIC each GPU should use. Every function is deterministic, so each daemon can compute the
// same plan from the same inputs. (The double binary tree across daemons is built over ring
// positions by collective::DoubleBinaryTree, collective/double_binary_tree.h.)

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "topology/graph.h"
#include "topology/paths.h"

namespace baton::topology {

// --- Across daemons -----------------------------------------------------------------------------

struct DaemonLocality {
  std::string name;                 // unique per daemon (the node name)
  std::vector<std::string> labels;  // coarse to fine, e.g. {"pod-a", "rack-07", "leaf-3"}
};

// Measured costs between daemons (any additive unit: latency, seconds per GB, 1/bandwidth).
// Defaults to 0. The planner uses the symmetric mean of (i, j) and (j, i).
class LinkCosts {
 public:
  explicit LinkCosts(int n) : n_(n), cost_(static_cast<size_t>(n) * n, 0.0) {}
  int size() const { return n_; }
  void Set(int from, int to, double cost) { cost_[static_cast<size_t>(from) * n_ + to] = cost; }
  double Get(int from, int to) const { return cost_[static_cast<size_t>(from) * n_ + to]; }

 private:
  int n_;
  std::vector<double> cost_;
};

// Orders daemons into a ring that crosses slow boundaries as rarely as possible:
// * Daemons sharing a label prefix are contiguous at every level, so the ring crosses level-L
//   boundaries exactly G_L times where G_L > 1 is the number of distinct level-L label prefixes
//   (the minimum for a ring), and never when G_L == 1. Missing labels compare as "".
// * Groups follow label order and daemons name order, so every caller gets the same ring.
// * With `costs`, the order inside each finest group (and so which members face the neighbouring
//   groups) is improved by nearest-neighbour then 2-opt on the cost, without breaking contiguity.
// Returns daemon indices in ring order. InvalidArgument for duplicate or empty names, a cost matrix
// of the wrong size, or negative / non-finite costs.
absl::StatusOr<std::vector<int>> PlanDaemonRing(const std::vector<DaemonLocality>& daemons,
                                                const LinkCosts* costs = nullptr);

// Ring hops (the closing hop included) whose ends differ in labels[0..level].
int CountBoundaryHops(const std::vector<DaemonLocality>& daemons, const std::vector<int>& ring,
                      int level);
// Sum of symmetric costs over the ring's hops, the closing hop included.
double RingCost(const LinkCosts& costs, const std::vector<int>& ring);

// --- Inside a node ------------------------------------------------------------------------------

struct GpuRing {
  std::vector<int> gpus;       // node ids in ring order, starting at the lowest-index GPU
  double bottleneck_gbps = 0;  // slowest hop
  PathType worst_type = PathType::kLoc;
};

// A ring over the node's GPUs that maximises the slowest hop's bandwidth and then minimises the
// sum of hop path types (so it follows NVLink wherever NVLink can close a ring). Exact for up to
// 16 GPUs; greedy nearest-best-neighbour above. Among equal rings, the lexicographically smallest
// GPU order wins. GPUs are ordered by index, then bus id. FailedPrecondition without GPUs.
absl::StatusOr<GpuRing> PlanGpuRing(const Graph& graph, const PathTable& paths);

struct NicAssignment {
  int gpu = -1;
  int nic = -1;
  int port = -1;  // index into the NIC's ports, -1 when the NIC lists none
  PathType type = PathType::kDis;
  double bandwidth_gbps = 0;  // min(path bandwidth, port speed)
};

// The NIC (port) each GPU should use, GPUs in PlanGpuRing's order: the best path type, then the
// highest bandwidth, then the port fewest GPUs already use (spreading GPUs over equally close
// NICs), then fewer hops and lower ids. Empty when the graph has no NIC.
std::vector<NicAssignment> AssignNics(const Graph& graph, const PathTable& paths);

}  // namespace baton::topology
