// Facts of the recorded `nvidia-smi topo -m` matrices, read off the files (see SOURCES.md).

#include "topology/nvsmi_import.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/topology/fixtures.h"
#include "topology/paths.h"

namespace baton::topology {
namespace {

using testing::ByName;
using testing::LoadFixture;

int NvLinkCount(const Graph& g, int a, int b) {
  for (const Link& l : g.links) {
    if (l.type == LinkType::kNvLink && ((l.a == a && l.b == b) || (l.a == b && l.b == a))) {
      return l.nvlink_count;
    }
  }
  return 0;
}

TEST(NvsmiImportTest, Dgx1HybridCubeMesh) {
  const Graph g = LoadFixture("nvsmi-topo_dgx1-v100_8xV100_4xmlx5.txt");
  EXPECT_EQ(g.source, "nvidia-smi");
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 4u);
  EXPECT_EQ(g.NodesOfType(NodeType::kCpu).size(), 2u);
  EXPECT_TRUE(g.NodesOfType(NodeType::kNvSwitch).empty());  // NVLink without NVSwitch
  // The old layout has no NUMA column; every GPU row says CPU affinity 0-19,40-59.
  for (int cpu : g.NodesOfType(NodeType::kCpu)) {
    EXPECT_EQ(g.nodes[cpu].cpu.numa_id, -1);
    EXPECT_EQ(FormatCpuList(g.nodes[cpu].cpu.cpus), "0-19,40-59");
  }
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "GPU5")].gpu.cpu_affinity), "0-19,40-59");
  const int gpu0 = ByName(g, "GPU0");
  EXPECT_EQ(NvLinkCount(g, gpu0, ByName(g, "GPU1")), 1);
  EXPECT_EQ(NvLinkCount(g, gpu0, ByName(g, "GPU2")), 1);
  EXPECT_EQ(NvLinkCount(g, gpu0, ByName(g, "GPU3")), 2);
  EXPECT_EQ(NvLinkCount(g, gpu0, ByName(g, "GPU4")), 2);
  EXPECT_EQ(NvLinkCount(g, gpu0, ByName(g, "GPU5")), 0);
  EXPECT_EQ(g.CpuOf(gpu0), g.CpuOf(ByName(g, "GPU3")));
  EXPECT_NE(g.CpuOf(gpu0), g.CpuOf(ByName(g, "GPU4")));

  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, ByName(g, "GPU3")), (Path{PathType::kNvl, 40, 1}));
  EXPECT_EQ(p.Get(gpu0, ByName(g, "GPU5")).type, PathType::kNvb);  // SYS in the matrix: no link
  // The matrix's NIC columns, reproduced by the rebuilt PCIe tree.
  EXPECT_EQ(p.Get(gpu0, ByName(g, "mlx5_0")).type, PathType::kPix);
  EXPECT_EQ(p.Get(gpu0, ByName(g, "mlx5_1")).type, PathType::kPhb);
  EXPECT_EQ(p.Get(gpu0, ByName(g, "mlx5_2")).type, PathType::kSys);
  EXPECT_EQ(p.Get(ByName(g, "mlx5_2"), ByName(g, "mlx5_3")).type, PathType::kPhb);
  const std::vector<std::pair<int, std::string>> closest = {
      {0, "mlx5_0"}, {1, "mlx5_0"}, {2, "mlx5_1"}, {3, "mlx5_1"},
      {4, "mlx5_2"}, {5, "mlx5_2"}, {6, "mlx5_3"}, {7, "mlx5_3"}};
  for (const auto& [gpu, nic] : closest) {
    EXPECT_EQ(p.ClosestNics(ByName(g, absl::StrCat("GPU", gpu))), std::vector<int>{ByName(g, nic)})
        << gpu;
  }
}

TEST(NvsmiImportTest, H20WithNvSwitchAndNicLegend) {
  const Graph g = LoadFixture("nvsmi-topo_h20-3e_8xGPU-NV18_8xmlx5.txt");
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);
  EXPECT_EQ(g.NodesOfType(NodeType::kNic).size(), 8u);
  EXPECT_EQ(g.FindByName("NIC0"), -1);  // renamed through the NIC legend
  const std::vector<int> nvs = g.NodesOfType(NodeType::kNvSwitch);
  ASSERT_EQ(nvs.size(), 1u);  // NV18 to all 7 peers: 126 links, so a switch
  for (int gpu : g.NodesOfType(NodeType::kGpu)) EXPECT_EQ(NvLinkCount(g, gpu, nvs[0]), 18);
  EXPECT_EQ(g.nodes[ByName(g, "NUMA0")].cpu.numa_id, 0);
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "NUMA0")].cpu.cpus), "0-47,96-143");
  EXPECT_EQ(FormatCpuList(g.nodes[ByName(g, "NUMA1")].cpu.cpus), "48-95,144-191");
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(g.NumaOf(ByName(g, absl::StrCat("GPU", i))), i < 4 ? 0 : 1);
    EXPECT_EQ(g.NumaOf(ByName(g, absl::StrCat("mlx5_", i))), i < 4 ? 0 : 1);
  }
  const PathTable p(g);
  for (int a : g.NodesOfType(NodeType::kGpu)) {
    for (int b : g.NodesOfType(NodeType::kGpu)) {
      if (a != b) {
        EXPECT_EQ(p.Get(a, b).type, PathType::kNvl);
      }
    }
  }
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU0")),
            (std::vector<int>{ByName(g, "mlx5_0"), ByName(g, "mlx5_1")}));
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU6")),
            (std::vector<int>{ByName(g, "mlx5_6"), ByName(g, "mlx5_7")}));
  // NODE in the matrix is PHB for NCCL.
  EXPECT_EQ(p.Get(ByName(g, "GPU1"), ByName(g, "mlx5_0")).type, PathType::kPhb);
  EXPECT_EQ(p.ClosestNics(ByName(g, "GPU1")).size(), 4u);
  EXPECT_EQ(p.Get(ByName(g, "mlx5_0"), ByName(g, "mlx5_1")).type, PathType::kPix);
  EXPECT_EQ(p.Get(ByName(g, "GPU1"), ByName(g, "mlx5_4")).type, PathType::kSys);
}

TEST(NvsmiImportTest, PxbGroupsBecomeTwoSwitchLevels) {
  absl::StatusOr<Graph> g = ImportNvidiaSmiTopo(
      "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tPIX\tPXB\tSYS\t0-7\t0\n"
      "GPU1\tPIX\t X \tPXB\tSYS\t0-7\t0\n"
      "GPU2\tPXB\tPXB\t X \tSYS\t0-7\t0\n"
      "GPU3\tSYS\tSYS\tSYS\t X \t8-15\t1\n"
      "\nLegend:\n");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->NodesOfType(NodeType::kPciSwitch).size(), 3u);  // upper + two leaves
  const PathTable p(*g);
  EXPECT_EQ(p.Get(ByName(*g, "GPU0"), ByName(*g, "GPU1")).type, PathType::kPix);
  EXPECT_EQ(p.Get(ByName(*g, "GPU0"), ByName(*g, "GPU2")).type, PathType::kPxb);
  EXPECT_EQ(g->NumaOf(ByName(*g, "GPU3")), 1);
}

TEST(NvsmiImportTest, RejectsMatricesNoPcieTreeCanProduce) {
  const std::pair<const char*, const char*> cases[] = {
      // PIX with GPU1 and GPU2, but GPU1-GPU2 PHB: not a tree.
      {"\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
       "GPU0\t X \tPIX\tPIX\t0-7\n"
       "GPU1\tPIX\t X \tPHB\t0-7\n"
       "GPU2\tPIX\tPHB\t X \t0-7\n",
       "not a PCIe tree"},
      {"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0\nGPU1\tPHB\t X \t0\n", "not symmetric"},
      {"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0\n", "no row GPU1"},
      {"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tABC\t0\nGPU1\tABC\t X \t0\n", "unknown cell"},
      {"\tGPU0\tGPU1\tCPU Affinity\nGPU0\tPIX\tPIX\t0\nGPU1\tPIX\t X \t0\n", "bad diagonal"},
      {"nothing here", "no GPU0"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<Graph> g = ImportNvidiaSmiTopo(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status();
  }
}

}  // namespace
}  // namespace baton::topology
