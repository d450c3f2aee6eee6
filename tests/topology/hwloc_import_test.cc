// Facts of the recorded hwloc topologies, read off the files themselves (see SOURCES.md).

#include "topology/hwloc_import.h"

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

std::vector<int> OnNuma(const Graph& g, NodeType type, int numa) {
  std::vector<int> out;
  for (int id : g.NodesOfType(type)) {
    if (g.NumaOf(id) == numa) out.push_back(id);
  }
  return out;
}

// The graph without NVLinks: what PCIe alone gives.
Graph PcieOnly(Graph g) {
  std::erase_if(g.links, [](const Link& l) { return l.type == LinkType::kNvLink; });
  return g;
}

TEST(HwlocImportTest, NvidiaDgx2) {
  const Graph g = LoadFixture("hwloc_nvidia-dgx2h_16xV100_12xNVSwitch.xml");
  EXPECT_EQ(g.source, "hwloc-xml");
  EXPECT_EQ(g.attributes,
            (std::vector<std::pair<std::string, std::string>>{
                {"dmi_board_vendor", "NVIDIA"}, {"dmi_product_name", "NVIDIA DGX-2H"}}));
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 16u);
  EXPECT_TRUE(g.NodesOfType(NodeType::kNic).empty());
  const Node& gpu0 = g.nodes[ByName(g, "GPU0")];
  EXPECT_EQ(gpu0.pci.bus_id, "0000:34:00.0");  // nvml0
  EXPECT_EQ(gpu0.gpu.index, 0);
  EXPECT_EQ(gpu0.gpu.model, "Tesla V100-SXM3-32GB-H");
  EXPECT_EQ(gpu0.gpu.uuid, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
  EXPECT_EQ(g.nodes[ByName(g, "GPU15")].pci.bus_id, "0000:e7:00.0");
  EXPECT_EQ(OnNuma(g, NodeType::kGpu, 0).size(), 8u);
  EXPECT_EQ(OnNuma(g, NodeType::kGpu, 1).size(), 8u);
  EXPECT_EQ(g.NumaOf(ByName(g, "GPU8")), 1);
  EXPECT_EQ(g.nodes[ByName(g, "NUMA0")].cpu.model_name,
            "Intel(R) Xeon(R) Platinum 8174 CPU @ 3.10GHz");

  // All 12 NVSwitches, including 0000:66:00.0 recorded with an all-zero pci_type.
  const std::vector<int> nvs = g.NodesOfType(NodeType::kNvSwitch);
  ASSERT_EQ(nvs.size(), 1u);
  EXPECT_EQ(g.nodes[nvs[0]].nvswitch.bus_ids.size(), 12u);
  EXPECT_EQ(std::count(g.nodes[nvs[0]].nvswitch.bus_ids.begin(),
                       g.nodes[nvs[0]].nvswitch.bus_ids.end(), "0000:66:00.0"),
            1);
  for (const Link& l : g.links) {
    if (l.type != LinkType::kNvLink) continue;
    EXPECT_EQ(l.bandwidth_gbps, 150);  // one 25 GB/s link to each of 6 switches
    EXPECT_EQ(l.nvlink_count, 6);
  }
  const PathTable p(g);
  for (int a : g.NodesOfType(NodeType::kGpu)) {
    for (int b : g.NodesOfType(NodeType::kGpu)) {
      if (a != b) {
        EXPECT_EQ(p.Get(a, b).type, PathType::kNvl);
      }
    }
  }
  // The PLX tree underneath, with switches collapsed to their upstream ports as NCCL does.
  const Graph pcie = PcieOnly(g);
  const PathTable q(pcie);
  const int nvml0 = ByBus(g, "0000:34:00.0");
  EXPECT_EQ(q.Get(nvml0, ByBus(g, "0000:36:00.0")), (Path{PathType::kPix, 15.753846, 2}));
  EXPECT_EQ(q.Get(nvml0, ByBus(g, "0000:39:00.0")).type, PathType::kPxb);
  EXPECT_EQ(q.Get(nvml0, ByBus(g, "0000:57:00.0")).type, PathType::kPhb);
  EXPECT_EQ(q.Get(nvml0, ByBus(g, "0000:b7:00.0")).type, PathType::kSys);
  EXPECT_EQ(g.PciParent(nvml0), ByBus(g, "0000:32:00.0"));
  EXPECT_EQ(g.PciParent(ByBus(g, "0000:32:00.0")), ByBus(g, "0000:2c:00.0"));
  EXPECT_EQ(g.PciParent(ByBus(g, "0000:2c:00.0")), ByName(g, "NUMA0"));
}

TEST(HwlocImportTest, IbmPower8WithCpuNvLink) {
  const Graph g = LoadFixture("hwloc_ibm-power8-8335GTB_4xP100_nvlink.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 4u);
  EXPECT_TRUE(g.NodesOfType(NodeType::kNic).empty());
  EXPECT_TRUE(g.NodesOfType(NodeType::kNvSwitch).empty());
  const int gpu0 = ByName(g, "GPU0"), gpu1 = ByName(g, "GPU1");
  const int gpu2 = ByName(g, "GPU2"), gpu3 = ByName(g, "GPU3");
  EXPECT_EQ(g.nodes[gpu0].pci.bus_id, "0002:01:00.0");
  EXPECT_EQ(g.nodes[gpu0].gpu.model, "Tesla P100-SXM2-16GB");
  EXPECT_EQ(g.NumaOf(gpu1), 0);
  EXPECT_EQ(g.NumaOf(gpu2), 1);
  int gpu_gpu = 0, gpu_cpu = 0;
  for (const Link& l : g.links) {
    if (l.type != LinkType::kNvLink) continue;
    EXPECT_EQ(l.bandwidth_gbps, 40);  // two NVLink 1.0 links of 20 GB/s
    EXPECT_EQ(l.nvlink_count, 2);
    const bool to_cpu = g.nodes[l.a].type == NodeType::kCpu || g.nodes[l.b].type == NodeType::kCpu;
    (to_cpu ? gpu_cpu : gpu_gpu)++;
  }
  EXPECT_EQ(gpu_gpu, 2);
  EXPECT_EQ(gpu_cpu, 4);
  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, gpu1).type, PathType::kNvl);
  EXPECT_EQ(p.Get(gpu2, gpu3).type, PathType::kNvl);
  EXPECT_EQ(p.Get(gpu0, gpu2).type, PathType::kSys);
  EXPECT_EQ(p.Get(gpu0, ByName(g, "NUMA0")).type, PathType::kNvl);  // GPU-CPU NVLink
}

TEST(HwlocImportTest, JuwelsBoosterGpuHcaPairs) {
  const Graph g = LoadFixture("hwloc_juwels-booster_4xA100_4xHDR.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 4u);  // the ASPEED VGA is not a GPU
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 6u);  // 4 HDR HCAs + 2 i350 ports
  EXPECT_EQ(g.FindByBusId("0000:62:00.0"), -1);
  EXPECT_EQ(g.FindByBusId("0000:45:00.0"), -1);  // NVMe behind the same switch
  std::set<int> packages;
  for (int cpu : g.NodesOfType(NodeType::kCpu)) packages.insert(g.nodes[cpu].cpu.package);
  EXPECT_EQ(packages, (std::set<int>{0, 1}));
  EXPECT_EQ(g.nodes[ByName(g, "NUMA0")].cpu.vendor, "AuthenticAMD");
  const Node& hca = g.nodes[ByName(g, "mlx5_0")];
  EXPECT_EQ(hca.pci.bus_id, "0000:04:00.0");
  EXPECT_EQ(hca.pci.class_code, 0x020700);
  ASSERT_EQ(hca.nic.ports.size(), 1u);
  EXPECT_EQ(hca.nic.ports[0].port, 1);
  EXPECT_EQ(hca.nic.ports[0].state, "ACTIVE");
  EXPECT_EQ(hca.nic.ports[0].netdev, "ib0");
  EXPECT_EQ(hca.nic.ports[0].guid, 0x0800380001c091ecULL);

  const PathTable p(g);
  const std::vector<std::tuple<std::string, std::string, int>> pairs = {
      {"0000:03:00.0", "mlx5_0", 3},
      {"0000:44:00.0", "mlx5_1", 1},
      {"0000:84:00.0", "mlx5_2", 7},
      {"0000:c4:00.0", "mlx5_3", 5},
  };
  for (const auto& [gpu_bus, hca_name, numa] : pairs) {
    const int gpu = ByBus(g, gpu_bus);
    EXPECT_EQ(g.NumaOf(gpu), numa) << gpu_bus;
    EXPECT_EQ(g.NumaOf(ByName(g, hca_name)), numa) << hca_name;
    EXPECT_EQ(p.ClosestNics(gpu), std::vector<int>{ByName(g, hca_name)}) << gpu_bus;
    // Gen4 x16 through a PEX88096: hwloc's 31.507692 GB/s.
    EXPECT_EQ(p.Get(gpu, ByName(g, hca_name)), (Path{PathType::kPix, 31.507692, 2}));
  }
  EXPECT_EQ(p.Get(ByBus(g, "0000:03:00.0"), ByBus(g, "0000:44:00.0")).type, PathType::kSys);
  EXPECT_EQ(g.NumaOf(ByName(g, "enp225s0f0")), 4);
}

TEST(HwlocImportTest, SupermicroPcieOnlyGpus) {
  const Graph g = LoadFixture("hwloc_supermicro-x9drg_2socket_pcie-gpus_ib.xml");
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  // Three Tesla M2075 (10de:1094) and the AMD Tahiti with an OpenCL device; not the Matrox VGA.
  ASSERT_EQ(g.NodesOfType(NodeType::kGpu).size(), 4u);
  EXPECT_EQ(g.FindByBusId("0000:05:03.0"), -1);
  const int cuda0 = ByBus(g, "0000:84:00.0");
  EXPECT_EQ(g.nodes[cuda0].gpu.index, 0);
  EXPECT_EQ(g.nodes[cuda0].name, "GPU0");
  EXPECT_EQ(g.nodes[cuda0].gpu.model, "Tesla K40m");
  EXPECT_EQ(g.nodes[ByBus(g, "0000:84:00.1")].pci.vendor, 0x1002);
  EXPECT_EQ(g.nodes[ByBus(g, "0000:84:00.1")].gpu.model, "AMD Radeon R9 200 / HD 7900 Series");
  EXPECT_EQ(g.nodes[ByBus(g, "0000:03:00.0")].name, "GPU1");  // numbered in bus order
  EXPECT_EQ(g.NumaOf(ByBus(g, "0000:03:00.0")), 0);
  EXPECT_EQ(g.NumaOf(ByBus(g, "0000:83:00.0")), 1);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 3u);
  for (int nic : g.NodesOfType(NodeType::kNic)) EXPECT_EQ(g.NumaOf(nic), 1);
  const PathTable p(g);
  const int ib = ByName(g, "mlx5_0");
  EXPECT_EQ(p.Get(cuda0, ib), (Path{PathType::kPhb, kDefaultPciBandwidth, 2}));  // speed unknown
  EXPECT_EQ(p.Get(ByBus(g, "0000:03:00.0"), ib).type, PathType::kSys);
  EXPECT_EQ(p.Get(cuda0, ByBus(g, "0000:83:00.0")).type, PathType::kPhb);
}

TEST(HwlocImportTest, CiscoCpuOnlyNodeWithVirtualFunctions) {
  const Graph g = LoadFixture("hwloc_2socket_cpu-only_cisco-vic-VFs.xml");
  EXPECT_TRUE(g.NodesOfType(NodeType::kGpu).empty());
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 18u);
  EXPECT_EQ(OnNuma(g, NodeType::kNic, 0).size(), 11u);
  EXPECT_EQ(OnNuma(g, NodeType::kNic, 1).size(), 7u);
  const Node& pf = g.nodes[ByBus(g, "0000:0b:00.0")];
  ASSERT_EQ(pf.nic.ports.size(), 1u);
  EXPECT_EQ(pf.nic.ports[0].name, "usnic_0");
  EXPECT_EQ(pf.nic.ports[0].netdev, "eth4");
  EXPECT_EQ(pf.nic.ports[0].state, "ACTIVE");
  EXPECT_TRUE(g.nodes[ByBus(g, "0000:0b:00.1")].nic.ports.empty());  // a VF without OS device
  const Node& eth0 = g.nodes[ByName(g, "eth0")];
  ASSERT_EQ(eth0.nic.ports.size(), 1u);
  EXPECT_EQ(eth0.nic.ports[0].netdev, "eth0");
  const PathTable p(g);
  EXPECT_EQ(p.Get(ByBus(g, "0000:0b:00.0"), ByBus(g, "0000:0b:00.1")).type, PathType::kPix);
  EXPECT_EQ(p.Get(ByBus(g, "0000:0b:00.0"), ByBus(g, "0000:0c:00.4")).type, PathType::kPix);
  EXPECT_EQ(p.Get(ByName(g, "eth0"), ByName(g, "eth1")).type, PathType::kPhb);
  EXPECT_EQ(p.Get(ByName(g, "eth0"), ByName(g, "eth7")).type, PathType::kSys);
}

TEST(HwlocImportTest, RejectsWhatHwlocRejects) {
  EXPECT_EQ(ImportHwlocXml("<topology version=\"2.0\"><object").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportHwlocXml("not xml").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::topology
