// The sysfs scanner against a synthetic tree laid out like the kernel's: class/net and
// class/infiniband entries are symlinks into devices/, devices carry numa_node and link files.

#include "topology/sysfs.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace baton::topology {
namespace {

namespace fs = std::filesystem;

class FakeSysfs {
 public:
  FakeSysfs() {
    char pattern[] = "/tmp/baton-sysfs-XXXXXX";
    root_ = mkdtemp(pattern);
  }
  ~FakeSysfs() { fs::remove_all(root_); }

  const std::string& root() const { return root_; }

  void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    std::ofstream(root_ + "/" + path) << text << "\n";
  }
  void Link(const std::string& path, const std::string& target) {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    fs::create_symlink(root_ + "/" + target, root_ + "/" + path);
  }

 private:
  std::string root_;
};

// Root port 0000:00:01.0 -> HCA 0000:01:00.0 (two ports: ib0 on port 1, RoCE netdev on port 2);
// root port 0000:00:02.0 -> Ethernet NIC 0000:02:00.0 (eth0); a virtual interface `lo`.
void Populate(FakeSysfs& sys) {
  const std::string port1 = "devices/pci0000:00/0000:00:01.0";
  const std::string hca = port1 + "/0000:01:00.0";
  sys.Write(port1 + "/max_link_speed", "16.0 GT/s PCIe");
  sys.Write(port1 + "/max_link_width", "16");
  sys.Write(hca + "/numa_node", "1");
  sys.Write(hca + "/max_link_speed", "32.0 GT/s PCIe");
  sys.Write(hca + "/max_link_width", "16");
  sys.Write(hca + "/infiniband/mlx5_0/node_guid", "b8ce:f603:00f5:a1b0");
  sys.Link("class/infiniband/mlx5_0", hca + "/infiniband/mlx5_0");
  sys.Link("class/infiniband/mlx5_0/device", hca);
  sys.Write(hca + "/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)");
  sys.Write(hca + "/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
  sys.Write(hca + "/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand");
  sys.Write(hca + "/infiniband/mlx5_0/ports/2/rate", "100 Gb/sec (4X EDR)");
  sys.Write(hca + "/infiniband/mlx5_0/ports/2/state", "1: DOWN");
  sys.Write(hca + "/infiniband/mlx5_0/ports/2/link_layer", "Ethernet");
  sys.Write(hca + "/net/ib0/operstate", "up");
  sys.Write(hca + "/net/ib0/speed", "200000");
  sys.Write(hca + "/net/ib0/dev_port", "0");
  sys.Link("class/net/ib0", hca + "/net/ib0");
  sys.Link("class/net/ib0/device", hca);
  sys.Write(hca + "/net/roce1/operstate", "down");
  sys.Write(hca + "/net/roce1/dev_port", "1");
  sys.Link("class/net/roce1", hca + "/net/roce1");
  sys.Link("class/net/roce1/device", hca);

  const std::string eth = "devices/pci0000:00/0000:00:02.0/0000:02:00.0";
  sys.Write(eth + "/numa_node", "-1");
  sys.Write(eth + "/virtio3/net/eth0/speed", "-1");
  sys.Write(eth + "/virtio3/net/eth0/operstate", "up");
  sys.Link("class/net/eth0", eth + "/virtio3/net/eth0");
  sys.Link("class/net/eth0/device", eth + "/virtio3");

  sys.Write("devices/virtual/net/lo/operstate", "unknown");
  sys.Link("class/net/lo", "devices/virtual/net/lo");

  sys.Link("bus/pci/devices/0000:01:00.0", hca);
  sys.Link("bus/pci/devices/0000:02:00.0", eth);
}

TEST(SysfsTest, ScansInterfacesAndIbPorts) {
  FakeSysfs sys;
  Populate(sys);
  absl::StatusOr<std::vector<SysfsNetInterface>> nets = ScanNetInterfaces(sys.root());
  ASSERT_TRUE(nets.ok()) << nets.status();
  ASSERT_EQ(nets->size(), 3u);  // lo is virtual
  const SysfsNetInterface& eth0 = (*nets)[0];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_EQ(eth0.pci_bus_id, "0000:02:00.0");  // through the virtio device
  EXPECT_EQ(eth0.speed_mbps, 0);               // -1: unknown
  EXPECT_EQ(eth0.operstate, "up");
  EXPECT_EQ(eth0.numa_node, -1);
  const SysfsNetInterface& ib0 = (*nets)[1];
  EXPECT_EQ(ib0.name, "ib0");
  EXPECT_EQ(ib0.pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(ib0.speed_mbps, 200000);
  EXPECT_EQ(ib0.numa_node, 1);
  EXPECT_EQ(ib0.dev_port, 0);
  EXPECT_EQ(ib0.ib_devices, std::vector<std::string>{"mlx5_0"});

  absl::StatusOr<std::vector<SysfsIbDevice>> ibs = ScanInfinibandDevices(sys.root());
  ASSERT_TRUE(ibs.ok()) << ibs.status();
  ASSERT_EQ(ibs->size(), 1u);
  const SysfsIbDevice& mlx = (*ibs)[0];
  EXPECT_EQ(mlx.name, "mlx5_0");
  EXPECT_EQ(mlx.pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(mlx.node_guid, 0xb8cef60300f5a1b0ULL);
  EXPECT_EQ(mlx.numa_node, 1);
  ASSERT_EQ(mlx.ports.size(), 2u);
  EXPECT_EQ(mlx.ports[0].port, 1);
  EXPECT_EQ(mlx.ports[0].rate_mbps, 200000);
  EXPECT_EQ(mlx.ports[0].state, "ACTIVE");
  EXPECT_EQ(mlx.ports[0].link_layer, "InfiniBand");
  EXPECT_EQ(mlx.ports[1].state, "DOWN");
  EXPECT_EQ(mlx.ports[1].rate_mbps, 100000);

  // NCCL's rule: the slower of the device and its upstream port.
  const SysfsPciLink link = ReadPciLink(sys.root(), "0000:01:00.0");
  EXPECT_EQ(link.gts, 16);
  EXPECT_EQ(link.width, 16);
  EXPECT_EQ(ReadPciLink(sys.root(), "0000:09:00.0").gts, 0);
  EXPECT_EQ(ReadPciNumaNode(sys.root(), "0000:01:00.0"), 1);
}

TEST(SysfsTest, MissingClassDirectoriesAreEmptyNotErrors) {
  FakeSysfs sys;
  EXPECT_TRUE(ScanNetInterfaces(sys.root())->empty());
  EXPECT_TRUE(ScanInfinibandDevices(sys.root())->empty());
}

TEST(SysfsTest, AppliesPortsToTheGraph) {
  FakeSysfs sys;
  Populate(sys);
  Graph g;
  Node cpu0;
  cpu0.type = NodeType::kCpu;
  cpu0.cpu.numa_id = 0;
  g.AddNode(cpu0);
  Node cpu1 = cpu0;
  cpu1.cpu.numa_id = 1;
  const int numa1 = g.AddNode(cpu1);
  // hwloc saw the HCA (with a placeholder port) but not the Ethernet NIC.
  Node hca;
  hca.type = NodeType::kNic;
  hca.pci.bus_id = "0000:01:00.0";
  NicPort placeholder;
  placeholder.name = "mlx5_0";
  placeholder.port = 1;
  hca.nic.ports.push_back(placeholder);
  const int hca_id = g.AddNode(hca);
  Link link;
  link.a = numa1;
  link.b = hca_id;
  link.type = LinkType::kPci;
  link.bandwidth_gbps = 12;
  g.AddLink(link);

  ApplySysfsNics(*ScanNetInterfaces(sys.root()), *ScanInfinibandDevices(sys.root()), g);
  ApplySysfsPciLinks(sys.root(), g);
  AssignDefaultNames(g);
  ASSERT_TRUE(ValidateGraph(g).ok()) << ValidateGraph(g);

  const NicInfo& nic = g.nodes[hca_id].nic;
  EXPECT_EQ(nic.sysfs_numa_node, 1);
  ASSERT_EQ(nic.ports.size(), 2u);
  EXPECT_EQ(nic.ports[0].speed_mbps, 200000);
  EXPECT_EQ(nic.ports[0].state, "ACTIVE");
  EXPECT_EQ(nic.ports[0].netdev, "ib0");
  EXPECT_EQ(nic.ports[0].guid, 0xb8cef60300f5a1b0ULL);
  EXPECT_EQ(nic.ports[1].port, 2);
  EXPECT_EQ(nic.ports[1].netdev, "roce1");
  EXPECT_EQ(nic.ports[1].link_layer, "Ethernet");

  const int eth = g.FindByBusId("0000:02:00.0");
  ASSERT_GE(eth, 0);
  EXPECT_EQ(g.nodes[eth].name, "eth0");
  EXPECT_EQ(g.nodes[eth].nic.ports[0].state, "up");
  EXPECT_EQ(g.CpuOf(eth), 0);  // numa_node -1: the first CPU
  for (const Link& l : g.links) {
    if (l.b == hca_id) {
      EXPECT_EQ(l.pcie_gts, 16);
      EXPECT_EQ(l.pcie_width, 16);
      EXPECT_EQ(l.bandwidth_gbps, 24);
    }
  }
}

}  // namespace
}  // namespace baton::topology
