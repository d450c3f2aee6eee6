#pragma once

// Live discovery of the local node, and loading of recorded topologies.
//
// DiscoverLocalNode combines hwloc (CPUs/NUMA, PCI tree, link speeds), sysfs (NIC ports, speeds,
// states, IB ports, PCIe generation and width) and NVML through `gpu_probe` (GPUs and NVLinks). A
// machine without the NVIDIA driver yields a graph without GPUs and a `gpu_note` saying why; that
// is not an error. Errors: Internal when hwloc cannot load the machine's topology.
//
// LoadTopologyFile / ImportTopology accept every recorded format, recognised by content: the JSON
// dump ("{"), NCCL topology XML (<system>), hwloc XML (<topology>), and `nvidia-smi topo -m`
// text. An NCCL graph file (<graphs>) describes channels, not a machine: InvalidArgument.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"
#include "topology/nvml.h"

namespace baton::topology {

struct DiscoveryOptions {
  std::string sysfs_root = "/sys";
  // Used when `gpu_probe` is null.
  std::string nvml_library = "libnvidia-ml.so.1";
  // Not owned; null means NVML from `nvml_library`.
  GpuProbe* gpu_probe = nullptr;
};

struct Discovery {
  Graph graph;
  std::string gpu_note;  // empty when NVML answered for every GPU
};

absl::StatusOr<Discovery> DiscoverLocalNode(const DiscoveryOptions& options = {});

enum class TopologyFormat { kJson, kNcclXml, kNcclGraphXml, kHwlocXml, kNvidiaSmi, kUnknown };
TopologyFormat DetectTopologyFormat(absl::string_view content);

absl::StatusOr<Graph> ImportTopology(absl::string_view content);
// NotFound if the file cannot be read; otherwise as ImportTopology.
absl::StatusOr<Graph> LoadTopologyFile(const std::string& path);

}  // namespace baton::topology
