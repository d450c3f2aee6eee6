// Facts of the recorded NCCL topology files, read off the files themselves (see SOURCES.md).

#include "topology/nccl_xml.h"

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/topology/fixtures.h"
#include "topology/paths.h"

namespace baton::topology {
namespace {

using testing::ByBus;
using testing::ByName;
using testing::LoadFixture;

std::set<std::string> BusIds(const Graph& g, const std::vector<int>& ids) {
  std::set<std::string> out;
  for (int id : ids) out.insert(g.nodes[id].pci.bus_id);
  return out;
}

int CountLinks(const Graph& g, LinkType type) {
  int n = 0;
  for (const Link& l : g.links) n += l.type == type ? 1 : 0;
  return n;
}

TEST(NcclXmlTest, AwsP4dSkeleton) {
  const Graph g = LoadFixture("nccl_aws-p4d-24xl_8xA100_4xEFA.xml");
  EXPECT_EQ(g.source, "nccl-xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 4u);
  EXPECT_EQ(g.NodesOfType(NodeType::kPciSwitch).size(), 4u);
  // A skeleton: nothing beyond PCI placement is invented.
  EXPECT_TRUE(g.NodesOfType(NodeType::kNvSwitch).empty());
  EXPECT_EQ(CountLinks(g, LinkType::kNvLink), 0);
  for (int gpu : g.NodesOfType(NodeType::kGpu)) {
    EXPECT_EQ(g.nodes[gpu].gpu.index, -1);
    EXPECT_EQ(g.nodes[gpu].gpu.compute_capability, 0);
    EXPECT_EQ(g.nodes[gpu].pci.device, 0x20b0);  // A100 SXM4 40GB
  }
  for (int nic : g.NodesOfType(NodeType::kNic)) {
    EXPECT_TRUE(g.nodes[nic].nic.ports.empty());
    EXPECT_EQ(g.nodes[nic].pci.vendor, 0x1d0f);  // EFA
  }
  const int numa0 = ByName(g, "NUMA0");
  EXPECT_EQ(FormatCpuList(g.nodes[numa0].cpu.cpus), "0-23,48-71");
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "NUMA1")].cpu.cpus), "24-47,72-95");
  EXPECT_EQ(g.nodes[numa0].cpu.model, 85);

  const PathTable p(g);
  const int gpu_10_1c = ByBus(g, "0000:10:1c.0");
  EXPECT_EQ(p.Get(gpu_10_1c, ByBus(g, "0000:10:1d.0")).type, PathType::kPix);
  EXPECT_EQ(p.Get(gpu_10_1c, ByBus(g, "0000:20:1c.0")).type, PathType::kPhb);
  EXPECT_EQ(p.Get(gpu_10_1c, ByBus(g, "0000:90:1c.0")).type, PathType::kSys);
  // Gen3 x16 everywhere: 12 GB/s; the inter-socket link of Cascade Lake: 10 GB/s.
  EXPECT_EQ(p.Get(gpu_10_1c, ByBus(g, "0000:10:1d.0")).bandwidth_gbps, 12);
  EXPECT_EQ(p.Get(gpu_10_1c, ByBus(g, "0000:90:1c.0")).bandwidth_gbps, 10);
  // Two GPUs and one EFA behind each switch: the EFA is each GPU's closest NIC.
  for (const char* group : {"10", "20", "90", "a0"}) {
    const std::string nic = absl::StrCat("0000:", group, ":1b.0");
    for (const char* dev : {"1c", "1d"}) {
      const int gpu = ByBus(g, absl::StrCat("0000:", group, ":", dev, ".0"));
      EXPECT_EQ(BusIds(g, p.ClosestNics(gpu)), std::set<std::string>{nic}) << group << dev;
      EXPECT_EQ(p.Get(gpu, ByBus(g, nic)).type, PathType::kPix);
    }
  }
  EXPECT_EQ(g.NumaOf(ByBus(g, "0000:a0:1b.0")), 1);
  EXPECT_EQ(g.NumaOf(ByBus(g, "0000:20:1d.0")), 0);
}

TEST(NcclXmlTest, AwsP5WithFourEfaPerGpu) {
  const Graph g = LoadFixture("nccl_aws-p5-48xl_8xH100_32xEFA.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 1u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 32u);
  const Node& gpu0 = g.nodes[ByName(g, "GPU0")];
  EXPECT_EQ(gpu0.pci.bus_id, "0000:4f:00.0");
  EXPECT_EQ(gpu0.gpu.compute_capability, 90);
  EXPECT_EQ(gpu0.gpu.rank, 0);
  EXPECT_TRUE(gpu0.gpu.gdr);
  const Node& efa = g.nodes[ByName(g, "rdmap79s0")];
  ASSERT_EQ(efa.nic.ports.size(), 1u);
  EXPECT_EQ(efa.nic.ports[0].speed_mbps, 100000);
  EXPECT_EQ(efa.nic.ports[0].dev, 0);
  EXPECT_EQ(efa.nic.ports[0].guid, 0x0u);
  EXPECT_EQ(efa.nic.ports[0].max_connections, 1024);
  EXPECT_EQ(g.nodes[ByName(g, "rdmap201s0")].nic.ports[0].guid, 0x31u);  // NCCL reads hex
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "NUMA0")].cpu.cpus), "0-47");

  const PathTable p(g);
  EXPECT_EQ(
      BusIds(g, p.ClosestNics(ByName(g, "GPU0"))),
      (std::set<std::string>{"0000:50:00.0", "0000:51:00.0", "0000:52:00.0", "0000:53:00.0"}));
  EXPECT_EQ(
      BusIds(g, p.ClosestNics(ByName(g, "GPU7"))),
      (std::set<std::string>{"0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0", "0000:c4:00.0"}));
  // GPU: 32 GT/s x16 = 48 GB/s; EFA: 16 GT/s x8 = 12 GB/s; switch uplink 16 GT/s x16 = 24 GB/s.
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "rdmap79s0")), (Path{PathType::kPix, 12, 2}));
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "GPU1")), (Path{PathType::kPhb, 24, 4}));
}

TEST(NcclXmlTest, AzureNcv4NvLinkPairsAndCpuAttachedNic) {
  const Graph g = LoadFixture("nccl_azure-ncv4_4xA100-PCIe_nvlink-pairs.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 4u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 4u);
  ASSERT_EQ(g.NodesOfType(NodeType::kNic).size(), 1u);
  const int eth0 = ByName(g, "eth0");
  EXPECT_EQ(g.nodes[eth0].pci.bus_id, "");  // directly under <cpu>, no PCI device
  EXPECT_EQ(g.nodes[eth0].nic.ports[0].speed_mbps, 100000);
  EXPECT_FALSE(g.nodes[eth0].nic.ports[0].gdr);
  EXPECT_EQ(g.NumaOf(eth0), 0);
  for (int i = 0; i < 4; ++i) {
    const int gpu = ByName(g, absl::StrCat("GPU", i));
    EXPECT_EQ(g.NumaOf(gpu), i);  // each GPU alone on its NUMA node
    EXPECT_EQ(g.nodes[gpu].gpu.compute_capability, 80);
  }
  EXPECT_EQ(CountLinks(g, LinkType::kNvLink), 2);  // listed from both ends, merged
  const PathTable p(g);
  const int gpu0 = ByName(g, "GPU0"), gpu1 = ByName(g, "GPU1");
  const int gpu2 = ByName(g, "GPU2"), gpu3 = ByName(g, "GPU3");
  EXPECT_EQ(p.Get(gpu0, gpu1), (Path{PathType::kNvl, 240, 1}));  // 12 links x 20 GB/s (SM80)
  EXPECT_EQ(p.Get(gpu2, gpu3).type, PathType::kNvl);
  EXPECT_EQ(p.Get(gpu0, gpu2).type, PathType::kSys);
  EXPECT_EQ(p.Get(gpu1, gpu3).type, PathType::kSys);
  EXPECT_EQ(p.Get(gpu0, eth0).type, PathType::kPhb);
  EXPECT_EQ(p.Get(gpu1, eth0).type, PathType::kSys);
  EXPECT_EQ(p.ClosestNics(gpu3), std::vector<int>{eth0});
}

TEST(NcclXmlTest, AzureNdv4Skeleton) {
  const Graph g = LoadFixture("nccl_azure-ndv4_8xA100_8xIB.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 4u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 8u);
  EXPECT_EQ(CountLinks(g, LinkType::kNvLink), 0);
  for (int nic : g.NodesOfType(NodeType::kNic)) {
    EXPECT_EQ(g.nodes[nic].pci.class_code, 0x020700);  // InfiniBand
  }
  EXPECT_EQ(g.NumaOf(ByBus(g, "0003:00:00.0")), 0);
  EXPECT_EQ(g.NumaOf(ByBus(g, "0001:00:00.0")), 1);
  EXPECT_EQ(g.NumaOf(ByBus(g, "000d:00:00.0")), 2);
  EXPECT_EQ(g.NumaOf(ByBus(g, "0106:00:00.0")), 3);
  const PathTable p(g);
  EXPECT_EQ(p.Get(ByBus(g, "0003:00:00.0"), ByBus(g, "0004:00:00.0")).type, PathType::kPix);
  EXPECT_EQ(p.Get(ByBus(g, "0003:00:00.0"), ByBus(g, "0001:00:00.0")).type, PathType::kSys);
  // Two GPUs and two HCAs share each switch: both HCAs are equally close to both GPUs.
  const std::vector<std::pair<std::string, std::set<std::string>>> expected = {
      {"0003:00:00.0", {"0103:00:00.0", "0104:00:00.0"}},
      {"0004:00:00.0", {"0103:00:00.0", "0104:00:00.0"}},
      {"0001:00:00.0", {"0101:00:00.0", "0102:00:00.0"}},
      {"0002:00:00.0", {"0101:00:00.0", "0102:00:00.0"}},
      {"000d:00:00.0", {"0107:00:00.0", "0108:00:00.0"}},
      {"000e:00:00.0", {"0107:00:00.0", "0108:00:00.0"}},
      {"000b:00:00.0", {"0105:00:00.0", "0106:00:00.0"}},
      {"000c:00:00.0", {"0105:00:00.0", "0106:00:00.0"}},
  };
  for (const auto& [gpu, nics] : expected) {
    EXPECT_EQ(BusIds(g, p.ClosestNics(ByBus(g, gpu))), nics) << gpu;
  }
  // 16 GT/s x16 links; AMD Rome sockets at 16 GB/s.
  EXPECT_EQ(p.Get(ByBus(g, "0003:00:00.0"), ByBus(g, "0103:00:00.0")).bandwidth_gbps, 24);
  EXPECT_EQ(p.Get(ByBus(g, "0003:00:00.0"), ByBus(g, "0001:00:00.0")).bandwidth_gbps, 16);
}

TEST(NcclXmlTest, AzureNdv5SkeletonInventsNoNvSwitch) {
  const Graph g = LoadFixture("nccl_azure-ndv5_8xH100_8xIB.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 8u);
  EXPECT_TRUE(g.NodesOfType(NodeType::kNvSwitch).empty());
  const PathTable p(g);
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"0001:00:00.0", "0101:00:00.0"}, {"0002:00:00.0", "0102:00:00.0"},
      {"0003:00:00.0", "0103:00:00.0"}, {"0008:00:00.0", "0104:00:00.0"},
      {"0009:00:00.0", "0105:00:00.0"}, {"000a:00:00.0", "0106:00:00.0"},
      {"000b:00:00.0", "0107:00:00.0"}, {"000c:00:00.0", "0108:00:00.0"}};
  for (const auto& [gpu, nic] : pairs) {
    EXPECT_EQ(p.ClosestNics(ByBus(g, gpu)), std::vector<int>{ByBus(g, nic)}) << gpu;
    EXPECT_EQ(p.Get(ByBus(g, gpu), ByBus(g, nic)), (Path{PathType::kPix, 48, 2})) << gpu;
  }
  EXPECT_EQ(p.Get(ByBus(g, "0001:00:00.0"), ByBus(g, "0002:00:00.0")).type, PathType::kPhb);
  // Different sockets; Sapphire Rapids UPI at 22 GB/s.
  EXPECT_EQ(p.Get(ByBus(g, "0001:00:00.0"), ByBus(g, "0009:00:00.0")),
            (Path{PathType::kSys, 22, 5}));
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "NUMA1")].cpu.cpus), "48-95");
}

TEST(NcclXmlTest, IbmCloudH100CompleteDumpWithNvSwitch) {
  const Graph g = LoadFixture("nccl_ibmcloud-gx3d-h100_8xH100_8xCX7_nvswitch.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 8u);
  const std::vector<int> nvswitches = g.NodesOfType(NodeType::kNvSwitch);
  ASSERT_EQ(nvswitches.size(), 1u);
  EXPECT_EQ(
      g.nodes[nvswitches[0]].nvswitch.bus_ids,
      (std::vector<std::string>{"0000:f3:00.0", "0000:f4:00.0", "0000:f5:00.0", "0000:f6:00.0"}));
  for (const Link& l : g.links) {
    if (l.type != LinkType::kNvLink) continue;
    EXPECT_EQ(l.nvlink_count, 18);  // 5 + 5 + 4 + 4 links to the four switches
    EXPECT_DOUBLE_EQ(l.nvlink_per_link_gbps, 20.6);
  }
  EXPECT_EQ(CountLinks(g, LinkType::kNvLink), 8);
  const int numa0 = ByName(g, "NUMA0");
  ASSERT_NE(Graph::FindAttribute(g.nodes[numa0], "host_hash"), nullptr);
  EXPECT_EQ(*Graph::FindAttribute(g.nodes[numa0], "host_hash"), "0xa5f31daa95182da8");

  const PathTable p(g);
  const std::vector<int> gpus = g.NodesOfType(NodeType::kGpu);
  for (int a : gpus) {
    for (int b : gpus) {
      if (a == b) continue;
      EXPECT_EQ(p.Get(a, b).type, PathType::kNvl) << g.nodes[a].name << "-" << g.nodes[b].name;
      EXPECT_DOUBLE_EQ(p.Get(a, b).bandwidth_gbps, 18 * 20.6);
    }
  }
  // dev 0 (a4:00.0) shares its bridge with mlx5_7; dev 7 (ea:00.0) with mlx5_0.
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU0")), std::vector<int>{ByName(g, "mlx5_7")});
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU3")), std::vector<int>{ByName(g, "mlx5_4")});
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU4")), std::vector<int>{ByName(g, "mlx5_3")});
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU7")), std::vector<int>{ByName(g, "mlx5_0")});
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "mlx5_3")).type, PathType::kSys);
  EXPECT_EQ(g.NumaOf(ByName(g, "GPU3")), 0);
  EXPECT_EQ(g.NumaOf(ByName(g, "GPU4")), 1);
  EXPECT_EQ(g.NumaOf(ByName(g, "mlx5_0")), 1);
  EXPECT_EQ(g.nodes[ByName(g, "mlx5_4")].nic.ports[0].guid, 0xe406e40003e1a258ULL);
  EXPECT_EQ(g.nodes[ByName(g, "mlx5_4")].nic.ports[0].speed_mbps, 200000);
}

TEST(NcclXmlTest, RcclDeepPcieTreeWithBroadcomFlattening) {
  const Graph g = LoadFixture("nccl_rccl-issue1185_8xAMD-GPU_pcie-switches.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 3u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 3u);
  // 8 Broadcom PEX switches (two levels per socket) fold into 2; the 8 GPU-side bridges stay.
  EXPECT_EQ(g.NodesOfType(NodeType::kPciSwitch).size(), 10u);
  EXPECT_EQ(g.FindByBusId("0000:33:00.0"), -1);
  EXPECT_NE(g.FindByBusId("0000:31:00.0"), -1);
  const Node& gpu0 = g.nodes[ByName(g, "GPU0")];
  EXPECT_EQ(gpu0.pci.vendor, 0x1d94);
  EXPECT_EQ(gpu0.pci.class_code, 0x038000);
  EXPECT_EQ(*Graph::FindAttribute(gpu0, "gcn"), "21943");
  EXPECT_EQ(*Graph::FindAttribute(gpu0, "arch"), "38911");
  const Node& nic = g.nodes[ByBus(g, "0000:42:00.0")];
  ASSERT_EQ(nic.nic.ports.size(), 2u);  // a dual-port ConnectX-6 Dx
  EXPECT_EQ(nic.nic.ports[0].name, "mlx5_0");
  EXPECT_EQ(nic.nic.ports[1].name, "mlx5_1");
  EXPECT_EQ(nic.nic.ports[1].port, 2);
  EXPECT_EQ(nic.nic.ports[0].guid, nic.nic.ports[1].guid);
  EXPECT_EQ(g.NumaOf(ByBus(g, "0000:91:00.0")), 5);
  EXPECT_EQ(g.NumaOf(ByName(g, "GPU4")), 7);

  const PathTable p(g);
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "GPU1")).type, PathType::kPxb);
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "GPU3")).type, PathType::kPxb);
  EXPECT_EQ(p.Get(ByName(g, "GPU0"), ByName(g, "GPU4")).type, PathType::kSys);
  for (int i = 0; i < 8; ++i) {
    const int gpu = ByName(g, absl::StrCat("GPU", i));
    const std::string nic_bus = i < 4 ? "0000:42:00.0" : "0000:c0:00.0";
    EXPECT_EQ(BusIds(g, p.ClosestNics(gpu)), std::set<std::string>{nic_bus}) << i;
    EXPECT_EQ(p.Get(gpu, ByBus(g, nic_bus)).type, PathType::kPxb);
    EXPECT_EQ(p.Get(gpu, ByBus(g, "0000:91:00.0")).type, PathType::kSys);
  }
}

TEST(NcclXmlTest, GraphFileLoadsAsChannelsNotAsATopology) {
  absl::StatusOr<Graph> as_topology =
      LoadTopologyFile(testing::FixturePath("nccl-graph_azure-ncv4_4xA100-PCIe.xml"));
  EXPECT_EQ(as_topology.status().code(), absl::StatusCode::kInvalidArgument);

  std::ifstream in(testing::FixturePath("nccl-graph_azure-ncv4_4xA100-PCIe.xml"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::vector<NcclSearchGraph>> graphs = ImportNcclGraphXml(text);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_EQ(graphs->size(), 3u);
  const NcclSearchGraph& ring = (*graphs)[0];
  EXPECT_EQ(ring.id, 0);
  EXPECT_EQ(ring.pattern, 4);
  EXPECT_EQ(ring.declared_channels, 2);
  EXPECT_EQ(ring.type_intra, PathType::kSys);
  EXPECT_EQ(ring.type_inter, PathType::kPix);
  EXPECT_EQ(ring.speed_intra, 12);
  ASSERT_EQ(ring.channels.size(), 2u);
  EXPECT_EQ(ring.channels[1].gpu_devs, (std::vector<int>{0, 3, 2, 1}));
  EXPECT_EQ((*graphs)[1].pattern, 1);
  EXPECT_EQ((*graphs)[2].channels.size(), 4u);
}

TEST(NcclXmlTest, RejectsBadInput) {
  const std::pair<const char*, const char*> cases[] = {
      {"<topology/>", "<system> root"},
      {"<system><cpu><pci class=\"0x060400\"/></cpu></system>", "busid is missing"},
      {"<system><cpu><pci busid=\"0000:01:00.0\"/></cpu></system>", "class is missing"},
      {"<system><cpu><pci busid=\"zz\" class=\"0x030200\"/></cpu></system>", "bad PCI bus id"},
      {"<system><cpu numaid=\"x\"/></system>", "not an integer"},
      {"<system><cpu affinity=\"fffffffff\"/></system>", "bad CPU mask"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic><net dev=\"0\"/></nic>"
       "</pci></cpu></system>",
       "name is missing"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\">"
       "<nvlink target=\"0000:02:00.0\" count=\"2\" tclass=\"0x030200\"/></gpu></pci></cpu>"
       "</system>",
       "not a GPU in this file"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\"/>"
       "<pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu></system>",
       "duplicate bus id"},
      {"<system><cpu><pci busid", "XML line 1"},
  };
  for (const auto& [xml, message] : cases) {
    absl::StatusOr<Graph> g = ImportNcclTopologyXml(xml);
    ASSERT_FALSE(g.ok()) << xml;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << xml;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status();
  }
}

TEST(NcclXmlTest, VmPlaceholderNvLinkTargetsMeanAnNvSwitch) {
  // Inside VMs NVML reports unreachable NVLink targets; NCCL assumes an NVSwitch (nccl#1182).
  absl::StatusOr<Graph> g = ImportNcclTopologyXml(
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" "
      "link_width=\"16\"><gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\">"
      "<nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/></gpu></pci>"
      "<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" "
      "link_width=\"16\"><gpu dev=\"1\" sm=\"90\" rank=\"1\" gdr=\"1\">"
      "<nvlink target=\"fffffff:ffff:ff\" count=\"18\"/></gpu></pci></cpu></system>");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->NodesOfType(NodeType::kNvSwitch).size(), 1u);
  EXPECT_TRUE(g->nodes[g->NodesOfType(NodeType::kNvSwitch)[0]].nvswitch.bus_ids.empty());
  const PathTable p(*g);
  EXPECT_EQ(p.Get(g->FindByName("GPU0"), g->FindByName("GPU1")),
            (Path{PathType::kNvl, 18 * 20.6, 2}));
}

}  // namespace
}  // namespace baton::topology
