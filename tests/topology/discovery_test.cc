#include "topology/discovery.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/topology/fixtures.h"
#include "topology/graph_json.h"
#include "topology/nvml.h"
#include "topology/paths.h"
#include "topology/sysfs.h"

namespace baton::topology {
namespace {

// Answers with a fixed list, as NVML would on a GPU machine.
class FakeGpuProbe final : public GpuProbe {
 public:
  explicit FakeGpuProbe(GpuProbeResult result) : result_(std::move(result)) {}
  GpuProbeResult Probe() override { return result_; }

 private:
  GpuProbeResult result_;
};

TEST(DiscoveryTest, LiveMachineWithoutNvmlHasCpusAndNoGpus) {
  DiscoveryOptions options;
  options.nvml_library = "libbaton-no-such-nvml.so.1";
  absl::StatusOr<Discovery> d = DiscoverLocalNode(options);
  ASSERT_TRUE(d.ok()) << d.status();
  const Graph& g = d->graph;
  EXPECT_EQ(g.source, "live");
  EXPECT_TRUE(ValidateGraph(g).ok());
  const std::vector<int> cpus = g.NodesOfType(NodeType::kCpu);
  ASSERT_GE(cpus.size(), 1u);
  size_t total_cpus = 0;
  for (int cpu : cpus) {
    EXPECT_GE(g.nodes[cpu].cpu.numa_id, 0);
    total_cpus += g.nodes[cpu].cpu.cpus.size();
  }
  EXPECT_GE(total_cpus, 1u);
  EXPECT_TRUE(g.NodesOfType(NodeType::kGpu).empty());
  EXPECT_NE(d->gpu_note.find("libbaton-no-such-nvml.so.1 not found"), std::string::npos)
      << d->gpu_note;
  for (int nic : g.NodesOfType(NodeType::kNic)) EXPECT_GE(g.CpuOf(nic), 0);
  // Every interface sysfs puts on a PCI device is a port of a NIC node.
  absl::StatusOr<std::vector<SysfsNetInterface>> interfaces = ScanNetInterfaces("/sys");
  ASSERT_TRUE(interfaces.ok()) << interfaces.status();
  for (const SysfsNetInterface& iface : *interfaces) {
    const int nic = g.FindByBusId(iface.pci_bus_id);
    ASSERT_GE(nic, 0) << iface.name;
    EXPECT_EQ(g.nodes[nic].type, NodeType::kNic) << iface.name;
    bool found = false;
    for (const NicPort& port : g.nodes[nic].nic.ports) found |= port.netdev == iface.name;
    EXPECT_TRUE(found) << iface.name;
  }
  // The live graph dumps and reloads like any other.
  absl::StatusOr<Graph> back = GraphFromJson(GraphToJson(g));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, g);
}

TEST(DiscoveryTest, DefaultNvmlProbeNeverFails) {
  GpuProbeResult result = NewNvmlGpuProbe()->Probe();
  if (result.gpus.empty()) {
    EXPECT_FALSE(result.note.empty());
  } else {
    for (const ProbedGpu& gpu : result.gpus) EXPECT_FALSE(gpu.bus_id.empty());
  }
  absl::StatusOr<Discovery> d = DiscoverLocalNode();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->graph.NodesOfType(NodeType::kGpu).size(), result.gpus.size());
}

TEST(DiscoveryTest, ProbedGpusJoinTheGraphWithTheirNvLinks) {
  GpuProbeResult result;
  for (int i = 0; i < 2; ++i) {
    ProbedGpu gpu;
    gpu.index = i;
    gpu.bus_id = i == 0 ? "0000:e1:00.0" : "0000:e2:00.0";
    gpu.uuid = "GPU-" + std::to_string(i);
    gpu.model = "NVIDIA H100 80GB HBM3";
    gpu.compute_capability = 90;
    gpu.memory_bytes = 85520809984;
    gpu.nvlinks.push_back(ProbedNvLink{ProbedNvLink::Remote::kSwitch, "0000:f3:00.0", 9});
    gpu.nvlinks.push_back(ProbedNvLink{ProbedNvLink::Remote::kUnknown, "", 9});
    result.gpus.push_back(gpu);
  }
  FakeGpuProbe probe(result);
  DiscoveryOptions options;
  options.gpu_probe = &probe;
  absl::StatusOr<Discovery> d = DiscoverLocalNode(options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->gpu_note, "");
  const Graph& g = d->graph;
  ASSERT_EQ(g.NodesOfType(NodeType::kGpu).size(), 2u);
  const int gpu0 = g.FindByName("GPU0");
  ASSERT_GE(gpu0, 0);
  EXPECT_EQ(g.nodes[gpu0].gpu.uuid, "GPU-0");
  EXPECT_EQ(g.nodes[gpu0].gpu.memory_bytes, 85520809984u);
  EXPECT_GE(g.CpuOf(gpu0), 0);  // not in this machine's PCI tree: hung off a CPU
  const std::vector<int> nvs = g.NodesOfType(NodeType::kNvSwitch);
  ASSERT_EQ(nvs.size(), 1u);
  EXPECT_EQ(g.nodes[nvs[0]].nvswitch.bus_ids, std::vector<std::string>{"0000:f3:00.0"});
  const PathTable p(g);
  EXPECT_EQ(p.Get(gpu0, g.FindByName("GPU1")), (Path{PathType::kNvl, 18 * 20.6, 2}));
}

TEST(DiscoveryTest, MergeMatchesGpusByBusIdAndLinksGpuPeers) {
  Graph g = testing::LoadFixture("nccl_azure-ndv5_8xH100_8xIB.xml");  // a skeleton: no NVLinks
  std::vector<ProbedGpu> gpus;
  for (const std::string bus : {"0001:00:00.0", "0002:00:00.0"}) {
    ProbedGpu gpu;
    gpu.index = static_cast<int>(gpus.size());
    gpu.bus_id = bus;
    gpu.compute_capability = 90;
    gpu.nvlinks.push_back(ProbedNvLink{ProbedNvLink::Remote::kGpu,
                                       bus == "0001:00:00.0" ? "0002:00:00.0" : "0001:00:00.0", 4});
    gpus.push_back(gpu);
  }
  ASSERT_TRUE(MergeProbedGpus(gpus, g).ok());
  EXPECT_EQ(g.NodesOfType(NodeType::kGpu).size(), 8u);  // matched, not added
  const int a = g.FindByBusId("0001:00:00.0"), b = g.FindByBusId("0002:00:00.0");
  EXPECT_EQ(g.nodes[a].gpu.index, 0);
  const PathTable p(g);
  EXPECT_EQ(p.Get(a, b), (Path{PathType::kNvl, 4 * 20.6, 1}));  // both ends listed it: 4, not 8
}

TEST(DiscoveryTest, LoaderRecognisesFormatsAndReportsErrors) {
  EXPECT_EQ(DetectTopologyFormat("  {\"format\": 1}"), TopologyFormat::kJson);
  EXPECT_EQ(DetectTopologyFormat("<!-- c -->\n<system version=\"1\"/>"), TopologyFormat::kNcclXml);
  EXPECT_EQ(DetectTopologyFormat("<?xml version=\"1.0\"?><topology version=\"2.0\"/>"),
            TopologyFormat::kHwlocXml);
  EXPECT_EQ(DetectTopologyFormat("<graphs/>"), TopologyFormat::kNcclGraphXml);
  EXPECT_EQ(DetectTopologyFormat("\tGPU0\tCPU Affinity\nGPU0\t X \t0\n\nLegend:\n"),
            TopologyFormat::kNvidiaSmi);
  EXPECT_EQ(DetectTopologyFormat("hello"), TopologyFormat::kUnknown);
  EXPECT_EQ(LoadTopologyFile("/nonexistent/topo.xml").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<Graph> bad = ImportTopology("<system><cpu></system>");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("XML line 1"), std::string::npos) << bad.status();
  EXPECT_EQ(ImportTopology("hello").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Graph> single =
      ImportTopology("\tGPU0\tCPU Affinity\nGPU0\t X \t0-3\n\nLegend:\n");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->NodesOfType(NodeType::kGpu).size(), 1u);
}

TEST(DiscoveryTest, EveryMachineFixtureLoads) {
  for (const std::string& name : testing::MachineFixtures()) {
    absl::StatusOr<Graph> g = LoadTopologyFile(testing::FixturePath(name));
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_TRUE(ValidateGraph(*g).ok()) << name;
    EXPECT_FALSE(g->NodesOfType(NodeType::kCpu).empty()) << name;
  }
}

}  // namespace
}  // namespace baton::topology
