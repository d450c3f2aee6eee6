#pragma once

// Loads a recorded topology from tests/topology/fixtures/ (see SOURCES.md there) for tests.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "topology/discovery.h"
#include "topology/graph.h"

namespace baton::topology::testing {

inline std::string FixturePath(const std::string& name) {
  return std::string(BATON_TOPOLOGY_FIXTURES) + "/" + name;
}

// Every fixture file that describes a machine (all but the NCCL graph file and SOURCES.md).
inline std::vector<std::string> MachineFixtures() {
  return {
      "hwloc_2socket_cpu-only_cisco-vic-VFs.xml",
      "hwloc_ibm-power8-8335GTB_4xP100_nvlink.xml",
      "hwloc_juwels-booster_4xA100_4xHDR.xml",
      "hwloc_nvidia-dgx2h_16xV100_12xNVSwitch.xml",
      "hwloc_supermicro-x9drg_2socket_pcie-gpus_ib.xml",
      "nccl_aws-p4d-24xl_8xA100_4xEFA.xml",
      "nccl_aws-p5-48xl_8xH100_32xEFA.xml",
      "nccl_azure-ncv4_4xA100-PCIe_nvlink-pairs.xml",
      "nccl_azure-ndv4_8xA100_8xIB.xml",
      "nccl_azure-ndv5_8xH100_8xIB.xml",
      "nccl_ibmcloud-gx3d-h100_8xH100_8xCX7_nvswitch.xml",
      "nccl_rccl-issue1185_8xAMD-GPU_pcie-switches.xml",
      "nvsmi-topo_dgx1-v100_8xV100_4xmlx5.txt",
      "nvsmi-topo_h20-3e_8xGPU-NV18_8xmlx5.txt",
  };
}

// Loads fixture `name`, failing the calling test when it does not load.
inline Graph LoadFixture(const std::string& name) {
  absl::StatusOr<Graph> graph = LoadTopologyFile(FixturePath(name));
  EXPECT_TRUE(graph.ok()) << name << ": " << graph.status();
  return graph.ok() ? *std::move(graph) : Graph{};
}

// Node id by bus id, failing the test when absent.
inline int ByBus(const Graph& graph, const std::string& bus_id) {
  const int id = graph.FindByBusId(bus_id);
  EXPECT_GE(id, 0) << "no node with bus id " << bus_id;
  return id;
}

inline int ByName(const Graph& graph, const std::string& name) {
  const int id = graph.FindByName(name);
  EXPECT_GE(id, 0) << "no node named " << name;
  return id;
}

}  // namespace baton::topology::testing
