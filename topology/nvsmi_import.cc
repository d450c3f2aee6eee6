#include "topology/nvsmi_import.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "topology/paths.h"

namespace baton::topology {

namespace {

constexpr int kMaxNvLinksPerGpu = 18;

// A matrix cell: either an NVLink bond of `nvlinks` links or a PCI relation.
struct Cell {
  int nvlinks = 0;
  PathType pci = PathType::kDis;  // kLoc on the diagonal
};

absl::StatusOr<Cell> ParseCell(absl::string_view text) {
  Cell cell;
  if (text == "X") {
    cell.pci = PathType::kLoc;
  } else if (text == "SYS" || text == "SOC") {
    cell.pci = PathType::kSys;
  } else if (text == "NODE" || text == "PHB") {
    cell.pci = PathType::kPhb;
  } else if (text == "PXB") {
    cell.pci = PathType::kPxb;
  } else if (text == "PIX") {
    cell.pci = PathType::kPix;
  } else if (absl::ConsumePrefix(&text, "NV") && absl::SimpleAtoi(text, &cell.nvlinks) &&
             cell.nvlinks > 0) {
    cell.pci = PathType::kDis;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("nvidia-smi matrix: unknown cell \"", text, "\""));
  }
  return cell;
}

class UnionFind {
 public:
  explicit UnionFind(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int x) { return parent_[x] == x ? x : parent_[x] = Find(parent_[x]); }
  void Join(int x, int y) {
    x = Find(x);
    y = Find(y);
    if (x != y) parent_[std::max(x, y)] = std::min(x, y);  // the smallest member represents
  }

 private:
  std::vector<int> parent_;
};

struct Matrix {
  std::vector<std::string> names;  // column names as printed (GPU0, mlx5_0, NIC3)
  std::vector<std::vector<Cell>> cells;
  std::vector<std::string> cpu_affinity;  // per device; empty for NICs
  std::vector<std::string> numa_affinity;
  std::map<std::string, std::string> nic_legend;  // NIC0 -> mlx5_0
};

absl::StatusOr<Matrix> ParseMatrix(absl::string_view text) {
  Matrix m;
  std::vector<std::string> extra_columns;  // "cpu", "numa", "gpu_numa" in printed order
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  size_t at = 0;
  for (; at < lines.size(); ++at) {
    std::vector<absl::string_view> tokens =
        absl::StrSplit(lines[at], absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (tokens.empty() || !absl::StartsWith(tokens[0], "GPU")) continue;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == "CPU" && i + 1 < tokens.size() && tokens[i + 1] == "Affinity") {
        extra_columns.push_back("cpu");
        ++i;
      } else if (tokens[i] == "NUMA" && i + 1 < tokens.size() && tokens[i + 1] == "Affinity") {
        extra_columns.push_back("numa");
        ++i;
      } else if (tokens[i] == "GPU" && i + 2 < tokens.size() && tokens[i + 1] == "NUMA") {
        extra_columns.push_back("gpu_numa");
        i += 2;
      } else if (extra_columns.empty()) {
        m.names.emplace_back(tokens[i]);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("nvidia-smi matrix: unexpected header column \"", tokens[i], "\""));
      }
    }
    ++at;
    break;
  }
  const size_t n = m.names.size();
  if (n == 0) return absl::InvalidArgumentError("nvidia-smi matrix: no GPU0... header line");
  m.cells.assign(n, std::vector<Cell>(n));
  m.cpu_affinity.assign(n, "");
  m.numa_affinity.assign(n, "");
  std::vector<bool> seen(n, false);
  for (; at < lines.size(); ++at) {
    std::vector<absl::string_view> tokens =
        absl::StrSplit(lines[at], absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (tokens.empty()) continue;
    if (tokens[0] == "Legend:") break;
    const auto row_it = std::find(m.names.begin(), m.names.end(), tokens[0]);
    if (row_it == m.names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("nvidia-smi matrix: row \"", tokens[0], "\" is not a column"));
    }
    const size_t row = row_it - m.names.begin();
    if (seen[row]) return absl::InvalidArgumentError("nvidia-smi matrix: duplicate row");
    seen[row] = true;
    if (tokens.size() < n + 1) {
      return absl::InvalidArgumentError(absl::StrCat("nvidia-smi matrix: short row ", tokens[0]));
    }
    for (size_t col = 0; col < n; ++col) {
      BATON_ASSIGN_OR_RETURN(m.cells[row][col], ParseCell(tokens[col + 1]));
      if ((m.cells[row][col].pci == PathType::kLoc) != (row == col)) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvidia-smi matrix: bad diagonal in row ", tokens[0]));
      }
    }
    for (size_t k = n + 1; k < tokens.size() && k - n - 1 < extra_columns.size(); ++k) {
      const std::string& column = extra_columns[k - n - 1];
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      if (column == "cpu") m.cpu_affinity[row] = std::string(tokens[k]);
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      if (column == "numa") m.numa_affinity[row] = std::string(tokens[k]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat("nvidia-smi matrix: no row ", m.names[i]));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (m.cells[i][j].nvlinks != m.cells[j][i].nvlinks ||
          m.cells[i][j].pci != m.cells[j][i].pci) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvidia-smi matrix: ", m.names[i], "/", m.names[j], " is not symmetric"));
      }
    }
  }
  for (; at < lines.size(); ++at) {
    absl::string_view line = absl::StripAsciiWhitespace(lines[at]);
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (parts.size() == 2 && absl::StartsWith(parts[0], "NIC")) {
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      m.nic_legend[std::string(parts[0])] = std::string(absl::StripAsciiWhitespace(parts[1]));
    }
  }
  return m;
}

bool IsGpuName(absl::string_view name, int* index) {
  return absl::ConsumePrefix(&name, "GPU") && absl::SimpleAtoi(name, index);
}

}  // namespace

absl::StatusOr<Graph> ImportNvidiaSmiTopo(absl::string_view text) {
  BATON_ASSIGN_OR_RETURN(const Matrix m, ParseMatrix(text));
  const int n = static_cast<int>(m.names.size());
  std::vector<int> gpu_index(n, -1);
  for (int i = 0; i < n; ++i) IsGpuName(m.names[i], &gpu_index[i]);

  // CPU domains: anything but SYS (and NVLink, which says nothing about PCIe) joins endpoints.
  UnionFind domain(n), pix(n), pxb(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const PathType rel = m.cells[i][j].pci;
      if (i == j || rel == PathType::kDis) continue;
      if (rel < PathType::kSys) domain.Join(i, j);
      if (rel <= PathType::kPxb) pxb.Join(i, j);
      if (rel == PathType::kPix) pix.Join(i, j);
    }
    for (int j = 0; j < i; ++j) {
      if (!m.numa_affinity[i].empty() && m.numa_affinity[i] != "N/A" &&
          m.numa_affinity[i] == m.numa_affinity[j]) {
        domain.Join(i, j);
      }
    }
  }

  Graph g;
  g.source = "nvidia-smi";
  std::map<int, int> cpu_of_domain;
  for (int i = 0; i < n; ++i) {
    const int d = domain.Find(i);
    if (cpu_of_domain.count(d) > 0) continue;
    Node cpu;
    cpu.type = NodeType::kCpu;
    std::string numa, affinity;
    bool affinity_agrees = true;
    for (int j = 0; j < n; ++j) {
      if (domain.Find(j) != d || gpu_index[j] < 0) continue;
      if (!m.numa_affinity[j].empty() && m.numa_affinity[j] != "N/A") {
        if (!numa.empty() && numa != m.numa_affinity[j]) {
          return absl::InvalidArgumentError("nvidia-smi matrix: one CPU domain, two NUMA ids");
        }
        numa = m.numa_affinity[j];
      }
      if (affinity.empty()) affinity = m.cpu_affinity[j];
      affinity_agrees &= affinity == m.cpu_affinity[j];
    }
    if (!numa.empty() && !absl::SimpleAtoi(numa, &cpu.cpu.numa_id)) {
      return absl::InvalidArgumentError(absl::StrCat("nvidia-smi matrix: bad NUMA id ", numa));
    }
    if (affinity_agrees && !affinity.empty() && affinity != "N/A") {
      BATON_ASSIGN_OR_RETURN(cpu.cpu.cpus, ParseCpuList(affinity));
    }
    cpu_of_domain[d] = g.AddNode(std::move(cpu));
  }

  auto add_pci_link = [&](int up, int down) {
    Link link;
    link.a = up;
    link.b = down;
    link.type = LinkType::kPci;
    link.bandwidth_gbps = kDefaultPciBandwidth;
    g.AddLink(link);
  };
  auto add_switch = [&](int up) {
    Node sw;
    sw.type = NodeType::kPciSwitch;
    sw.name = absl::StrCat("switch", g.NodesOfType(NodeType::kPciSwitch).size());
    const int id = g.AddNode(std::move(sw));
    add_pci_link(up, id);
    return id;
  };
  // Group sizes decide which switches exist.
  std::map<int, std::vector<int>> pix_members;  // pix root -> endpoints
  std::map<int, std::vector<int>> pxb_groups;   // pxb root -> pix roots
  for (int i = 0; i < n; ++i) {
    std::vector<int>& members = pix_members[pix.Find(i)];
    if (members.empty()) pxb_groups[pxb.Find(i)].push_back(pix.Find(i));
    members.push_back(i);
  }
  std::vector<int> parent_of(n, -1);
  for (const auto& [pxb_root, pix_roots] : pxb_groups) {
    const int cpu = cpu_of_domain[domain.Find(pxb_root)];
    const int upper = pix_roots.size() > 1 ? add_switch(cpu) : cpu;
    for (int pix_root : pix_roots) {
      const std::vector<int>& members = pix_members[pix_root];
      const int leaf = members.size() > 1 || pix_roots.size() > 1 ? add_switch(upper) : upper;
      for (int member : members) parent_of[member] = leaf;
    }
  }
  std::vector<int> node_of(n);
  for (int i = 0; i < n; ++i) {
    Node node;
    if (gpu_index[i] >= 0) {
      node.type = NodeType::kGpu;
      node.gpu.index = gpu_index[i];
      if (!m.cpu_affinity[i].empty() && m.cpu_affinity[i] != "N/A") {
        BATON_ASSIGN_OR_RETURN(node.gpu.cpu_affinity, ParseCpuList(m.cpu_affinity[i]));
      }
      node.name = m.names[i];
    } else {
      node.type = NodeType::kNic;
      auto legend = m.nic_legend.find(m.names[i]);
      NicPort port;
      port.name = legend == m.nic_legend.end() ? m.names[i] : legend->second;
      node.name = port.name;
      node.nic.ports.push_back(std::move(port));
    }
    node_of[i] = g.AddNode(std::move(node));
    add_pci_link(parent_of[i], node_of[i]);
  }
  ConnectCpus(g);

  // The rebuilt PCIe tree must reproduce every PCI relation of the matrix.
  const PathTable pci_paths(g);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const PathType want = m.cells[i][j].pci;
      if (i == j || want == PathType::kDis) continue;
      const PathType got = pci_paths.Get(node_of[i], node_of[j]).type;
      if (got != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nvidia-smi matrix is not a PCIe tree: ", m.names[i], "/", m.names[j], " says ",
            PathTypeName(want), " but the consistent tree gives ", PathTypeName(got)));
      }
    }
  }

  std::vector<int> row_total(n, 0), row_max(n, 0);
  bool via_switch = false;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const int links = m.cells[i][j].nvlinks;
      if (links == 0) continue;
      if (gpu_index[i] < 0 || gpu_index[j] < 0) {
        return absl::InvalidArgumentError("nvidia-smi matrix: NVLink to a non-GPU");
      }
      row_total[i] += links;
      row_max[i] = std::max(row_max[i], links);
    }
    via_switch |= row_total[i] > kMaxNvLinksPerGpu;
  }
  const double per_link = NvLinkBandwidthPerLink(0);
  auto add_nvlink = [&](int a, int b, int count) {
    Link link;
    link.a = a;
    link.b = b;
    link.type = LinkType::kNvLink;
    link.nvlink_count = count;
    link.nvlink_per_link_gbps = per_link;
    link.bandwidth_gbps = count * per_link;
    g.AddLink(link);
  };
  if (via_switch) {
    Node nvs;
    nvs.type = NodeType::kNvSwitch;
    const int nvs_id = g.AddNode(std::move(nvs));
    for (int i = 0; i < n; ++i) {
      if (row_max[i] > 0) add_nvlink(node_of[i], nvs_id, row_max[i]);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (m.cells[i][j].nvlinks > 0) add_nvlink(node_of[i], node_of[j], m.cells[i][j].nvlinks);
      }
    }
  }
  AssignDefaultNames(g);
  BATON_RETURN_IF_ERROR(ValidateGraph(g));
  return g;
}

}  // namespace baton::topology
