#include "topology/nccl_xml.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "topology/xml.h"

namespace baton::topology {

namespace {

absl::Status AttrError(const XmlElement& e, absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("NCCL XML line ", e.line, ": <", e.name, "> ", key, " ", problem));
}

// Integers as NCCL reads them (strtol base 0): decimal or 0x-prefixed hex.
absl::StatusOr<int64_t> ParseInteger(const XmlElement& e, absl::string_view key,
                                     const std::string& text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  int64_t value = 0;
  bool ok;
  if (absl::StartsWithIgnoreCase(s, "0x")) {
    ok = s.size() > 2 && absl::SimpleHexAtoi(s.substr(2), &value);
  } else {
    ok = absl::SimpleAtoi(s, &value);
  }
  if (!ok) return AttrError(e, key, absl::StrCat("\"", text, "\" is not an integer"));
  return value;
}

// Reads optional integer attribute `key` into `*out` (left unchanged when absent).
template <typename T>
absl::Status OptionalInt(const XmlElement& e, absl::string_view key, T* out) {
  const std::string* text = e.Attribute(key);
  if (text == nullptr) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(const int64_t value, ParseInteger(e, key, *text));
  *out = static_cast<T>(value);
  return absl::OkStatus();
}

absl::Status OptionalDouble(const XmlElement& e, absl::string_view key, double* out) {
  const std::string* text = e.Attribute(key);
  if (text == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtod(*text, out) || !std::isfinite(*out)) {
    return AttrError(e, key, absl::StrCat("\"", *text, "\" is not a number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RequiredBusId(const XmlElement& e, absl::string_view key) {
  const std::string* text = e.Attribute(key);
  if (text == nullptr) return AttrError(e, key, "is missing");
  absl::StatusOr<std::string> bus_id = NormalizeBusId(*text);
  if (!bus_id.ok()) return AttrError(e, key, bus_id.status().message());
  return bus_id;
}

// A class attribute: "0x030200"; a 16-bit "0x0302" is widened with a zero prog-if.
absl::StatusOr<int> ParseClass(const XmlElement& e, const std::string& text) {
  BATON_ASSIGN_OR_RETURN(const int64_t value, ParseInteger(e, "class", text));
  if (value < 0 || value > 0xffffff) return AttrError(e, "class", "is out of range");
  const size_t digits = absl::StartsWithIgnoreCase(text, "0x") ? text.size() - 2 : text.size();
  return static_cast<int>(digits <= 4 ? value << 8 : value);
}

void KeepUnknownAttributes(const XmlElement& e, std::initializer_list<absl::string_view> known,
                           Node* node) {
  for (const auto& [key, value] : e.attributes) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      node->attributes.emplace_back(key, value);
    }
  }
}

class NcclImporter {
 public:
  absl::StatusOr<Graph> Import(const XmlElement& root) {
    if (root.name == "graphs") {
      return absl::InvalidArgumentError(
          "this is an NCCL graph (search result) file, not a topology; see ImportNcclGraphXml");
    }
    if (root.name != "system") {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL topology XML must have a <system> root, found <", root.name, ">"));
    }
    graph_.source = "nccl-xml";
    if (const std::string* version = root.Attribute("version")) {
      graph_.attributes.emplace_back("nccl_xml_version", *version);
    }
    for (const XmlElement* cpu : root.Children("cpu")) {
      BATON_RETURN_IF_ERROR(ImportCpu(*cpu));
    }
    BATON_RETURN_IF_ERROR(ResolveLinks());
    FlattenBroadcomSwitches(graph_);
    ConnectCpus(graph_);
    AssignDefaultNames(graph_);
    for (Node& node : graph_.nodes) SortAttributes(node.attributes);
    BATON_RETURN_IF_ERROR(ValidateGraph(graph_));
    return std::move(graph_);
  }

 private:
  struct PendingNvLink {
    const XmlElement* element;
    int gpu;
  };
  struct PendingPciLink {
    const XmlElement* element;
    int from;
  };

  absl::Status ImportCpu(const XmlElement& e) {
    Node cpu;
    cpu.type = NodeType::kCpu;
    BATON_RETURN_IF_ERROR(OptionalInt(e, "numaid", &cpu.cpu.numa_id));
    if (const std::string* affinity = e.Attribute("affinity")) {
      absl::StatusOr<std::vector<int>> cpus = ParseCpuMask(*affinity);
      if (!cpus.ok()) return AttrError(e, "affinity", cpus.status().message());
      cpu.cpu.cpus = *std::move(cpus);
    }
    if (const std::string* arch = e.Attribute("arch")) cpu.cpu.arch = *arch;
    if (const std::string* vendor = e.Attribute("vendor")) cpu.cpu.vendor = *vendor;
    BATON_RETURN_IF_ERROR(OptionalInt(e, "familyid", &cpu.cpu.family));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "modelid", &cpu.cpu.model));
    KeepUnknownAttributes(e, {"numaid", "affinity", "arch", "vendor", "familyid", "modelid"}, &cpu);
    const int id = graph_.AddNode(std::move(cpu));
    for (const XmlElement& child : e.children) {
      if (child.name == "pci") {
        BATON_RETURN_IF_ERROR(ImportPci(child, id));
      } else if (child.name == "nic") {
        // A NIC without a PCI device (virtual NICs): NCCL links it to the CPU at LOC_BW.
        Node nic;
        nic.type = NodeType::kNic;
        BATON_RETURN_IF_ERROR(ImportPorts(child, &nic.nic));
        const int nic_id = graph_.AddNode(std::move(nic));
        AddPciLink(id, nic_id, 0, 0, kLocalBandwidth);
      }
    }
    return absl::OkStatus();
  }

  void AddPciLink(int up, int down, double gts, int width, double bandwidth) {
    Link link;
    link.a = up;
    link.b = down;
    link.type = LinkType::kPci;
    link.pcie_gts = gts;
    link.pcie_width = width;
    link.bandwidth_gbps = bandwidth;
    graph_.AddLink(link);
  }

  absl::Status ImportPci(const XmlElement& e, int parent) {
    Node node;
    BATON_ASSIGN_OR_RETURN(node.pci.bus_id, RequiredBusId(e, "busid"));
    const std::string* class_text = e.Attribute("class");
    if (class_text == nullptr) return AttrError(e, "class", "is missing");
    BATON_ASSIGN_OR_RETURN(node.pci.class_code, ParseClass(e, *class_text));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "vendor", &node.pci.vendor));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "device", &node.pci.device));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "subsystem_vendor", &node.pci.subsystem_vendor));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "subsystem_device", &node.pci.subsystem_device));
    double gts = 0;
    if (const std::string* speed = e.Attribute("link_speed")) gts = ParsePcieGts(*speed);
    int width = 0;
    BATON_RETURN_IF_ERROR(OptionalInt(e, "link_width", &width));

    const std::vector<const XmlElement*> gpus = e.Children("gpu");
    const std::vector<const XmlElement*> nics = e.Children("nic");
    const std::vector<const XmlElement*> pcis = e.Children("pci");
    const int base_class = node.pci.class_code >> 16;
    if (gpus.size() > 1 || nics.size() > 1 || (!gpus.empty() && !nics.empty())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL XML line ", e.line, ": <pci> with several <gpu>/<nic> children is not supported"));
    }
    if (!gpus.empty() || (base_class == 0x03 && nics.empty() && pcis.empty())) {
      node.type = NodeType::kGpu;
      if (!gpus.empty()) BATON_RETURN_IF_ERROR(ImportGpu(*gpus[0], &node));
    } else if (!nics.empty() || (base_class == 0x02 && pcis.empty())) {
      node.type = NodeType::kNic;
      if (!nics.empty()) BATON_RETURN_IF_ERROR(ImportPorts(*nics[0], &node.nic));
    } else if (!pcis.empty() || node.pci.class_code == 0x060400) {
      node.type = NodeType::kPciSwitch;
    } else {
      return absl::OkStatus();  // another leaf device (storage, ...): not part of the model
    }
    if (node.type != NodeType::kPciSwitch && !pcis.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL XML line ", e.line, ": a GPU or NIC <pci> cannot have <pci> children"));
    }
    const NodeType type = node.type;
    const int id = graph_.AddNode(std::move(node));
    AddPciLink(parent, id, gts, width, PcieBandwidth(gts, width));
    if (type == NodeType::kGpu && !gpus.empty()) {
      for (const XmlElement& child : gpus[0]->children) {
        if (child.name == "nvlink" || child.name == "c2c") nvlinks_.push_back({&child, id});
      }
    }
    for (const XmlElement* link : e.Children("pcilink")) pci_links_.push_back({link, id});
    for (const XmlElement* child : pcis) BATON_RETURN_IF_ERROR(ImportPci(*child, id));
    return absl::OkStatus();
  }

  absl::Status ImportGpu(const XmlElement& e, Node* node) {
    BATON_RETURN_IF_ERROR(OptionalInt(e, "dev", &node->gpu.index));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "rank", &node->gpu.rank));
    BATON_RETURN_IF_ERROR(OptionalInt(e, "sm", &node->gpu.compute_capability));
    int gdr = 0;
    BATON_RETURN_IF_ERROR(OptionalInt(e, "gdr", &gdr));
    node->gpu.gdr = gdr != 0;
    KeepUnknownAttributes(e, {"dev", "rank", "sm", "gdr"}, node);
    return absl::OkStatus();
  }

  absl::Status ImportPorts(const XmlElement& nic, NicInfo* info) {
    for (const XmlElement* net : nic.Children("net")) {
      NicPort port;
      const std::string* name = net->Attribute("name");
      if (name == nullptr || name->empty()) return AttrError(*net, "name", "is missing");
      port.name = *name;
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "dev", &port.dev));
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "speed", &port.speed_mbps));
      if (port.speed_mbps < 0) port.speed_mbps = 0;  // NICs may report -1 (unknown)
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "port", &port.port));
      if (const std::string* guid = net->Attribute("guid")) {
        // NCCL reads the GUID with strtoull(..., 16): hex with or without "0x".
        absl::string_view digits = *guid;
        if (absl::StartsWithIgnoreCase(digits, "0x")) digits.remove_prefix(2);
        if (!absl::SimpleHexAtoi(digits, &port.guid)) {
          return AttrError(*net, "guid", absl::StrCat("\"", *guid, "\" is not hex"));
        }
      }
      BATON_RETURN_IF_ERROR(OptionalDouble(*net, "latency", &port.latency_us));
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "maxconn", &port.max_connections));
      int flag = 0;
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "gdr", &flag));
      port.gdr = flag != 0;
      flag = 0;
      BATON_RETURN_IF_ERROR(OptionalInt(*net, "coll", &flag));
      port.coll = flag != 0;
      info->ports.push_back(std::move(port));
    }
    return absl::OkStatus();
  }

  int NvSwitchNode() {
    if (nvswitch_ < 0) {
      Node node;
      node.type = NodeType::kNvSwitch;
      nvswitch_ = graph_.AddNode(std::move(node));
    }
    return nvswitch_;
  }

  // Adds `count` NVLinks between `a` and `b`, merging with an existing link between them.
  // `sum` adds counts (several switch devices merged into one vertex); otherwise the larger count
  // wins (both GPUs of a direct GPU-GPU link list it).
  void AddNvLinks(int a, int b, int count, bool sum) {
    const double per_link = NvLinkBandwidthPerLink(graph_.nodes[a].gpu.compute_capability);
    for (Link& l : graph_.links) {
      if (l.type == LinkType::kNvLink && ((l.a == a && l.b == b) || (l.a == b && l.b == a))) {
        l.nvlink_count = sum ? l.nvlink_count + count : std::max(l.nvlink_count, count);
        l.bandwidth_gbps = l.nvlink_count * l.nvlink_per_link_gbps;
        return;
      }
    }
    Link link;
    link.a = a;
    link.b = b;
    link.type = LinkType::kNvLink;
    link.nvlink_count = count;
    link.nvlink_per_link_gbps = per_link;
    link.bandwidth_gbps = count * per_link;
    graph_.AddLink(link);
  }

  absl::Status ResolveLinks() {
    for (const PendingNvLink& pending : nvlinks_) {
      const XmlElement& e = *pending.element;
      const int cpu = graph_.CpuOf(pending.gpu);
      if (e.name == "c2c") {
        double bw = 0;
        int count = 0;
        BATON_RETURN_IF_ERROR(OptionalDouble(e, "bw", &bw));
        BATON_RETURN_IF_ERROR(OptionalInt(e, "count", &count));
        if (cpu < 0 || count <= 0) continue;
        Link link;
        link.a = pending.gpu;
        link.b = cpu;
        link.type = LinkType::kC2c;
        link.bandwidth_gbps = bw * count / 1000.0;
        graph_.AddLink(link);
        continue;
      }
      int count = 0;
      BATON_RETURN_IF_ERROR(OptionalInt(e, "count", &count));
      if (count <= 0) continue;
      int tclass = 0x068000;  // NCCL's assumption when the target is not visible
      if (const std::string* text = e.Attribute("tclass")) {
        BATON_ASSIGN_OR_RETURN(tclass, ParseClass(e, *text));
      }
      const std::string* target_text = e.Attribute("target");
      absl::StatusOr<std::string> target = target_text == nullptr
                                               ? absl::InvalidArgumentError("missing")
                                               : NormalizeBusId(*target_text);
      if ((tclass >> 16) == 0x03) {
        if (!target.ok()) return AttrError(e, "target", target.status().message());
        const int peer = graph_.FindByBusId(*target);
        if (peer < 0 || graph_.nodes[peer].type != NodeType::kGpu) {
          return AttrError(e, "target", absl::StrCat(*target, " is not a GPU in this file"));
        }
        AddNvLinks(pending.gpu, peer, count, /*sum=*/false);
      } else if (tclass == 0x068001) {
        if (cpu >= 0) AddNvLinks(pending.gpu, cpu, count, /*sum=*/true);
      } else {
        const int nvs = NvSwitchNode();
        std::vector<std::string>& ids = graph_.nodes[nvs].nvswitch.bus_ids;
        // VMs report unreachable targets like "fffffff:ffff:ff"; those name no device.
        if (target.ok() && std::find(ids.begin(), ids.end(), *target) == ids.end()) {
          ids.push_back(*target);
          std::sort(ids.begin(), ids.end());
        }
        AddNvLinks(pending.gpu, nvs, count, /*sum=*/true);
      }
    }
    for (const PendingPciLink& pending : pci_links_) {
      BATON_ASSIGN_OR_RETURN(const std::string target, RequiredBusId(*pending.element, "target"));
      const int peer = graph_.FindByBusId(target);
      if (peer < 0) {
        return AttrError(*pending.element, "target", absl::StrCat(target, " is not in this file"));
      }
      bool exists = false;
      for (const Link& l : graph_.links) {
        exists |= l.type == LinkType::kLocal &&
                  ((l.a == peer && l.b == pending.from) || (l.a == pending.from && l.b == peer));
      }
      if (exists) continue;
      Link link;
      link.a = pending.from;
      link.b = peer;
      link.type = LinkType::kLocal;
      link.bandwidth_gbps = kLocalBandwidth;
      graph_.AddLink(link);
    }
    return absl::OkStatus();
  }

  Graph graph_;
  int nvswitch_ = -1;
  std::vector<PendingNvLink> nvlinks_;
  std::vector<PendingPciLink> pci_links_;
};

}  // namespace

absl::StatusOr<Graph> ImportNcclTopologyXml(absl::string_view xml) {
  BATON_ASSIGN_OR_RETURN(const XmlElement root, ParseXml(xml));
  return NcclImporter().Import(root);
}

absl::StatusOr<std::vector<NcclSearchGraph>> ImportNcclGraphXml(absl::string_view xml) {
  BATON_ASSIGN_OR_RETURN(const XmlElement root, ParseXml(xml));
  if (root.name != "graphs") {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL graph XML must have a <graphs> root, found <", root.name, ">"));
  }
  std::vector<NcclSearchGraph> graphs;
  for (const XmlElement* e : root.Children("graph")) {
    NcclSearchGraph g;
    BATON_RETURN_IF_ERROR(OptionalInt(*e, "id", &g.id));
    BATON_RETURN_IF_ERROR(OptionalInt(*e, "pattern", &g.pattern));
    BATON_RETURN_IF_ERROR(OptionalInt(*e, "crossnic", &g.cross_nic));
    BATON_RETURN_IF_ERROR(OptionalInt(*e, "nchannels", &g.declared_channels));
    BATON_RETURN_IF_ERROR(OptionalDouble(*e, "speedintra", &g.speed_intra));
    BATON_RETURN_IF_ERROR(OptionalDouble(*e, "speedinter", &g.speed_inter));
    BATON_RETURN_IF_ERROR(OptionalDouble(*e, "latencyinter", &g.latency_inter));
    for (auto [key, out] :
         {std::pair{"typeintra", &g.type_intra}, std::pair{"typeinter", &g.type_inter}}) {
      if (const std::string* text = e->Attribute(key)) {
        absl::StatusOr<PathType> type = ParsePathType(*text);
        if (!type.ok()) return AttrError(*e, key, type.status().message());
        *out = *type;
      }
    }
    int same = 0;
    BATON_RETURN_IF_ERROR(OptionalInt(*e, "samechannels", &same));
    g.same_channels = same != 0;
    for (const XmlElement* c : e->Children("channel")) {
      NcclChannel channel;
      for (const XmlElement& member : c->children) {
        int dev = -1;
        BATON_RETURN_IF_ERROR(OptionalInt(member, "dev", &dev));
        if (dev < 0) return AttrError(member, "dev", "is missing");
        if (member.name == "gpu") channel.gpu_devs.push_back(dev);
        if (member.name == "net") channel.net_devs.push_back(dev);
      }
      g.channels.push_back(std::move(channel));
    }
    graphs.push_back(std::move(g));
  }
  return graphs;
}

}  // namespace baton::topology
