#include "topology/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/topology/fixtures.h"
#include "topology/nccl_xml.h"

namespace baton::topology {
namespace {

using testing::ByBus;
using testing::ByName;
using testing::LoadFixture;

// `nodes` daemons spread over `pods` x `racks_per_pod` racks, listed in a scrambled order.
std::vector<DaemonLocality> Cluster(int nodes, int pods, int racks_per_pod, uint32_t seed) {
  std::vector<DaemonLocality> daemons;
  for (int i = 0; i < nodes; ++i) {
    const int rack = i % (pods * racks_per_pod);
    daemons.push_back({absl::StrCat("node-", i),
                       {absl::StrCat("pod-", rack / racks_per_pod), absl::StrCat("rack-", rack)}});
  }
  std::shuffle(daemons.begin(), daemons.end(), std::mt19937(seed));
  return daemons;
}

void ExpectPermutation(const std::vector<int>& order, int n) {
  ASSERT_EQ(static_cast<int>(order.size()), n);
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "rank " << i << " missing or repeated";
}

int DistinctPrefixes(const std::vector<DaemonLocality>& daemons, int level) {
  std::set<std::vector<std::string>> prefixes;
  for (const DaemonLocality& d : daemons) {
    prefixes.insert({d.labels.begin(), d.labels.begin() + level + 1});
  }
  return static_cast<int>(prefixes.size());
}

TEST(DaemonRingTest, RacksAreContiguousAtEveryScale) {
  for (int nodes : {2, 3, 5, 8, 17, 64, 100, 257, 1024}) {
    for (const auto& [pods, racks] : std::vector<std::pair<int, int>>{{1, 1}, {1, 4}, {3, 5}}) {
      SCOPED_TRACE(absl::StrCat(nodes, " nodes, ", pods, "x", racks, " racks"));
      const std::vector<DaemonLocality> daemons = Cluster(nodes, pods, racks, nodes * 31 + racks);
      absl::StatusOr<std::vector<int>> ring = PlanDaemonRing(daemons);
      ASSERT_TRUE(ring.ok()) << ring.status();
      ExpectPermutation(*ring, nodes);
      for (int level = 0; level < 2; ++level) {
        const int groups = DistinctPrefixes(daemons, level);
        // A ring through G contiguous groups crosses exactly G boundaries (none when G == 1).
        EXPECT_EQ(CountBoundaryHops(daemons, *ring, level), groups > 1 ? groups : 0) << level;
      }
    }
  }
}

TEST(DaemonRingTest, IsIndependentOfInputOrder) {
  std::vector<DaemonLocality> a = Cluster(50, 2, 3, 1);
  std::vector<DaemonLocality> b = a;
  std::reverse(b.begin(), b.end());
  const std::vector<int> ring_a = *PlanDaemonRing(a);
  const std::vector<int> ring_b = *PlanDaemonRing(b);
  for (size_t k = 0; k < ring_a.size(); ++k) EXPECT_EQ(a[ring_a[k]].name, b[ring_b[k]].name);
}

TEST(DaemonRingTest, MeasuredCostsOrderNodesInsideARack) {
  // One rack, nodes at scrambled positions on a line; hop cost = distance. The best ring walks
  // out and back: total 2 * (max - min).
  const int n = 40;
  std::vector<double> position(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(0, 1000);
  for (double& p : position) p = uniform(rng);
  std::vector<DaemonLocality> daemons;
  for (int i = 0; i < n; ++i) daemons.push_back({absl::StrCat("n", i), {"rack"}});
  LinkCosts costs(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) costs.Set(i, j, std::abs(position[i] - position[j]));
  }
  absl::StatusOr<std::vector<int>> ring = PlanDaemonRing(daemons, &costs);
  ASSERT_TRUE(ring.ok()) << ring.status();
  ExpectPermutation(*ring, n);
  const auto [lo, hi] = std::minmax_element(position.begin(), position.end());
  EXPECT_NEAR(RingCost(costs, *ring), 2 * (*hi - *lo), 1e-6);
  const std::vector<int> by_name = *PlanDaemonRing(daemons);
  EXPECT_GT(RingCost(costs, by_name), RingCost(costs, *ring));
}

TEST(DaemonRingTest, MeasuredCostsKeepRacksContiguousAndAvoidASlowPair) {
  // Two racks of 6. Inside a rack hops cost 1, except one slow pair (cost 50); across racks 10.
  std::vector<DaemonLocality> daemons;
  for (int i = 0; i < 12; ++i) daemons.push_back({absl::StrCat("n", i), {i < 6 ? "r0" : "r1"}});
  LinkCosts costs(12);
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 12; ++j) costs.Set(i, j, (i < 6) == (j < 6) ? 1 : 10);
  }
  costs.Set(0, 1, 50);  // n0 and n1 sit next to each other when ordered by name
  costs.Set(1, 0, 50);
  absl::StatusOr<std::vector<int>> ring = PlanDaemonRing(daemons, &costs);
  ASSERT_TRUE(ring.ok());
  ExpectPermutation(*ring, 12);
  EXPECT_EQ(CountBoundaryHops(daemons, *ring, 0), 2);
  EXPECT_EQ(RingCost(costs, *ring), 10 + 10 + 5 + 5);  // two rack crossings, ten cheap hops
  EXPECT_EQ(RingCost(costs, *PlanDaemonRing(daemons)), 10 + 10 + 50 + 4 + 5);
}

TEST(DaemonRingTest, RejectsBadInput) {
  EXPECT_FALSE(PlanDaemonRing({{"a", {}}, {"a", {}}}).ok());
  EXPECT_FALSE(PlanDaemonRing({{"", {}}}).ok());
  LinkCosts wrong(3);
  EXPECT_FALSE(PlanDaemonRing({{"a", {}}, {"b", {}}}, &wrong).ok());
  LinkCosts negative(2);
  negative.Set(0, 1, -1);
  EXPECT_FALSE(PlanDaemonRing({{"a", {}}, {"b", {}}}, &negative).ok());
  EXPECT_TRUE(PlanDaemonRing({})->empty());
  EXPECT_EQ(*PlanDaemonRing({{"solo", {"r"}}}), std::vector<int>{0});
}

TEST(GpuRingTest, FollowsNvLinkOnTheDgx1) {
  const Graph g = LoadFixture("nvsmi-topo_dgx1-v100_8xV100_4xmlx5.txt");
  const PathTable p(g);
  absl::StatusOr<GpuRing> ring = PlanGpuRing(g, p);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<std::string> names;
  for (int gpu : ring->gpus) names.push_back(g.nodes[gpu].name);
  // The hybrid cube mesh has a ring made only of double (NV2) links.
  EXPECT_EQ(names, (std::vector<std::string>{"GPU0", "GPU3", "GPU2", "GPU1", "GPU5", "GPU6", "GPU7",
                                             "GPU4"}));
  EXPECT_EQ(ring->worst_type, PathType::kNvl);
  EXPECT_EQ(ring->bottleneck_gbps, 40);
}

TEST(GpuRingTest, MatchesNcclsRingOnTheNcv4) {
  const Graph g = LoadFixture("nccl_azure-ncv4_4xA100-PCIe_nvlink-pairs.xml");
  const PathTable p(g);
  absl::StatusOr<GpuRing> ring = PlanGpuRing(g, p);
  ASSERT_TRUE(ring.ok());
  std::ifstream in(testing::FixturePath("nccl-graph_azure-ncv4_4xA100-PCIe.xml"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<NcclSearchGraph> nccl = *ImportNcclGraphXml(text);
  std::vector<int> devs;
  for (int gpu : ring->gpus) devs.push_back(g.nodes[gpu].gpu.index);
  EXPECT_EQ(devs, nccl[0].channels[0].gpu_devs);    // 0 1 2 3: both NVLink pairs used
  EXPECT_EQ(ring->worst_type, nccl[0].type_intra);  // SYS, as NCCL's search found
}

TEST(GpuRingTest, NvSwitchAndPcieMachines) {
  const Graph dgx2 = LoadFixture("hwloc_nvidia-dgx2h_16xV100_12xNVSwitch.xml");
  absl::StatusOr<GpuRing> ring = PlanGpuRing(dgx2, PathTable(dgx2));
  ASSERT_TRUE(ring.ok());
  ASSERT_EQ(ring->gpus.size(), 16u);
  EXPECT_EQ(ring->worst_type, PathType::kNvl);
  EXPECT_EQ(ring->bottleneck_gbps, 150);

  // PCIe only: the ring crosses the sockets exactly twice.
  const Graph p4d = LoadFixture("nccl_aws-p4d-24xl_8xA100_4xEFA.xml");
  const PathTable p(p4d);
  ring = PlanGpuRing(p4d, p);
  ASSERT_TRUE(ring.ok());
  int sys_hops = 0;
  for (size_t k = 0; k < ring->gpus.size(); ++k) {
    const int a = ring->gpus[k], b = ring->gpus[(k + 1) % ring->gpus.size()];
    sys_hops += p.Get(a, b).type == PathType::kSys ? 1 : 0;
  }
  EXPECT_EQ(sys_hops, 2);
  EXPECT_EQ(ring->bottleneck_gbps, 10);

  const Graph cpu_only = LoadFixture("hwloc_2socket_cpu-only_cisco-vic-VFs.xml");
  EXPECT_EQ(PlanGpuRing(cpu_only, PathTable(cpu_only)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(NicAssignmentTest, SpreadsGpusOverTheirClosestNics) {
  const Graph ndv4 = LoadFixture("nccl_azure-ndv4_8xA100_8xIB.xml");
  const PathTable p(ndv4);
  const std::vector<NicAssignment> assigned = AssignNics(ndv4, p);
  ASSERT_EQ(assigned.size(), 8u);
  std::set<int> used;
  for (const NicAssignment& a : assigned) {
    EXPECT_EQ(a.type, PathType::kPix) << ndv4.nodes[a.gpu].name;
    EXPECT_EQ(ndv4.PciParent(a.gpu), ndv4.PciParent(a.nic));
    used.insert(a.nic);
  }
  EXPECT_EQ(used.size(), 8u);  // two GPUs per switch, two HCAs per switch: one HCA each

  const Graph p4d = LoadFixture("nccl_aws-p4d-24xl_8xA100_4xEFA.xml");
  const PathTable q(p4d);
  for (const NicAssignment& a : AssignNics(p4d, q)) {
    const std::string gpu_bus = p4d.nodes[a.gpu].pci.bus_id;
    EXPECT_EQ(p4d.nodes[a.nic].pci.bus_id, gpu_bus.substr(0, 8) + "1b.0") << gpu_bus;
  }

  const Graph rccl = LoadFixture("nccl_rccl-issue1185_8xAMD-GPU_pcie-switches.xml");
  const std::vector<NicAssignment> ports = AssignNics(rccl, PathTable(rccl));
  ASSERT_EQ(ports.size(), 8u);
  // GPUs 0-3 share the dual-port NIC at 42:00.0 and alternate between its two ports.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ports[i].nic, ByBus(rccl, "0000:42:00.0"));
    EXPECT_EQ(ports[i].port, i % 2);
    EXPECT_EQ(ports[i].bandwidth_gbps, 24);  // 200 Gb/s port, PCIe Gen4 x16 path
  }
  EXPECT_EQ(ports[4].nic, ByBus(rccl, "0000:c0:00.0"));

  const Graph h100 = LoadFixture("nccl_ibmcloud-gx3d-h100_8xH100_8xCX7_nvswitch.xml");
  const std::vector<NicAssignment> cx7 = AssignNics(h100, PathTable(h100));
  ASSERT_EQ(cx7.size(), 8u);
  EXPECT_EQ(cx7[0].nic, ByName(h100, "mlx5_7"));
  EXPECT_EQ(cx7[0].bandwidth_gbps, 25);  // the 200 Gb/s port is slower than the PCIe path
  EXPECT_EQ(cx7[7].nic, ByName(h100, "mlx5_0"));

  const Graph none = LoadFixture("hwloc_nvidia-dgx2h_16xV100_12xNVSwitch.xml");
  EXPECT_TRUE(AssignNics(none, PathTable(none)).empty());
}

}  // namespace
}  // namespace baton::topology
