#pragma once

// NCCL-style paths between every pair of nodes of a Graph.
//
// A path's type is the worst hop type along the best route and its bandwidth the minimum link
// bandwidth along it. Hop types follow NCCL (src/graph/paths.cc, ncclTopoSetPaths):
//   NVLink hop -> NVL; NVLink hop relayed by an intermediate GPU -> NVB; C2C -> C2C;
//   PCI hop between two PCI switches -> PXB; PCI hop touching a CPU -> PHB; other PCI hop -> PIX;
//   inter-CPU hop -> SYS; local link -> LOC.
// "Best" is NCCL's order: lower path type, then higher bandwidth, then fewer hops. As in NCCL a
// GPU relays traffic only from an NVLink to another GPU's NVLink, and only as the first hop away
// from the path's destination; other nodes relay freely. Nodes that cannot reach each other get
// DIS. Post-processing that depends on runtime checks (P2P/GDR availability, PXN, P2C) is not
// applied; those types exist for completeness and for inter-node planning (NET).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"

namespace baton::topology {

// Values match NCCL's PATH_* constants (graph.h of NCCL 2.27+).
enum class PathType : int {
  kLoc = 0,
  kNvl = 1,
  kNvb = 2,
  kC2c = 3,
  kPix = 4,
  kPxb = 5,
  kP2c = 6,
  kPxn = 7,
  kPhb = 8,
  kSys = 9,
  kNet = 10,
  kDis = 11,
};

absl::string_view PathTypeName(PathType type);  // "LOC", "NVL", ..., "DIS"
absl::StatusOr<PathType> ParsePathType(absl::string_view name);

struct Path {
  PathType type = PathType::kDis;
  double bandwidth_gbps = 0;
  int hops = 0;
  bool operator==(const Path&) const = default;
};

// All-pairs paths of one graph. Immutable after construction; safe to share between threads.
class PathTable {
 public:
  // `graph` must pass ValidateGraph. Cost: one search per node, O(nodes * links) each.
  explicit PathTable(const Graph& graph);

  int size() const { return n_; }
  // The route from `from` toward `to` (NCCL keeps paths per destination; GPU relay rules make a
  // few pairs asymmetric, e.g. a GPU may reach its NVLink peer's CPU through that peer).
  const Path& Get(int from, int to) const { return paths_[static_cast<size_t>(to) * n_ + from]; }

  // NICs ranked for `gpu`: best path type first, then bandwidth, hops, node id.
  std::vector<int> NicsByDistance(int gpu) const;
  // The NICs tied for first place in NicsByDistance (same type, bandwidth and hops); empty when
  // the graph has no NIC.
  std::vector<int> ClosestNics(int gpu) const;

 private:
  int n_ = 0;
  std::vector<NodeType> types_;
  std::vector<Path> paths_;  // paths_[to * n + from]
};

// "Better" in NCCL's order (type, then bandwidth, then hops).
bool BetterPath(const Path& x, const Path& y);

// A text matrix of the GPUs and NICs, like `nvidia-smi topo -m` but with NCCL's path types
// (NVL/NVB/PIX/PXB/PHB/SYS) and a NUMA column.
std::string FormatPathMatrix(const Graph& graph, const PathTable& paths);

}  // namespace baton::topology
