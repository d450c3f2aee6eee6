#include "topology/graph.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "topology/paths.h"

namespace baton::topology {
namespace {

Link PciLink(int up, int down) {
  Link l;
  l.a = up;
  l.b = down;
  l.type = LinkType::kPci;
  l.bandwidth_gbps = 1;
  return l;
}

// Builds small synthetic graphs.
class Builder {
 public:
  int Cpu(int numa, const std::string& vendor = "GenuineIntel", int model = 0x55) {
    Node n;
    n.type = NodeType::kCpu;
    n.cpu.numa_id = numa;
    n.cpu.vendor = vendor;
    n.cpu.family = 6;
    n.cpu.model = model;
    return graph.AddNode(std::move(n));
  }
  int Switch(int parent, const std::string& bus, double gbps = 24) {
    Node n;
    n.type = NodeType::kPciSwitch;
    n.pci.bus_id = bus;
    return Attach(parent, std::move(n), gbps);
  }
  int Gpu(int parent, const std::string& bus, double gbps = 24) {
    Node n;
    n.type = NodeType::kGpu;
    n.pci.bus_id = bus;
    n.gpu.compute_capability = 90;
    return Attach(parent, std::move(n), gbps);
  }
  int Nic(int parent, const std::string& bus, double gbps = 24) {
    Node n;
    n.type = NodeType::kNic;
    n.pci.bus_id = bus;
    return Attach(parent, std::move(n), gbps);
  }
  int NvSwitch() {
    Node n;
    n.type = NodeType::kNvSwitch;
    return graph.AddNode(std::move(n));
  }
  void NvLink(int a, int b, int count) {
    Link l;
    l.a = a;
    l.b = b;
    l.type = LinkType::kNvLink;
    l.nvlink_count = count;
    l.nvlink_per_link_gbps = 20;
    l.bandwidth_gbps = 20.0 * count;
    graph.AddLink(l);
  }
  Graph Done() {
    ConnectCpus(graph);
    AssignDefaultNames(graph);
    EXPECT_TRUE(ValidateGraph(graph).ok()) << ValidateGraph(graph);
    return graph;
  }

  Graph graph;

 private:
  int Attach(int parent, Node n, double gbps) {
    const int id = graph.AddNode(std::move(n));
    Link l;
    l.a = parent;
    l.b = id;
    l.type = LinkType::kPci;
    l.bandwidth_gbps = gbps;
    graph.AddLink(l);
    return id;
  }
};

TEST(BusIdTest, NormalizesEverySpelling) {
  EXPECT_EQ(*NormalizeBusId("0000:1D:00.0"), "0000:1d:00.0");
  EXPECT_EQ(*NormalizeBusId("00000000:1D:00.0"), "0000:1d:00.0");  // nvidia-smi / NVML
  EXPECT_EQ(*NormalizeBusId("1d:00.0"), "0000:1d:00.0");
  EXPECT_EQ(*NormalizeBusId("ffff:ff:01.0"), "ffff:ff:01.0");
  EXPECT_EQ(*NormalizeBusId("10000:00:00.0"), "10000:00:00.0");  // VMD domains
  for (const char* bad : {"", "0000:1d:00", "0000:1d:20.0", "0000:1d:00.8", "zz:00.0",
                          "fffffff:ffff:ff", "0000:100:00.0", "pci0000:00"}) {
    EXPECT_FALSE(NormalizeBusId(bad).ok()) << bad;
  }
}

TEST(CpuSetTest, ParsesListsAndMasks) {
  EXPECT_EQ(*ParseCpuList("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList(""), std::vector<int>{});
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
  // NCCL affinity of the p4d's NUMA 0: CPUs 0-23 and 48-71.
  absl::StatusOr<std::vector<int>> p4d = ParseCpuMask("000000ff,ffff0000,00ffffff");
  ASSERT_TRUE(p4d.ok());
  EXPECT_EQ(FormatCpuList(*p4d), "0-23,48-71");
  // hwloc bitmap: "0x" prefixes and empty all-zero words.
  EXPECT_EQ(FormatCpuList(*ParseCpuMask("0x00000003,,0x00000001")), "0,64-65");
  EXPECT_FALSE(ParseCpuMask("123456789").ok());
  EXPECT_FALSE(ParseCpuMask("xyz").ok());
}

TEST(BandwidthModelTest, FollowsNccl) {
  EXPECT_DOUBLE_EQ(PcieBandwidth(8, 16), 12);   // Gen3 x16
  EXPECT_DOUBLE_EQ(PcieBandwidth(16, 16), 24);  // Gen4 x16
  EXPECT_DOUBLE_EQ(PcieBandwidth(32, 16), 48);  // Gen5 x16
  EXPECT_DOUBLE_EQ(PcieBandwidth(16, 8), 12);
  EXPECT_DOUBLE_EQ(PcieBandwidth(32, 0), 48);  // width 0 is treated as 16
  EXPECT_DOUBLE_EQ(PcieBandwidth(0, 16), 12);  // unknown speed is Gen3
  EXPECT_DOUBLE_EQ(PcieBandwidth(2.5, 1), 0.1875);
  EXPECT_EQ(ParsePcieGts("16.0 GT/s PCIe"), 16);
  EXPECT_EQ(ParsePcieGts("8 GT/s"), 8);
  EXPECT_EQ(ParsePcieGts("2.5 GT/s PCIe"), 2.5);
  EXPECT_EQ(ParsePcieGts(""), 0);
  EXPECT_EQ(ParsePcieGts("Unknown"), 0);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(90), 20.6);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(100), 40.1);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(86), 12);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(80), 20);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(60), 18);
  EXPECT_DOUBLE_EQ(NvLinkBandwidthPerLink(0), 20);
  CpuInfo cpu;
  cpu.vendor = "GenuineIntel";
  cpu.family = 6;
  cpu.model = 143;  // Sapphire Rapids
  EXPECT_EQ(InterCpuBandwidth(cpu), 22);
  cpu.model = 85;  // Skylake/Cascade Lake
  EXPECT_EQ(InterCpuBandwidth(cpu), 10);
  cpu.model = 0xCF;  // Emerald Rapids
  EXPECT_EQ(InterCpuBandwidth(cpu), 40);
  cpu.vendor = "AuthenticAMD";
  EXPECT_EQ(InterCpuBandwidth(cpu), 16);
  cpu.arch = "ppc64";
  EXPECT_EQ(InterCpuBandwidth(cpu), 32);
}

TEST(PathTest, PciPathTypesFollowTheHierarchy) {
  Builder b;
  const int cpu0 = b.Cpu(0), cpu1 = b.Cpu(1);
  const int sw_a = b.Switch(cpu0, "0000:10:00.0", 24);
  const int sw_b = b.Switch(sw_a, "0000:11:00.0", 24);
  const int sw_c = b.Switch(sw_a, "0000:12:00.0", 24);
  const int gpu0 = b.Gpu(sw_b, "0000:13:00.0", 48);
  const int gpu1 = b.Gpu(sw_b, "0000:14:00.0", 48);
  const int gpu2 = b.Gpu(sw_c, "0000:15:00.0", 48);
  const int gpu3 = b.Gpu(cpu0, "0000:20:00.0", 48);
  const int gpu4 = b.Gpu(cpu1, "0000:80:00.0", 48);
  const int nic = b.Nic(sw_b, "0000:16:00.0", 12);
  const Graph g = b.Done();
  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, gpu0), (Path{PathType::kLoc, kLocalBandwidth, 0}));
  EXPECT_EQ(p.Get(gpu0, gpu1), (Path{PathType::kPix, 48, 2}));
  EXPECT_EQ(p.Get(gpu0, gpu2), (Path{PathType::kPxb, 24, 4}));
  EXPECT_EQ(p.Get(gpu0, gpu3), (Path{PathType::kPhb, 24, 4}));
  EXPECT_EQ(p.Get(gpu0, gpu4), (Path{PathType::kSys, 10, 5}));  // Skylake inter-CPU bandwidth
  EXPECT_EQ(p.Get(gpu0, nic), (Path{PathType::kPix, 12, 2}));
  EXPECT_EQ(p.Get(gpu0, cpu0).type, PathType::kPhb);
  EXPECT_EQ(p.Get(gpu4, cpu0).type, PathType::kSys);
  EXPECT_EQ(p.ClosestNics(gpu0), std::vector<int>{nic});
  EXPECT_EQ(p.ClosestNics(gpu4), std::vector<int>{nic});
  EXPECT_EQ(g.CpuOf(gpu0), cpu0);
  EXPECT_EQ(g.NumaOf(gpu4), 1);
  EXPECT_EQ(g.PciParent(gpu0), sw_b);
  EXPECT_EQ(g.PciParent(cpu0), -1);
}

TEST(PathTest, NvLinkRelaysOnlyThroughOneGpu) {
  Builder b;
  const int cpu0 = b.Cpu(0), cpu1 = b.Cpu(1);
  const int gpu0 = b.Gpu(cpu0, "0000:01:00.0");
  const int gpu1 = b.Gpu(cpu1, "0000:81:00.0");
  const int gpu2 = b.Gpu(cpu1, "0000:82:00.0");
  const int gpu3 = b.Gpu(cpu1, "0000:83:00.0");
  const int nic1 = b.Nic(cpu1, "0000:84:00.0");
  b.NvLink(gpu0, gpu1, 2);
  b.NvLink(gpu1, gpu2, 1);
  b.NvLink(gpu2, gpu3, 4);
  const Graph g = b.Done();
  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, gpu1), (Path{PathType::kNvl, 40, 1}));
  EXPECT_EQ(p.Get(gpu0, gpu2), (Path{PathType::kNvb, 20, 2}));  // through GPU1
  // Two GPUs in a row may not relay: GPU0 reaches GPU3 over PCIe and QPI.
  EXPECT_EQ(p.Get(gpu0, gpu3).type, PathType::kSys);
  // A GPU does not forward from NVLink to PCIe: GPU0 reaches GPU1's NIC through the CPUs.
  EXPECT_EQ(p.Get(gpu0, nic1).type, PathType::kSys);
  EXPECT_EQ(p.Get(gpu1, nic1).type, PathType::kPhb);
}

TEST(PathTest, NvSwitchGivesNvlAndBandwidthIsTheMinimum) {
  Builder b;
  const int cpu = b.Cpu(0);
  const int nvs = b.NvSwitch();
  const int gpu0 = b.Gpu(cpu, "0000:01:00.0");
  const int gpu1 = b.Gpu(cpu, "0000:02:00.0");
  const int lonely = b.NvSwitch();  // not connected to anything
  b.NvLink(gpu0, nvs, 18);
  b.NvLink(gpu1, nvs, 12);
  const Graph g = b.Done();
  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, gpu1), (Path{PathType::kNvl, 240, 2}));
  EXPECT_EQ(p.Get(gpu0, lonely).type, PathType::kDis);
  EXPECT_TRUE(p.ClosestNics(gpu0).empty());
  EXPECT_NE(FormatPathMatrix(g, p).find("GPU1  NVL   X"), std::string::npos)
      << FormatPathMatrix(g, p);
}

TEST(PathTypeTest, NamesRoundTrip) {
  for (int i = 0; i <= 11; ++i) {
    const PathType t = static_cast<PathType>(i);
    EXPECT_EQ(*ParsePathType(PathTypeName(t)), t);
  }
  EXPECT_EQ(PathTypeName(PathType::kPxn), "PXN");
  EXPECT_FALSE(ParsePathType("NODE").ok());
}

TEST(ValidateTest, RejectsBrokenGraphs) {
  Builder b;
  const int cpu = b.Cpu(0);
  const int sw = b.Switch(cpu, "0000:10:00.0");
  const int gpu = b.Gpu(sw, "0000:11:00.0");
  const Graph good = b.Done();
  ASSERT_TRUE(ValidateGraph(good).ok());

  auto expect_invalid = [](const Graph& g, const std::string& what) {
    const absl::Status status = ValidateGraph(g);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(status.message().find(what), std::string::npos) << status;
  };
  Graph g = good;
  g.nodes[gpu].name = g.nodes[sw].name;
  expect_invalid(g, "duplicate name");
  g = good;
  g.nodes[gpu].pci.bus_id = "0000:11:00.0 ";
  expect_invalid(g, "not canonical");
  g = good;
  g.nodes[gpu].pci.bus_id = g.nodes[sw].pci.bus_id;
  expect_invalid(g, "duplicate bus id");
  g = good;
  g.nodes[cpu].gpu.index = 3;
  expect_invalid(g, "stray gpu info");
  g = good;
  g.links.push_back(PciLink(gpu, sw));
  expect_invalid(g, "upstream end");
  g = good;
  g.links.push_back(PciLink(cpu, gpu));
  expect_invalid(g, "more than one PCI upstream");
  g = good;
  g.links[0].bandwidth_gbps = -1;
  expect_invalid(g, "bad bandwidth");
  g = good;
  g.nodes[1].id = 7;
  expect_invalid(g, "id is 7");
  g = good;
  g.nodes[cpu].cpu.cpus = {3, 1};
  expect_invalid(g, "not ascending");
}

TEST(TransformTest, FlattensBroadcomGen4SwitchesLikeNccl) {
  Builder b;
  const int cpu = b.Cpu(0);
  auto bcm = [&](int parent, const std::string& bus) {
    const int id = b.Switch(parent, bus);
    b.graph.nodes[id].pci.vendor = 0x1000;
    b.graph.nodes[id].pci.device = 0xc010;
    b.graph.nodes[id].pci.subsystem_vendor = 0x1000;
    b.graph.nodes[id].pci.subsystem_device = 0xa096;
    return id;
  };
  const int top = bcm(cpu, "0000:31:00.0");
  const int sub0 = bcm(top, "0000:33:00.0");
  const int sub1 = bcm(top, "0000:3b:00.0");
  b.Gpu(sub0, "0000:37:00.0");
  b.Gpu(sub1, "0000:3f:00.0");
  Graph g = b.Done();
  FlattenBroadcomSwitches(g);
  ASSERT_TRUE(ValidateGraph(g).ok()) << ValidateGraph(g);
  EXPECT_EQ(g.NodesOfType(NodeType::kPciSwitch).size(), 1u);
  const int gpu0 = g.FindByBusId("0000:37:00.0");
  const int gpu1 = g.FindByBusId("0000:3f:00.0");
  EXPECT_EQ(g.PciParent(gpu0), g.FindByBusId("0000:31:00.0"));
  EXPECT_EQ(PathTable(g).Get(gpu0, gpu1).type, PathType::kPix);  // PXB before flattening
  (void)sub0;
  (void)sub1;
}

TEST(TransformTest, PrunesSwitchesWithoutEndpointsAndRenumbers) {
  Builder b;
  const int cpu = b.Cpu(0);
  const int empty = b.Switch(cpu, "0000:10:00.0");
  b.Switch(empty, "0000:11:00.0");
  const int used = b.Switch(cpu, "0000:20:00.0");
  b.Nic(used, "0000:21:00.0");
  Graph g = b.Done();
  PruneEmptySwitches(g);
  ASSERT_TRUE(ValidateGraph(g).ok()) << ValidateGraph(g);
  EXPECT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.FindByBusId("0000:10:00.0"), -1);
  EXPECT_EQ(g.PciParent(g.FindByBusId("0000:21:00.0")), g.FindByBusId("0000:20:00.0"));
}

TEST(TransformTest, DefaultNamesAreUniqueAndFollowBusOrder) {
  Builder b;
  const int cpu = b.Cpu(-1);
  const int late = b.Gpu(cpu, "0000:90:00.0");
  const int early = b.Gpu(cpu, "0000:10:00.0");
  const int known = b.Gpu(cpu, "0000:50:00.0");
  b.graph.nodes[known].gpu.index = 0;
  Node nic;
  nic.type = NodeType::kNic;
  NicPort port;
  port.name = "mlx5_0";
  nic.nic.ports.push_back(port);
  b.graph.AddNode(nic);
  b.graph.AddNode(nic);
  const Graph g = b.Done();
  EXPECT_EQ(g.nodes[cpu].name, "CPU0");
  EXPECT_EQ(g.nodes[known].name, "GPU0");
  EXPECT_EQ(g.nodes[early].name, "GPU1");
  EXPECT_EQ(g.nodes[late].name, "GPU2");
  EXPECT_NE(g.FindByName("mlx5_0"), -1);
  EXPECT_NE(g.FindByName("mlx5_0#2"), -1);
}

}  // namespace
}  // namespace baton::topology
