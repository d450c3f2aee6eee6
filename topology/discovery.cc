#include "topology/discovery.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "topology/graph_json.h"
#include "topology/hwloc_import.h"
#include "topology/nccl_xml.h"
#include "topology/nvsmi_import.h"
#include "topology/sysfs.h"
#include "topology/xml.h"

namespace baton::topology {

absl::StatusOr<Discovery> DiscoverLocalNode(const DiscoveryOptions& options) {
  Discovery discovery;
  BATON_ASSIGN_OR_RETURN(discovery.graph, DiscoverWithHwloc());
  Graph& graph = discovery.graph;

  BATON_ASSIGN_OR_RETURN(const std::vector<SysfsNetInterface> interfaces,
                         ScanNetInterfaces(options.sysfs_root));
  BATON_ASSIGN_OR_RETURN(const std::vector<SysfsIbDevice> ib_devices,
                         ScanInfinibandDevices(options.sysfs_root));
  ApplySysfsNics(interfaces, ib_devices, graph);

  std::unique_ptr<GpuProbe> owned_probe;
  GpuProbe* probe = options.gpu_probe;
  if (probe == nullptr) {
    owned_probe = NewNvmlGpuProbe(options.nvml_library);
    probe = owned_probe.get();
  }
  GpuProbeResult probed = probe->Probe();
  for (ProbedGpu& gpu : probed.gpus) {
    if (gpu.numa_node < 0 && !gpu.bus_id.empty()) {
      gpu.numa_node = ReadPciNumaNode(options.sysfs_root, gpu.bus_id);
    }
  }
  BATON_RETURN_IF_ERROR(MergeProbedGpus(probed.gpus, graph));
  discovery.gpu_note = std::move(probed.note);
  if (discovery.gpu_note.empty() && graph.NodesOfType(NodeType::kGpu).empty()) {
    discovery.gpu_note = "NVML reports no GPUs";
  }

  ApplySysfsPciLinks(options.sysfs_root, graph);
  AssignDefaultNames(graph);
  BATON_RETURN_IF_ERROR(ValidateGraph(graph));
  return discovery;
}

TopologyFormat DetectTopologyFormat(absl::string_view content) {
  const absl::string_view text = absl::StripLeadingAsciiWhitespace(content);
  if (absl::StartsWith(text, "{")) return TopologyFormat::kJson;
  if (absl::StartsWith(text, "<")) {
    absl::StatusOr<XmlElement> root = ParseXml(content);
    if (!root.ok()) return TopologyFormat::kUnknown;
    if (root->name == "system") return TopologyFormat::kNcclXml;
    if (root->name == "graphs") return TopologyFormat::kNcclGraphXml;
    if (root->name == "topology") return TopologyFormat::kHwlocXml;
    return TopologyFormat::kUnknown;
  }
  if (absl::StrContains(text, "GPU0") &&
      (absl::StrContains(text, "CPU Affinity") || absl::StrContains(text, "Legend"))) {
    return TopologyFormat::kNvidiaSmi;
  }
  return TopologyFormat::kUnknown;
}

absl::StatusOr<Graph> ImportTopology(absl::string_view content) {
  switch (DetectTopologyFormat(content)) {
    case TopologyFormat::kJson:
      return GraphFromJson(content);
    case TopologyFormat::kNcclXml:
      return ImportNcclTopologyXml(content);
    case TopologyFormat::kHwlocXml:
      return ImportHwlocXml(content);
    case TopologyFormat::kNvidiaSmi:
      return ImportNvidiaSmiTopo(content);
    case TopologyFormat::kNcclGraphXml:
      return absl::InvalidArgumentError(
          "an NCCL graph file lists search results (channels), not a machine topology");
    case TopologyFormat::kUnknown:
      break;
  }
  // Malformed XML deserves the parser's message rather than "unknown format".
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(content), "<")) {
    BATON_RETURN_IF_ERROR(ParseXml(content).status());
  }
  return absl::InvalidArgumentError(
      "not a topology: expected topology JSON, NCCL or hwloc XML, or nvidia-smi topo -m output");
}

absl::StatusOr<Graph> LoadTopologyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read topology file ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<Graph> graph = ImportTopology(buffer.str());
  if (!graph.ok()) return Annotate(graph.status(), path);
  return graph;
}

}  // namespace baton::topology
