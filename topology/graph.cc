#include "topology/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace baton::topology {

absl::string_view NodeTypeName(NodeType type) {
  switch (type) {
    case NodeType::kCpu:
      return "cpu";
    case NodeType::kPciSwitch:
      return "pci_switch";
    case NodeType::kGpu:
      return "gpu";
    case NodeType::kNic:
      return "nic";
    case NodeType::kNvSwitch:
      return "nvswitch";
  }
  return "?";
}

absl::string_view LinkTypeName(LinkType type) {
  switch (type) {
    case LinkType::kLocal:
      return "local";
    case LinkType::kNvLink:
      return "nvlink";
    case LinkType::kC2c:
      return "c2c";
    case LinkType::kPci:
      return "pci";
    case LinkType::kInterCpu:
      return "inter_cpu";
  }
  return "?";
}

absl::StatusOr<NodeType> ParseNodeType(absl::string_view name) {
  for (NodeType t : {NodeType::kCpu, NodeType::kPciSwitch, NodeType::kGpu, NodeType::kNic,
                     NodeType::kNvSwitch}) {
    if (NodeTypeName(t) == name) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown node type \"", name, "\""));
}

absl::StatusOr<LinkType> ParseLinkType(absl::string_view name) {
  for (LinkType t :
       {LinkType::kLocal, LinkType::kNvLink, LinkType::kC2c, LinkType::kPci, LinkType::kInterCpu}) {
    if (LinkTypeName(t) == name) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown link type \"", name, "\""));
}

int Graph::AddNode(Node node) {
  node.id = static_cast<int>(nodes.size());
  nodes.push_back(std::move(node));
  return nodes.back().id;
}

std::vector<int> Graph::NodesOfType(NodeType type) const {
  std::vector<int> ids;
  for (const Node& n : nodes) {
    if (n.type == type) ids.push_back(n.id);
  }
  return ids;
}

int Graph::PciParent(int node) const {
  for (const Link& l : links) {
    if (l.type == LinkType::kPci && l.b == node) return l.a;
  }
  return -1;
}

int Graph::CpuOf(int node) const {
  // The forest is validated acyclic, but guard against malformed input anyway.
  for (size_t steps = 0; node >= 0 && steps <= nodes.size(); ++steps) {
    if (nodes[node].type == NodeType::kCpu) return node;
    node = PciParent(node);
  }
  return -1;
}

int Graph::NumaOf(int node) const {
  const int cpu = CpuOf(node);
  return cpu < 0 ? -1 : nodes[cpu].cpu.numa_id;
}

int Graph::FindByBusId(absl::string_view bus_id) const {
  absl::StatusOr<std::string> canonical = NormalizeBusId(bus_id);
  if (!canonical.ok()) return -1;
  for (const Node& n : nodes) {
    if (n.pci.bus_id == *canonical) return n.id;
  }
  return -1;
}

int Graph::FindByName(absl::string_view name) const {
  for (const Node& n : nodes) {
    if (n.name == name) return n.id;
  }
  return -1;
}

const std::string* Graph::FindAttribute(const Node& node, absl::string_view key) {
  for (const auto& [k, v] : node.attributes) {
    if (k == key) return &v;
  }
  return nullptr;
}

void SortAttributes(std::vector<std::pair<std::string, std::string>>& attributes) {
  std::stable_sort(attributes.begin(), attributes.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
}

namespace {

absl::Status Invalid(const Graph& g, int node, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("topology node ", node,
                   node >= 0 && node < static_cast<int>(g.nodes.size())
                       ? absl::StrCat(" (", g.nodes[node].name, ")")
                       : "",
                   ": ", what));
}

bool IsSortedUnique(const std::vector<int>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i - 1] >= v[i]) return false;
  }
  return true;
}

bool AttributesSorted(const std::vector<std::pair<std::string, std::string>>& a) {
  for (size_t i = 1; i < a.size(); ++i) {
    if (a[i - 1].first >= a[i].first) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateGraph(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  std::set<std::string> names;
  std::set<std::string> bus_ids;
  if (!AttributesSorted(g.attributes)) {
    return absl::InvalidArgumentError("graph attributes are not sorted by unique key");
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.id != i) return Invalid(g, i, absl::StrCat("id is ", node.id));
    if (node.name.empty()) return Invalid(g, i, "empty name");
    if (!names.insert(node.name).second) return Invalid(g, i, "duplicate name");
    if (!AttributesSorted(node.attributes)) return Invalid(g, i, "attributes not sorted/unique");
    const bool pci_type = node.type == NodeType::kPciSwitch || node.type == NodeType::kGpu ||
                          node.type == NodeType::kNic;
    if (node.type != NodeType::kCpu && node.cpu != CpuInfo{})
      return Invalid(g, i, "stray cpu info");
    if (!pci_type && node.pci != PciInfo{}) return Invalid(g, i, "stray pci info");
    if (node.type != NodeType::kGpu && node.gpu != GpuInfo{})
      return Invalid(g, i, "stray gpu info");
    if (node.type != NodeType::kNic && node.nic != NicInfo{})
      return Invalid(g, i, "stray nic info");
    if (node.type != NodeType::kNvSwitch && node.nvswitch != NvSwitchInfo{}) {
      return Invalid(g, i, "stray nvswitch info");
    }
    if (!node.pci.bus_id.empty()) {
      absl::StatusOr<std::string> canonical = NormalizeBusId(node.pci.bus_id);
      if (!canonical.ok() || *canonical != node.pci.bus_id) {
        return Invalid(g, i, absl::StrCat("bus id \"", node.pci.bus_id, "\" is not canonical"));
      }
      if (!bus_ids.insert(node.pci.bus_id).second) return Invalid(g, i, "duplicate bus id");
    }
    if (!IsSortedUnique(node.cpu.cpus) || !IsSortedUnique(node.gpu.cpu_affinity)) {
      return Invalid(g, i, "cpu set not ascending");
    }
    for (const NicPort& port : node.nic.ports) {
      if (!std::isfinite(port.latency_us)) return Invalid(g, i, "non-finite latency");
    }
  }
  std::vector<int> upstream(n, -1);
  for (size_t li = 0; li < g.links.size(); ++li) {
    const Link& l = g.links[li];
    if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n || l.a == l.b) {
      return absl::InvalidArgumentError(absl::StrCat("link ", li, " has bad endpoints"));
    }
    if (!std::isfinite(l.bandwidth_gbps) || l.bandwidth_gbps < 0 ||
        !std::isfinite(l.nvlink_per_link_gbps) || !std::isfinite(l.pcie_gts)) {
      return absl::InvalidArgumentError(absl::StrCat("link ", li, " has a bad bandwidth"));
    }
    const NodeType ta = g.nodes[l.a].type;
    const NodeType tb = g.nodes[l.b].type;
    switch (l.type) {
      case LinkType::kPci:
        if (ta != NodeType::kCpu && ta != NodeType::kPciSwitch) {
          return Invalid(g, l.a, "PCI upstream end is not a CPU or switch");
        }
        if (tb == NodeType::kCpu || tb == NodeType::kNvSwitch) {
          return Invalid(g, l.b, "PCI downstream end is not a switch, GPU or NIC");
        }
        if (upstream[l.b] >= 0) return Invalid(g, l.b, "more than one PCI upstream link");
        upstream[l.b] = l.a;
        break;
      case LinkType::kInterCpu:
        if (ta != NodeType::kCpu || tb != NodeType::kCpu) {
          return absl::InvalidArgumentError(absl::StrCat("inter-CPU link ", li, " joins non-CPUs"));
        }
        break;
      case LinkType::kNvLink:
        if (ta != NodeType::kGpu && tb != NodeType::kGpu) {
          return absl::InvalidArgumentError(absl::StrCat("NVLink ", li, " has no GPU end"));
        }
        break;
      case LinkType::kC2c:
        if (!((ta == NodeType::kGpu && tb == NodeType::kCpu) ||
              (ta == NodeType::kCpu && tb == NodeType::kGpu))) {
          return absl::InvalidArgumentError(absl::StrCat("C2C link ", li, " is not GPU-CPU"));
        }
        break;
      case LinkType::kLocal:
        break;
    }
  }
  // The PCI forest must be acyclic.
  for (int i = 0; i < n; ++i) {
    int at = i;
    for (int steps = 0; at >= 0; ++steps) {
      if (steps > n) return Invalid(g, i, "PCI hierarchy has a cycle");
      at = upstream[at];
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NormalizeBusId(absl::string_view bus_id) {
  const absl::string_view original = bus_id;
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad PCI bus id \"", original, "\""));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(bus_id, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return bad();
  std::vector<absl::string_view> dev_fn = absl::StrSplit(parts[2], '.');
  if (dev_fn.size() != 2) return bad();
  auto hex = [](absl::string_view s, size_t max_digits, uint64_t* out) {
    if (s.empty() || s.size() > max_digits) return false;
    for (char c : s) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    }
    return absl::SimpleHexAtoi(s, out);
  };
  uint64_t domain, bus, dev, fn;
  if (!hex(parts[0], 8, &domain) || !hex(parts[1], 2, &bus) || !hex(dev_fn[0], 2, &dev) ||
      !hex(dev_fn[1], 1, &fn) || dev > 0x1f || fn > 7) {
    return bad();
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%04llx:%02llx:%02llx.%llx",
                static_cast<unsigned long long>(domain), static_cast<unsigned long long>(bus),
                static_cast<unsigned long long>(dev), static_cast<unsigned long long>(fn));
  return std::string(out);
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return cpus;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> range = absl::StrSplit(item, '-');
    int lo, hi;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &lo) ||
        !absl::SimpleAtoi(range.back(), &hi) || lo < 0 || hi < lo || hi > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list \"", text, "\""));
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::vector<int>> ParseCpuMask(absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(absl::StripAsciiWhitespace(text), ',');
  std::vector<int> cpus;
  const int nwords = static_cast<int>(words.size());
  for (int w = 0; w < nwords; ++w) {
    absl::string_view word = words[w];
    if (!absl::ConsumePrefix(&word, "0x")) absl::ConsumePrefix(&word, "0X");
    if (word.empty()) continue;  // hwloc writes all-zero words as nothing
    uint64_t bits;
    bool ok = word.size() <= 8;
    for (char c : word) ok = ok && absl::ascii_isxdigit(static_cast<unsigned char>(c));
    if (!ok || !absl::SimpleHexAtoi(word, &bits)) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU mask \"", text, "\""));
    }
    const int base = (nwords - 1 - w) * 32;  // the last word holds CPUs 0-31
    for (int b = 0; b < 32; ++b) {
      if (bits & (uint64_t{1} << b)) cpus.push_back(base + b);
    }
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

double NvLinkBandwidthPerLink(int cc) {
  if (cc >= 100) return 40.1;
  if (cc >= 90) return 20.6;
  if (cc == 86) return 12.0;
  if (cc >= 80) return 20.0;
  if (cc >= 70) return 20.0;
  if (cc >= 60) return 18.0;
  return 20.0;
}

double ParsePcieGts(absl::string_view link_speed) {
  // NCCL matches "2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s" and the "N.0 GT/s PCIe"
  // spellings of kernels after 5.6; we accept both by reading the leading number.
  absl::string_view s = absl::StripAsciiWhitespace(link_speed);
  const size_t gt = s.find(" GT/s");
  if (gt == absl::string_view::npos) return 0;
  double value;
  if (!absl::SimpleAtod(s.substr(0, gt), &value)) return 0;
  for (double known : {2.5, 5.0, 8.0, 16.0, 32.0, 64.0}) {
    if (value == known) return value;
  }
  return 0;
}

double PcieBandwidth(double gts, int width) {
  // NCCL kvDictPciGen: per-lane rate in units of 100 Mb/s, unknown -> Gen3's 60.
  double per_lane = 60;
  if (gts == 2.5) per_lane = 15;
  if (gts == 5.0) per_lane = 30;
  if (gts == 8.0) per_lane = 60;
  if (gts == 16.0) per_lane = 120;
  if (gts == 32.0) per_lane = 240;
  if (gts == 64.0) per_lane = 480;
  return (width <= 0 ? 16 : width) * per_lane / 80.0;
}

double InterCpuBandwidth(const CpuInfo& cpu) {
  if (absl::StartsWith(cpu.arch, "ppc")) return 32;            // P9_BW
  if (cpu.arch == "arm64" || cpu.arch == "aarch64") return 6;  // ARM_BW
  if (cpu.vendor == "GenuineIntel") {
    if (cpu.family == 6 && cpu.model >= 0xCF) return 40;  // Emerald Rapids
    if (cpu.family == 6 && cpu.model >= 0x8F) return 22;  // Sapphire Rapids
    if (cpu.family == 6 && cpu.model >= 0x55) return 10;  // Skylake
    return 6;                                             // Broadwell and unknown Intel
  }
  if (cpu.vendor == "AuthenticAMD" || cpu.vendor == "AMD") return 16;          // AMD_BW
  if (cpu.vendor == "CentaurHauls" || cpu.vendor == "  Shanghai  ") return 6;  // ZPI_BW
  return 6;  // unknown: the most conservative of NCCL's values
}

void ConnectCpus(Graph& graph) {
  std::erase_if(graph.links, [](const Link& l) { return l.type == LinkType::kInterCpu; });
  const std::vector<int> cpus = graph.NodesOfType(NodeType::kCpu);
  for (size_t i = 0; i < cpus.size(); ++i) {
    for (size_t j = i + 1; j < cpus.size(); ++j) {
      Link link;
      link.a = cpus[i];
      link.b = cpus[j];
      link.type = LinkType::kInterCpu;
      link.bandwidth_gbps = std::min(InterCpuBandwidth(graph.nodes[cpus[i]].cpu),
                                     InterCpuBandwidth(graph.nodes[cpus[j]].cpu));
      graph.AddLink(link);
    }
  }
}

namespace {

uint64_t PciDeviceKey(const PciInfo& pci) {
  auto part = [](int v) { return static_cast<uint64_t>(v < 0 ? 0 : v); };
  return part(pci.vendor) << 48 | part(pci.device) << 32 | part(pci.subsystem_vendor) << 16 |
         part(pci.subsystem_device);
}

// NCCL getBcmGen: Gen4 PEX 0x1000:0xc010 with subsystem 0x1000:0xa0xx; Gen5 0x1000:0xc030 with
// subsystem device 0x00xx at the top level and 0x01xx below it.
int BroadcomGeneration(uint64_t key, int level) {
  if ((key & 0xfffffffffffff000ULL) == 0x1000c0101000a000ULL) return 4;
  if ((key & 0xfffffffffffff000ULL) ==
      (0x1000c03010000000ULL | static_cast<uint64_t>(level) * 0x1000)) {
    return 5;
  }
  return 0;
}

}  // namespace

void FlattenBroadcomSwitches(Graph& graph) {
  std::vector<bool> remove(graph.nodes.size(), false);
  for (const Node& parent : graph.nodes) {
    if (parent.type != NodeType::kPciSwitch || remove[parent.id]) continue;
    const int gen = BroadcomGeneration(PciDeviceKey(parent.pci), 0);
    if (gen == 0) continue;
    // Only the direct children are merged, once, as NCCL does (it then marks the parent).
    std::vector<int> subs;
    for (const Link& l : graph.links) {
      if (l.type == LinkType::kPci && l.a == parent.id &&
          graph.nodes[l.b].type == NodeType::kPciSwitch &&
          BroadcomGeneration(PciDeviceKey(graph.nodes[l.b].pci), 1) == gen) {
        subs.push_back(l.b);
      }
    }
    for (int sub : subs) {
      for (Link& l : graph.links) {
        if (l.type == LinkType::kPci && l.a == sub) l.a = parent.id;
      }
      remove[sub] = true;
    }
  }
  RemoveNodes(graph, remove);
}

void PruneEmptySwitches(Graph& graph) {
  const int n = static_cast<int>(graph.nodes.size());
  std::vector<bool> keep(n, false);
  for (const Node& node : graph.nodes) {
    if (node.type == NodeType::kPciSwitch) continue;
    keep[node.id] = true;
    if (node.type != NodeType::kGpu && node.type != NodeType::kNic) continue;
    for (int up = graph.PciParent(node.id); up >= 0 && !keep[up]; up = graph.PciParent(up)) {
      keep[up] = true;
    }
  }
  std::vector<bool> remove(n);
  for (int i = 0; i < n; ++i) remove[i] = !keep[i];
  RemoveNodes(graph, remove);
}

void RemoveNodes(Graph& graph, const std::vector<bool>& remove) {
  std::vector<int> new_id(graph.nodes.size(), -1);
  std::vector<Node> kept;
  for (Node& node : graph.nodes) {
    if (remove[node.id]) continue;
    new_id[node.id] = static_cast<int>(kept.size());
    node.id = new_id[node.id];
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  std::vector<Link> links;
  for (Link& l : graph.links) {
    if (new_id[l.a] < 0 || new_id[l.b] < 0) continue;
    l.a = new_id[l.a];
    l.b = new_id[l.b];
    links.push_back(l);
  }
  graph.links = std::move(links);
}

void AssignDefaultNames(Graph& graph) {
  std::set<std::string> taken;
  for (const Node& node : graph.nodes) {
    if (!node.name.empty()) taken.insert(node.name);
  }
  auto claim = [&](const std::string& name) {
    std::string unique = name;
    for (int k = 2; taken.count(unique) > 0; ++k) unique = absl::StrCat(name, "#", k);
    taken.insert(unique);
    return unique;
  };
  // GPUs with a known index keep it; the others take the lowest free numbers in node order.
  std::set<int> used_indices;
  for (const Node& node : graph.nodes) {
    if (node.type == NodeType::kGpu && node.gpu.index >= 0) used_indices.insert(node.gpu.index);
  }
  // Unnumbered GPUs are numbered in PCI bus order, the order NVML and CUDA_DEVICE_ORDER=PCI_BUS_ID
  // use; those without a bus id come last, in node order.
  std::vector<int> unnumbered;
  for (const Node& node : graph.nodes) {
    if (node.type == NodeType::kGpu && node.name.empty() && node.gpu.index < 0) {
      unnumbered.push_back(node.id);
    }
  }
  std::stable_sort(unnumbered.begin(), unnumbered.end(), [&](int a, int b) {
    const std::string& x = graph.nodes[a].pci.bus_id;
    const std::string& y = graph.nodes[b].pci.bus_id;
    return std::make_pair(x.empty(), x) < std::make_pair(y.empty(), y);
  });
  int next_free_index = 0;
  for (int id : unnumbered) {
    while (used_indices.count(next_free_index) > 0) ++next_free_index;
    graph.nodes[id].name = claim(absl::StrCat("GPU", next_free_index++));
  }
  int nic_ordinal = 0;
  int cpu_ordinal = 0;
  for (Node& node : graph.nodes) {
    if (!node.name.empty()) continue;
    switch (node.type) {
      case NodeType::kGpu:
        node.name = claim(absl::StrCat("GPU", node.gpu.index));
        break;
      case NodeType::kNic:
        if (!node.nic.ports.empty() && !node.nic.ports[0].name.empty()) {
          node.name = claim(node.nic.ports[0].name);
        } else if (!node.nic.ports.empty() && !node.nic.ports[0].netdev.empty()) {
          node.name = claim(node.nic.ports[0].netdev);
        } else {
          node.name = claim(absl::StrCat("NIC", nic_ordinal));
        }
        ++nic_ordinal;
        break;
      case NodeType::kCpu:
        node.name = claim(node.cpu.numa_id >= 0 ? absl::StrCat("NUMA", node.cpu.numa_id)
                                                : absl::StrCat("CPU", cpu_ordinal));
        ++cpu_ordinal;
        break;
      case NodeType::kPciSwitch:
        node.name = claim(node.pci.bus_id.empty() ? std::string("PCI")
                                                  : absl::StrCat("PCI ", node.pci.bus_id));
        break;
      case NodeType::kNvSwitch:
        node.name = claim("NVSwitch");
        break;
    }
  }
}

}  // namespace baton::topology
