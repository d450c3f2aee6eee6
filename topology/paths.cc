#include "topology/paths.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::topology {

namespace {

constexpr const char* kPathTypeNames[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                          "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};

PathType HopType(LinkType link) {
  switch (link) {
    case LinkType::kLocal:
      return PathType::kLoc;
    case LinkType::kNvLink:
      return PathType::kNvl;
    case LinkType::kC2c:
      return PathType::kC2c;
    case LinkType::kPci:
      return PathType::kPix;
    case LinkType::kInterCpu:
      return PathType::kSys;
  }
  return PathType::kDis;
}

struct Adjacent {
  int node;
  const Link* link;
};

}  // namespace

absl::string_view PathTypeName(PathType type) {
  const int i = static_cast<int>(type);
  return i >= 0 && i <= 11 ? kPathTypeNames[i] : "?";
}

absl::StatusOr<PathType> ParsePathType(absl::string_view name) {
  for (int i = 0; i <= 11; ++i) {
    if (name == kPathTypeNames[i]) return static_cast<PathType>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown path type \"", name, "\""));
}

bool BetterPath(const Path& x, const Path& y) {
  if (x.type != y.type) return x.type < y.type;
  if (x.bandwidth_gbps != y.bandwidth_gbps) return x.bandwidth_gbps > y.bandwidth_gbps;
  return x.hops < y.hops;
}

PathTable::PathTable(const Graph& graph) : n_(static_cast<int>(graph.nodes.size())) {
  types_.reserve(n_);
  for (const Node& node : graph.nodes) types_.push_back(node.type);
  std::vector<std::vector<Adjacent>> adjacent(n_);
  for (const Link& l : graph.links) {
    adjacent[l.a].push_back({l.b, &l});
    adjacent[l.b].push_back({l.a, &l});
  }
  paths_.assign(static_cast<size_t>(n_) * n_, Path{});
  std::vector<int> frontier;
  std::vector<int> next;
  std::vector<bool> queued(n_);
  for (int base = 0; base < n_; ++base) {
    Path* to_base = &paths_[static_cast<size_t>(base) * n_];
    to_base[base] = Path{PathType::kLoc, kLocalBandwidth, 0};
    frontier.assign(1, base);
    // Breadth-first with re-relaxation, as NCCL does: a node whose path improves is expanded
    // again in the next round. Path quality only degrades along a route, so this terminates.
    while (!frontier.empty()) {
      next.clear();
      std::fill(queued.begin(), queued.end(), false);
      for (const int node : frontier) {
        const Path here = to_base[node];
        for (const Adjacent& adj : adjacent[node]) {
          const int rem = adj.node;
          const Link& link = *adj.link;
          if (node != base && types_[node] == NodeType::kGpu &&
              !(link.type == LinkType::kNvLink && types_[rem] == NodeType::kGpu &&
                here.hops <= 1)) {
            continue;
          }
          PathType hop = HopType(link.type);
          if (types_[node] == NodeType::kPciSwitch && types_[rem] == NodeType::kPciSwitch) {
            hop = PathType::kPxb;
          }
          if (link.type == LinkType::kPci &&
              (types_[node] == NodeType::kCpu || types_[rem] == NodeType::kCpu)) {
            hop = PathType::kPhb;
          }
          if (node != base && types_[node] == NodeType::kGpu && here.type == PathType::kNvl &&
              hop == PathType::kNvl) {
            hop = PathType::kNvb;
          }
          Path candidate;
          candidate.type = std::max(here.type, hop);
          candidate.bandwidth_gbps = std::min(here.bandwidth_gbps, link.bandwidth_gbps);
          candidate.hops = here.hops + 1;
          Path& current = to_base[rem];
          if (rem != base && (current.type == PathType::kDis || BetterPath(candidate, current))) {
            current = candidate;
            if (!queued[rem]) {
              queued[rem] = true;
              next.push_back(rem);
            }
          }
        }
      }
      frontier.swap(next);
    }
  }
}

std::vector<int> PathTable::NicsByDistance(int gpu) const {
  std::vector<int> nics;
  for (int i = 0; i < n_; ++i) {
    if (types_[i] == NodeType::kNic && Get(gpu, i).type != PathType::kDis) nics.push_back(i);
  }
  std::stable_sort(nics.begin(), nics.end(),
                   [&](int x, int y) { return BetterPath(Get(gpu, x), Get(gpu, y)); });
  return nics;
}

std::vector<int> PathTable::ClosestNics(int gpu) const {
  std::vector<int> ranked = NicsByDistance(gpu);
  std::vector<int> closest;
  for (int nic : ranked) {
    if (!closest.empty() && Get(gpu, nic) != Get(gpu, closest.front())) break;
    closest.push_back(nic);
  }
  return closest;
}

std::string FormatPathMatrix(const Graph& graph, const PathTable& paths) {
  std::vector<int> ids = graph.NodesOfType(NodeType::kGpu);
  const std::vector<int> nics = graph.NodesOfType(NodeType::kNic);
  ids.insert(ids.end(), nics.begin(), nics.end());
  size_t width = 6;
  for (int id : ids) width = std::max(width, graph.nodes[id].name.size() + 2);
  std::string out(width, ' ');
  for (int id : ids) absl::StrAppendFormat(&out, "%-*s", width, graph.nodes[id].name);
  absl::StrAppend(&out, "NUMA\n");
  for (int row : ids) {
    absl::StrAppendFormat(&out, "%-*s", width, graph.nodes[row].name);
    for (int col : ids) {
      absl::StrAppendFormat(&out, "%-*s", width,
                            row == col ? "X" : PathTypeName(paths.Get(row, col).type));
    }
    const int numa = graph.NumaOf(row);
    absl::StrAppend(&out, numa < 0 ? "N/A" : absl::StrCat(numa), "\n");
  }
  return out;
}

}  // namespace baton::topology
