#pragma once

// Reads NIC and PCIe link facts from a Linux sysfs tree. Every function takes the sysfs root
// ("/sys" on a live system) so tests can run against a recorded or synthetic tree.
//
// * /sys/class/net/<if>: `speed` (Mb/s; -1 or unreadable -> 0), `operstate`, `dev_port`,
//   `device` (symlink; interfaces without one are virtual and skipped), and the device's
//   `numa_node` and `infiniband/` directory.
// * /sys/class/infiniband/<dev>: `device`, `node_guid`, and ports/<n>/{rate,state,link_layer}
//   ("100 Gb/sec (4X EDR)" -> 100000 Mb/s; "4: ACTIVE" -> "ACTIVE").
// * /sys/bus/pci/devices/<bdf>/max_link_speed, max_link_width: as NCCL does, the minimum of the
//   device's and its upstream port's values.
// A missing class directory yields an empty list, not an error.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "topology/graph.h"

namespace baton::topology {

struct SysfsNetInterface {
  std::string name;
  std::string pci_bus_id;  // nearest PCI device above `device`; "" when not on PCI
  int64_t speed_mbps = 0;
  std::string operstate;
  int dev_port = -1;  // 0-based port of a multi-port device
  int numa_node = -1;
  std::vector<std::string> ib_devices;  // device/infiniband/* (IPoIB and RoCE interfaces)
};

struct SysfsIbPort {
  int port = 0;
  int64_t rate_mbps = 0;
  std::string state;
  std::string link_layer;
};

struct SysfsIbDevice {
  std::string name;
  std::string pci_bus_id;
  uint64_t node_guid = 0;
  int numa_node = -1;
  std::vector<SysfsIbPort> ports;  // ascending port numbers
};

struct SysfsPciLink {
  double gts = 0;  // 0 when unknown
  int width = 0;
};

// Sorted by name.
absl::StatusOr<std::vector<SysfsNetInterface>> ScanNetInterfaces(const std::string& sysfs_root);
absl::StatusOr<std::vector<SysfsIbDevice>> ScanInfinibandDevices(const std::string& sysfs_root);
SysfsPciLink ReadPciLink(const std::string& sysfs_root, const std::string& bus_id);
int ReadPciNumaNode(const std::string& sysfs_root, const std::string& bus_id);

// Folds the scans into `graph`: ports of existing NICs (matched by bus id) get speeds, states,
// GUIDs and netdev names; NICs hwloc did not report are added under the CPU of their NUMA node
// (or the first CPU). Interfaces that are not PCI devices are ignored.
void ApplySysfsNics(const std::vector<SysfsNetInterface>& interfaces,
                    const std::vector<SysfsIbDevice>& ib_devices, Graph& graph);
// Sets generation and width (and NCCL's bandwidth for them) on the upstream PCI link of every
// node with a bus id, where sysfs knows them.
void ApplySysfsPciLinks(const std::string& sysfs_root, Graph& graph);

}  // namespace baton::topology
