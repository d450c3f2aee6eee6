#include "topology/hwloc_import.h"

#include <hwloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace baton::topology {

namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

absl::StatusOr<TopologyPtr> NewTopology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return BATON_ERRNO_STATUS("hwloc_topology_init");
  TopologyPtr topology(raw);
  if (hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
    return BATON_ERRNO_STATUS("hwloc_topology_set_io_types_filter");
  }
  return topology;
}

const char* Info(hwloc_obj_t obj, const char* name) {
  return obj == nullptr ? nullptr : hwloc_obj_get_info_by_name(obj, name);
}

std::vector<int> BitmapToVector(hwloc_const_bitmap_t bitmap) {
  std::vector<int> out;
  if (bitmap == nullptr || hwloc_bitmap_weight(bitmap) < 0) return out;  // empty or infinite
  for (int i = hwloc_bitmap_first(bitmap); i >= 0; i = hwloc_bitmap_next(bitmap, i)) {
    out.push_back(i);
  }
  return out;
}

std::string BusIdOf(hwloc_obj_t obj) {
  const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci =
      obj->type == HWLOC_OBJ_BRIDGE ? obj->attr->bridge.upstream.pci : obj->attr->pcidev;
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.dev, pci.func);
  return text;
}

PciInfo PciInfoOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci, const std::string& bus_id) {
  PciInfo info;
  info.bus_id = bus_id;
  info.class_code = static_cast<int>(pci.class_id) << 8;
  info.vendor = pci.vendor_id;
  info.device = pci.device_id;
  info.subsystem_vendor = pci.subvendor_id;
  info.subsystem_device = pci.subdevice_id;
  return info;
}

bool HasComputeOsDevice(hwloc_obj_t pci) {
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || c->subtype == nullptr) continue;
    for (const char* kind : {"CUDA", "NVML", "OpenCL", "RSMI", "LevelZero"}) {
      if (absl::EqualsIgnoreCase(c->subtype, kind)) return true;
    }
  }
  return false;
}

bool IsGpu(hwloc_obj_t pci) {
  const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a = pci->attr->pcidev;
  if ((a.class_id >> 8) != 0x03) return false;
  return a.vendor_id == 0x10de || a.vendor_id == 0x1002 || a.vendor_id == 0x1d94 ||
         HasComputeOsDevice(pci);
}

bool IsNic(hwloc_obj_t pci) { return (pci->attr->pcidev.class_id >> 8) == 0x02; }

bool IsNvSwitch(hwloc_obj_t pci) {
  return (pci->attr->pcidev.class_id == 0x0680 && pci->attr->pcidev.vendor_id == 0x10de) ||
         (pci->subtype != nullptr && absl::EqualsIgnoreCase(pci->subtype, "NVSwitch"));
}

// Index from an OS device name like "nvml3" / "cuda3" / "rsmi3".
int TrailingIndex(const char* name, absl::string_view prefix) {
  absl::string_view s = name == nullptr ? "" : name;
  int index;
  if (!absl::ConsumePrefix(&s, prefix) || !absl::SimpleAtoi(s, &index)) return -1;
  return index;
}

void FillGpu(hwloc_obj_t pci, Node* node) {
  int nvml = -1, cuda = -1, rsmi = -1;
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
    if (nvml < 0) nvml = TrailingIndex(c->name, "nvml");
    if (cuda < 0) cuda = TrailingIndex(c->name, "cuda");
    if (rsmi < 0) rsmi = TrailingIndex(c->name, "rsmi");
    if (const char* model = Info(c, "GPUModel"); model != nullptr && node->gpu.model.empty()) {
      node->gpu.model = model;
    }
    if (const char* uuid = Info(c, "NVIDIAUUID"); uuid != nullptr) node->gpu.uuid = uuid;
    if (const char* uuid = Info(c, "AMDUUID"); uuid != nullptr) node->gpu.uuid = uuid;
    uint64_t kib;
    if (const char* mem = Info(c, "CUDAGlobalMemorySize");
        mem != nullptr && absl::SimpleAtoi(mem, &kib)) {
      node->gpu.memory_bytes = kib * 1024;
    }
  }
  node->gpu.index = nvml >= 0 ? nvml : cuda >= 0 ? cuda : rsmi;
}

std::string IbPortState(absl::string_view code) {
  static const char* const kStates[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  int value;
  if (absl::SimpleAtoi(code, &value) && value >= 0 && value <= 5) return kStates[value];
  return std::string(code);  // NOLINT(google-readability-casting): T(x) to a class type
}

void FillNic(hwloc_obj_t pci, Node* node) {
  std::vector<std::string> netdevs;
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
    if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      netdevs.push_back(c->name);
    } else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      uint64_t guid = 0;
      if (const char* text = Info(c, "NodeGUID")) {
        const std::string digits = absl::StrReplaceAll(text, {{":", ""}});
        if (!absl::SimpleHexAtoi(digits, &guid)) guid = 0;
      }
      std::map<int, std::string> states;  // port number -> state
      for (unsigned i = 0; i < c->infos_count; ++i) {
        absl::string_view key = c->infos[i].name;
        int port;
        if (absl::ConsumePrefix(&key, "Port") && absl::ConsumeSuffix(&key, "State") &&
            absl::SimpleAtoi(key, &port)) {
          states[port] = IbPortState(c->infos[i].value);
        }
      }
      if (states.empty()) states[1] = "";
      for (const auto& [number, state] : states) {
        NicPort port;
        port.name = c->name;
        port.port = number;
        port.state = state;
        port.guid = guid;
        node->nic.ports.push_back(std::move(port));
      }
    }
  }
  if (node->nic.ports.empty()) {
    for (const std::string& netdev : netdevs) {
      NicPort port;
      port.name = netdev;
      port.netdev = netdev;
      node->nic.ports.push_back(std::move(port));
    }
  } else if (netdevs.size() == node->nic.ports.size()) {
    // hwloc does not say which interface belongs to which port; they are listed in order.
    for (size_t i = 0; i < netdevs.size(); ++i) node->nic.ports[i].netdev = netdevs[i];
  }
}

class HwlocConverter {
 public:
  explicit HwlocConverter(hwloc_topology_t topology) : topology_(topology) {}

  absl::StatusOr<Graph> Convert() {
    hwloc_obj_t root = hwloc_get_root_obj(topology_);
    if (const char* host = Info(root, "HostName")) graph_.hostname = host;
    for (auto [info, key] : {std::pair{"DMIProductName", "dmi_product_name"},
                             std::pair{"DMIBoardVendor", "dmi_board_vendor"}}) {
      if (const char* value = Info(root, info)) graph_.attributes.emplace_back(key, value);
    }
    SortAttributes(graph_.attributes);
    AddCpus(Info(root, "Architecture"));
    if (graph_.nodes.empty()) return absl::InvalidArgumentError("hwloc topology has no NUMA node");
    for (hwloc_obj_t pci = hwloc_get_next_pcidev(topology_, nullptr); pci != nullptr;
         pci = hwloc_get_next_pcidev(topology_, pci)) {
      const bool gpu = IsGpu(pci);
      if (gpu || IsNic(pci)) AddEndpoint(pci, gpu);
    }
    AddNvLinks();
    FlattenBroadcomSwitches(graph_);
    ConnectCpus(graph_);
    AssignDefaultNames(graph_);
    BATON_RETURN_IF_ERROR(ValidateGraph(graph_));
    return std::move(graph_);
  }

 private:
  void AddCpus(const char* arch) {
    const int numa_count = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
    bool any_with_cpus = false;
    for (int i = 0; i < numa_count; ++i) {
      hwloc_obj_t numa = hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, i);
      any_with_cpus |= numa->cpuset != nullptr && !hwloc_bitmap_iszero(numa->cpuset);
    }
    for (int i = 0; i < numa_count; ++i) {
      hwloc_obj_t numa = hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, i);
      const bool has_cpus = numa->cpuset != nullptr && !hwloc_bitmap_iszero(numa->cpuset);
      if (any_with_cpus && !has_cpus) continue;  // memory-only (GPU memory, CXL, ...)
      Node node;
      node.type = NodeType::kCpu;
      node.cpu.numa_id = static_cast<int>(numa->os_index);
      node.cpu.cpus = BitmapToVector(numa->cpuset);
      node.cpu.memory_bytes = numa->attr->numanode.local_memory;
      if (arch != nullptr) node.cpu.arch = arch;
      hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topology_, HWLOC_OBJ_PACKAGE, numa);
      if (package != nullptr) {
        node.cpu.package = static_cast<int>(package->os_index);
        if (const char* v = Info(package, "CPUVendor")) node.cpu.vendor = v;
        if (const char* v = Info(package, "CPUModel")) {
          node.cpu.model_name = std::string(absl::StripTrailingAsciiWhitespace(v));
        }
        int number;
        if (const char* v = Info(package, "CPUFamilyNumber"); v && absl::SimpleAtoi(v, &number)) {
          node.cpu.family = number;
        }
        if (const char* v = Info(package, "CPUModelNumber"); v && absl::SimpleAtoi(v, &number)) {
          node.cpu.model = number;
        }
      }
      const int numa_id = node.cpu.numa_id;
      cpu_by_numa_[numa_id] = graph_.AddNode(std::move(node));
    }
  }

  // CPU node for the first NUMA node in `nodeset`, or the first CPU node.
  int CpuForNodeset(hwloc_const_nodeset_t nodeset) {
    if (nodeset != nullptr) {
      for (int i = hwloc_bitmap_first(nodeset); i >= 0; i = hwloc_bitmap_next(nodeset, i)) {
        auto it = cpu_by_numa_.find(i);
        if (it != cpu_by_numa_.end()) return it->second;
      }
    }
    return 0;
  }

  int CpuForObject(hwloc_obj_t obj) {
    hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topology_, obj);
    return CpuForNodeset(anchor == nullptr ? nullptr : anchor->nodeset);
  }

  void AddPciLink(int up, int down, float hwloc_gbps) {
    Link link;
    link.a = up;
    link.b = down;
    link.type = LinkType::kPci;
    link.bandwidth_gbps =
        hwloc_gbps > 0 ? std::round(double{hwloc_gbps} * 1e6) / 1e6 : kDefaultPciBandwidth;
    graph_.AddLink(link);
  }

  // Returns the switch node for the bridge `bridge`, creating it and its chain to the CPU.
  int SwitchNode(hwloc_obj_t bridge) {
    const std::string bus_id = BusIdOf(bridge);
    auto it = node_by_bus_id_.find(bus_id);
    if (it != node_by_bus_id_.end()) return it->second;
    Node node;
    node.type = NodeType::kPciSwitch;
    node.pci = PciInfoOf(bridge->attr->bridge.upstream.pci, bus_id);
    const int id = graph_.AddNode(std::move(node));
    node_by_bus_id_[bus_id] = id;
    AddPciLink(UpstreamNode(bridge), id, bridge->attr->bridge.upstream.pci.linkspeed);
    return id;
  }

  // The graph node `obj` hangs from: the nearest kept switch above it, or its CPU.
  int UpstreamNode(hwloc_obj_t obj) {
    for (hwloc_obj_t p = obj->parent; p != nullptr && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
      const hwloc_obj_attr_u::hwloc_bridge_attr_s& b = p->attr->bridge;
      if (b.upstream_type == HWLOC_OBJ_BRIDGE_PCI && b.depth >= 2 && b.depth % 2 == 0) {
        return SwitchNode(p);
      }
    }
    return CpuForObject(obj);
  }

  void AddEndpoint(hwloc_obj_t pci, bool gpu) {
    const std::string bus_id = BusIdOf(pci);
    if (node_by_bus_id_.count(bus_id) > 0) return;
    Node node;
    node.type = gpu ? NodeType::kGpu : NodeType::kNic;
    node.pci = PciInfoOf(pci->attr->pcidev, bus_id);
    if (gpu) {
      FillGpu(pci, &node);
    } else {
      FillNic(pci, &node);
    }
    const int up = UpstreamNode(pci);
    const int id = graph_.AddNode(std::move(node));
    node_by_bus_id_[bus_id] = id;
    AddPciLink(up, id, pci->attr->pcidev.linkspeed);
  }

  // Graph node for an object of the NVLink matrix, or -1.
  int NvLinkEndpoint(hwloc_obj_t obj) {
    if (obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
    if (obj == nullptr) return -1;
    if (obj->type == HWLOC_OBJ_PACKAGE) return CpuForNodeset(obj->nodeset);
    if (obj->type != HWLOC_OBJ_PCI_DEVICE) return -1;
    auto it = node_by_bus_id_.find(BusIdOf(obj));
    if (it != node_by_bus_id_.end()) return it->second;
    if (!IsNvSwitch(obj)) return -1;
    if (nvswitch_ < 0) {
      Node node;
      node.type = NodeType::kNvSwitch;
      nvswitch_ = graph_.AddNode(std::move(node));
    }
    std::vector<std::string>& ids = graph_.nodes[nvswitch_].nvswitch.bus_ids;
    const std::string bus_id = BusIdOf(obj);
    if (std::find(ids.begin(), ids.end(), bus_id) == ids.end()) {
      ids.push_back(bus_id);
      std::sort(ids.begin(), ids.end());
    }
    return nvswitch_;
  }

  static double HwlocPerLinkGbps(const std::string& model) {
    if (absl::StrContains(model, "P100")) return 20;
    if (absl::StrContains(model, "B100") || absl::StrContains(model, "B200") ||
        absl::StrContains(model, "GB200") || absl::StrContains(model, "B300")) {
      return 50;
    }
    return 25;
  }

  void AddNvLink(int gpu, int peer, double gbps) {
    const double per_link = HwlocPerLinkGbps(graph_.nodes[gpu].gpu.model);
    for (Link& l : graph_.links) {
      if (l.type == LinkType::kNvLink &&
          ((l.a == gpu && l.b == peer) || (l.a == peer && l.b == gpu))) {
        // Several NVSwitch devices merged into one vertex: their links add up.
        l.bandwidth_gbps += gbps;
        const double count = l.bandwidth_gbps / l.nvlink_per_link_gbps;
        l.nvlink_count = count == std::round(count) ? static_cast<int>(count) : 0;
        return;
      }
    }
    Link link;
    link.a = gpu;
    link.b = peer;
    link.type = LinkType::kNvLink;
    link.bandwidth_gbps = gbps;
    link.nvlink_per_link_gbps = per_link;
    const double count = gbps / per_link;
    link.nvlink_count = count == std::round(count) ? static_cast<int>(count) : 0;
    graph_.AddLink(link);
  }

  void AddNvLinks() {
    hwloc_distances_s* distances = nullptr;
    unsigned count = 1;
    if (hwloc_distances_get_by_name(topology_, "NVLinkBandwidth", &count, &distances, 0) != 0 ||
        count == 0) {
      return;
    }
    const unsigned n = distances->nbobjs;
    std::vector<int> endpoint(n);
    for (unsigned i = 0; i < n; ++i) endpoint[i] = NvLinkEndpoint(distances->objs[i]);
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned j = i + 1; j < n; ++j) {
        const uint64_t mbps = std::max(distances->values[i * n + j], distances->values[j * n + i]);
        int a = endpoint[i], b = endpoint[j];
        if (mbps == 0 || a < 0 || b < 0 || a == b) continue;
        if (graph_.nodes[a].type != NodeType::kGpu) std::swap(a, b);
        if (graph_.nodes[a].type != NodeType::kGpu) continue;  // switch-switch trunks
        AddNvLink(a, b, static_cast<double>(mbps) / 1000.0);
      }
    }
    hwloc_distances_release(topology_, distances);
  }

  hwloc_topology_t topology_;
  Graph graph_;
  std::map<int, int> cpu_by_numa_;
  std::map<std::string, int> node_by_bus_id_;
  int nvswitch_ = -1;
};

}  // namespace

absl::StatusOr<Graph> GraphFromHwloc(hwloc_topology* topology) {
  return HwlocConverter(topology).Convert();
}

absl::StatusOr<Graph> ImportHwlocXml(absl::string_view xml) {
  BATON_ASSIGN_OR_RETURN(TopologyPtr topology, NewTopology());
  const std::string buffer(xml);  // hwloc wants the terminating NUL counted in the size
  if (hwloc_topology_set_xmlbuffer(topology.get(), buffer.c_str(),
                                   static_cast<int>(buffer.size() + 1)) != 0) {
    return absl::InvalidArgumentError("hwloc rejected the XML buffer");
  }
  if (hwloc_topology_load(topology.get()) != 0) {
    return absl::InvalidArgumentError("hwloc could not load the XML topology");
  }
  BATON_ASSIGN_OR_RETURN(Graph graph, GraphFromHwloc(topology.get()));
  graph.source = "hwloc-xml";
  return graph;
}

absl::StatusOr<Graph> DiscoverWithHwloc() {
  BATON_ASSIGN_OR_RETURN(TopologyPtr topology, NewTopology());
  // hwloc's Linux backend reads the PCI tree, link speeds and NUMA locality from sysfs itself. The
  // libpciaccess-based "pci" component adds nothing we use (it leaks inside libpciaccess on every
  // load), and the OpenCL/GL components only slow discovery down: GPUs come from NVML.
  for (const char* component : {"pci", "opencl", "gl"}) {
    hwloc_topology_set_components(topology.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                  component);
  }
  if (hwloc_topology_load(topology.get()) != 0) return BATON_ERRNO_STATUS("hwloc_topology_load");
  BATON_ASSIGN_OR_RETURN(Graph graph, GraphFromHwloc(topology.get()));
  graph.source = "live";
  return graph;
}

}  // namespace baton::topology
