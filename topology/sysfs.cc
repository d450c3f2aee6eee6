#include "topology/sysfs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace baton::topology {

namespace fs = std::filesystem;

namespace {

// Contents of a small sysfs file without the trailing newline, or "" when unreadable.
std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream buffer;
  buffer << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(buffer.str()));
}

int ReadInt(const fs::path& path, int fallback) {
  int value;
  return absl::SimpleAtoi(ReadFile(path), &value) ? value : fallback;
}

// The deepest "dddd:bb:dd.f" component of a resolved device path and the path up to it.
bool PciAncestor(const fs::path& device, std::string* bus_id, fs::path* pci_dir) {
  fs::path prefix;
  bool found = false;
  for (const fs::path& part : device) {
    prefix /= part;
    const std::string name = part.string();
    absl::StatusOr<std::string> id = NormalizeBusId(name);
    // Require the full spelling with a domain ("0000:00:03.0"), not a shorter coincidence.
    if (id.ok() && std::count(name.begin(), name.end(), ':') == 2) {
      *bus_id = *id;
      *pci_dir = prefix;
      found = true;
    }
  }
  return found;
}

std::vector<std::string> ListDir(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t ParseGuid(const std::string& text) {
  uint64_t guid;
  return absl::SimpleHexAtoi(absl::StrReplaceAll(text, {{":", ""}}), &guid) ? guid : 0;
}

}  // namespace

absl::StatusOr<std::vector<SysfsNetInterface>> ScanNetInterfaces(const std::string& sysfs_root) {
  std::vector<SysfsNetInterface> out;
  const fs::path class_dir = fs::path(sysfs_root) / "class" / "net";
  for (const std::string& name : ListDir(class_dir)) {
    const fs::path dir = class_dir / name;
    std::error_code ec;
    const fs::path device = fs::canonical(dir / "device", ec);
    if (ec) continue;  // virtual interface (lo, bridges, ifb, ...)
    SysfsNetInterface iface;
    iface.name = name;
    fs::path pci_dir;
    if (!PciAncestor(device, &iface.pci_bus_id, &pci_dir)) continue;
    int64_t speed;
    if (absl::SimpleAtoi(ReadFile(dir / "speed"), &speed) && speed > 0) iface.speed_mbps = speed;
    iface.operstate = ReadFile(dir / "operstate");
    iface.dev_port = ReadInt(dir / "dev_port", -1);
    iface.numa_node = ReadInt(pci_dir / "numa_node", -1);
    iface.ib_devices = ListDir(device / "infiniband");
    out.push_back(std::move(iface));
  }
  return out;
}

absl::StatusOr<std::vector<SysfsIbDevice>> ScanInfinibandDevices(const std::string& sysfs_root) {
  std::vector<SysfsIbDevice> out;
  const fs::path class_dir = fs::path(sysfs_root) / "class" / "infiniband";
  for (const std::string& name : ListDir(class_dir)) {
    const fs::path dir = class_dir / name;
    SysfsIbDevice ib;
    ib.name = name;
    std::error_code ec;
    const fs::path device = fs::canonical(dir / "device", ec);
    fs::path pci_dir;
    if (!ec && PciAncestor(device, &ib.pci_bus_id, &pci_dir)) {
      ib.numa_node = ReadInt(pci_dir / "numa_node", -1);
    }
    ib.node_guid = ParseGuid(ReadFile(dir / "node_guid"));
    for (const std::string& port_name : ListDir(dir / "ports")) {
      SysfsIbPort port;
      if (!absl::SimpleAtoi(port_name, &port.port)) continue;
      const fs::path port_dir = dir / "ports" / port_name;
      // "100 Gb/sec (4X EDR)"
      const std::string rate = ReadFile(port_dir / "rate");
      double gbps;
      if (absl::SimpleAtod(rate.substr(0, rate.find(' ')), &gbps)) {
        port.rate_mbps = std::lround(gbps * 1000);
      }
      // "4: ACTIVE"
      const std::string state = ReadFile(port_dir / "state");
      const size_t colon = state.find(':');
      port.state = colon == std::string::npos
                       ? state
                       : std::string(absl::StripAsciiWhitespace(state.substr(colon + 1)));
      port.link_layer = ReadFile(port_dir / "link_layer");
      ib.ports.push_back(std::move(port));
    }
    std::sort(ib.ports.begin(), ib.ports.end(),
              [](const SysfsIbPort& x, const SysfsIbPort& y) { return x.port < y.port; });
    out.push_back(std::move(ib));
  }
  return out;
}

SysfsPciLink ReadPciLink(const std::string& sysfs_root, const std::string& bus_id) {
  SysfsPciLink link;
  std::error_code ec;
  const fs::path device = fs::canonical(fs::path(sysfs_root) / "bus/pci/devices" / bus_id, ec);
  if (ec) return link;
  link.gts = ParsePcieGts(ReadFile(device / "max_link_speed"));
  link.width = ReadInt(device / "max_link_width", 0);
  // NCCL takes the minimum with the upstream port: the link runs at what both ends support.
  const fs::path upstream = device.parent_path();
  const double up_gts = ParsePcieGts(ReadFile(upstream / "max_link_speed"));
  const int up_width = ReadInt(upstream / "max_link_width", 0);
  if (up_gts > 0 && (link.gts == 0 || up_gts < link.gts)) link.gts = up_gts;
  if (up_width > 0 && (link.width == 0 || up_width < link.width)) link.width = up_width;
  return link;
}

int ReadPciNumaNode(const std::string& sysfs_root, const std::string& bus_id) {
  return ReadInt(fs::path(sysfs_root) / "bus/pci/devices" / bus_id / "numa_node", -1);
}

namespace {

int CpuForNuma(const Graph& graph, int numa) {
  for (const Node& node : graph.nodes) {
    if (node.type == NodeType::kCpu && node.cpu.numa_id == numa) return node.id;
  }
  const std::vector<int> cpus = graph.NodesOfType(NodeType::kCpu);
  return cpus.empty() ? -1 : cpus.front();
}

// The NIC node with `bus_id`, adding one under the CPU of `numa` when hwloc did not report it.
int NicNode(Graph& graph, const std::string& bus_id, int numa) {
  const int existing = graph.FindByBusId(bus_id);
  if (existing >= 0) return graph.nodes[existing].type == NodeType::kNic ? existing : -1;
  const int cpu = CpuForNuma(graph, numa);
  if (cpu < 0) return -1;
  Node node;
  node.type = NodeType::kNic;
  node.pci.bus_id = bus_id;
  const int id = graph.AddNode(std::move(node));
  Link link;
  link.a = cpu;
  link.b = id;
  link.type = LinkType::kPci;
  link.bandwidth_gbps = kDefaultPciBandwidth;
  graph.AddLink(link);
  return id;
}

NicPort* FindPort(NicInfo& nic, const std::string& name, int port_number) {
  for (NicPort& port : nic.ports) {
    if (port.name == name && (port_number < 0 || port.port == port_number)) return &port;
  }
  return nullptr;
}

}  // namespace

void ApplySysfsNics(const std::vector<SysfsNetInterface>& interfaces,
                    const std::vector<SysfsIbDevice>& ib_devices, Graph& graph) {
  for (const SysfsIbDevice& ib : ib_devices) {
    if (ib.pci_bus_id.empty()) continue;
    const int id = NicNode(graph, ib.pci_bus_id, ib.numa_node);
    if (id < 0) continue;
    NicInfo& nic = graph.nodes[id].nic;
    nic.sysfs_numa_node = ib.numa_node;
    // hwloc may have recorded the device with a placeholder port 1 and no rate.
    for (const SysfsIbPort& p : ib.ports) {
      NicPort* port = FindPort(nic, ib.name, p.port);
      if (port == nullptr) {
        nic.ports.emplace_back();
        port = &nic.ports.back();
        port->name = ib.name;
        port->port = p.port;
      }
      port->speed_mbps = p.rate_mbps;
      port->state = p.state;
      port->link_layer = p.link_layer;
      port->guid = ib.node_guid;
    }
  }
  for (const SysfsNetInterface& iface : interfaces) {
    const int id = NicNode(graph, iface.pci_bus_id, iface.numa_node);
    if (id < 0) continue;
    NicInfo& nic = graph.nodes[id].nic;
    nic.sysfs_numa_node = iface.numa_node;
    // An IPoIB/RoCE interface names a port of its IB device; dev_port is 0-based.
    NicPort* port = nullptr;
    for (const std::string& ib : iface.ib_devices) {
      port = FindPort(nic, ib, iface.dev_port >= 0 ? iface.dev_port + 1 : 1);
      if (port != nullptr) break;
    }
    if (port == nullptr) {
      for (NicPort& p : nic.ports) {
        if (p.netdev == iface.name || (p.name == iface.name && p.netdev.empty())) port = &p;
      }
    }
    if (port == nullptr) {
      nic.ports.emplace_back();
      port = &nic.ports.back();
      port->name = iface.name;
    }
    port->netdev = iface.name;
    if (iface.ib_devices.empty()) {
      // An Ethernet port: the interface's speed and state are the port's.
      port->speed_mbps = iface.speed_mbps;
      port->state = iface.operstate;
    }
  }
}

void ApplySysfsPciLinks(const std::string& sysfs_root, Graph& graph) {
  for (Link& link : graph.links) {
    if (link.type != LinkType::kPci) continue;
    const std::string& bus_id = graph.nodes[link.b].pci.bus_id;
    if (bus_id.empty()) continue;
    const SysfsPciLink pci = ReadPciLink(sysfs_root, bus_id);
    if (pci.gts == 0 && pci.width == 0) continue;
    link.pcie_gts = pci.gts;
    link.pcie_width = pci.width;
    link.bandwidth_gbps = PcieBandwidth(pci.gts, pci.width);
  }
}

}  // namespace baton::topology
