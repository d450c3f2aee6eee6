#pragma once

// The typed topology graph of one node (machine): CPUs (one vertex per NUMA domain), PCIe switches,
// GPUs, NICs and NVSwitches, joined by links that carry a type and a bandwidth. Importers
// (nccl_xml.h, hwloc_import.h, nvsmi_import.h), live discovery (discovery.h) and the JSON dump
// (graph_json.h) all produce or consume this one structure; paths.h derives NCCL-style path types
// from it and planner.h plans rings and trees over it.
//
// Conventions (checked by ValidateGraph):
// * nodes[i].id == i. Node names are unique display labels ("NUMA0", "GPU3", "mlx5_0").
// * Only the info struct matching the node's type may differ from its default: CPUs use `cpu`;
//   PCI switches use `pci`; GPUs use `pci` and `gpu`; NICs use `pci` and `nic`; NVSwitches use
//   `nvswitch`. `attributes` holds source attributes that have no typed field (kept for lossless
//   dumps), sorted by key.
// * The PCIe hierarchy is a forest rooted at CPUs: every PCI link goes from its upstream end `a`
//   (a CPU or a PCI switch) to its downstream end `b` (a switch, GPU or NIC), and each node has at
//   most one upstream link. A PCI switch stands for a whole physical switch (its upstream port),
//   as in NCCL: its downstream ports are not vertices.
// * All NVSwitches a GPU reaches are merged into one NVSwitch vertex (as NCCL does), whose
//   `bus_ids` lists the switch devices that were merged. Links are undirected for paths.
// * Bandwidths are GB/s, unidirectional, finite and >= 0. Values follow NCCL's model
//   (topo.h, v2.27): PCIe `width * gen_rate / 80` with NCCL's per-lane rates, NVLink
//   `count * per-link rate` chosen by compute capability, inter-CPU by CPU generation. When a
//   source states a bandwidth itself (hwloc link speeds, hwloc NVLink matrices) that value is kept.
// * "Unknown" is -1 for ids and indices, 0 for counts, speeds and sizes, "" for strings.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::topology {

enum class NodeType { kCpu, kPciSwitch, kGpu, kNic, kNvSwitch };
enum class LinkType {
  kLocal,     // a virtual, effectively free connection (NCCL LINK_LOC, e.g. Broadcom P2P links)
  kNvLink,    // GPU-GPU, GPU-NVSwitch or GPU-CPU (POWER) NVLink
  kC2c,       // Grace chip-to-chip link between a GPU and its CPU
  kPci,       // PCIe, upstream `a` to downstream `b`
  kInterCpu,  // SMP interconnect between two NUMA domains (QPI/UPI/xGMI)
};

absl::string_view NodeTypeName(NodeType type);  // "cpu", "pci_switch", "gpu", "nic", "nvswitch"
absl::string_view LinkTypeName(LinkType type);  // "local", "nvlink", "c2c", "pci", "inter_cpu"
absl::StatusOr<NodeType> ParseNodeType(absl::string_view name);
absl::StatusOr<LinkType> ParseLinkType(absl::string_view name);

struct CpuInfo {
  int numa_id = -1;       // Linux NUMA node id
  int package = -1;       // socket (hwloc Package os_index)
  std::vector<int> cpus;  // logical CPUs of this domain, ascending
  std::string arch;       // "x86_64", "ppc64", "arm64"
  std::string vendor;     // CPUID vendor: "GenuineIntel", "AuthenticAMD", ...
  int family = -1;        // CPUID family / model numbers
  int model = -1;
  std::string model_name;     // e.g. "AMD EPYC 7402 24-Core Processor"
  uint64_t memory_bytes = 0;  // local memory of the NUMA domain
  bool operator==(const CpuInfo&) const = default;
};

struct PciInfo {
  std::string bus_id;   // canonical "dddd:bb:dd.f" (lower-case hex), see NormalizeBusId
  int class_code = -1;  // 24-bit class/subclass/prog-if, e.g. 0x030200
  int vendor = -1;      // 16-bit ids
  int device = -1;
  int subsystem_vendor = -1;
  int subsystem_device = -1;
  bool operator==(const PciInfo&) const = default;
};

struct GpuInfo {
  int index = -1;  // NVML / CUDA device index ("dev" in NCCL XML)
  int rank = -1;   // communicator rank recorded in an NCCL dump
  std::string uuid;
  std::string model;           // "NVIDIA H100 80GB HBM3"
  int compute_capability = 0;  // major*10 + minor, NCCL's "sm" (90 for Hopper)
  uint64_t memory_bytes = 0;
  bool gdr = false;               // GPUDirect RDMA capable
  std::vector<int> cpu_affinity;  // CPUs the source says are local (nvidia-smi), ascending
  bool operator==(const GpuInfo&) const = default;
};

struct NicPort {
  std::string name;        // NCCL net name / IB device ("mlx5_0") / interface ("eth0")
  int port = 0;            // physical port number (1-based for IB); 0 when not applicable
  int dev = -1;            // NCCL net plugin index
  int64_t speed_mbps = 0;  // link rate
  std::string state;       // "ACTIVE"/"DOWN"/... for IB ports, operstate ("up") for netdevs
  std::string netdev;      // Linux interface of this port, when known
  std::string link_layer;  // "InfiniBand" / "Ethernet"
  uint64_t guid = 0;       // node GUID; ports of one ASIC share it
  bool gdr = false;
  bool coll = false;  // CollNet capable
  double latency_us = 0;
  int max_connections = 0;
  bool operator==(const NicPort&) const = default;
};

struct NicInfo {
  std::vector<NicPort> ports;
  int sysfs_numa_node = -1;  // numa_node as sysfs reports it (live discovery only)
  bool operator==(const NicInfo&) const = default;
};

struct NvSwitchInfo {
  std::vector<std::string> bus_ids;  // merged switch devices, canonical and sorted
  bool operator==(const NvSwitchInfo&) const = default;
};

struct Node {
  int id = -1;
  NodeType type = NodeType::kCpu;
  std::string name;
  CpuInfo cpu;
  PciInfo pci;
  GpuInfo gpu;
  NicInfo nic;
  NvSwitchInfo nvswitch;
  std::vector<std::pair<std::string, std::string>> attributes;
  bool operator==(const Node&) const = default;
};

struct Link {
  int a = -1;
  int b = -1;
  LinkType type = LinkType::kPci;
  double bandwidth_gbps = 0;
  int nvlink_count = 0;             // kNvLink: number of bonded links (0 when only bw is known)
  double nvlink_per_link_gbps = 0;  // kNvLink: rate of one link
  double pcie_gts = 0;              // kPci: per-lane rate in GT/s (2.5, 5, 8, 16, 32, 64)
  int pcie_width = 0;               // kPci: lanes
  bool operator==(const Link&) const = default;
};

struct Graph {
  std::string source;    // "nccl-xml", "hwloc-xml", "nvidia-smi", "live", "json", ...
  std::string hostname;  // when the source names the machine
  std::vector<std::pair<std::string, std::string>> attributes;  // machine-level, sorted by key
  std::vector<Node> nodes;
  std::vector<Link> links;
  bool operator==(const Graph&) const = default;

  // Appends `node`, assigning its id; returns the id.
  int AddNode(Node node);
  void AddLink(Link link) { links.push_back(link); }

  std::vector<int> NodesOfType(NodeType type) const;  // ids, ascending
  // The upstream end of `node`'s PCI link, or -1.
  int PciParent(int node) const;
  // The CPU above `node` in the PCIe forest (the node itself for CPUs), or -1 (NVSwitches,
  // detached devices).
  int CpuOf(int node) const;
  // NUMA id of CpuOf(node), or -1.
  int NumaOf(int node) const;
  // Node with this bus id (any spelling NormalizeBusId accepts) or name, or -1.
  int FindByBusId(absl::string_view bus_id) const;
  int FindByName(absl::string_view name) const;
  // Value of a node attribute, or nullptr.
  static const std::string* FindAttribute(const Node& node, absl::string_view key);
};

// Checks the conventions listed at the top of this file; InvalidArgument naming the first
// violation.
absl::Status ValidateGraph(const Graph& graph);

// --- Bus ids and CPU sets -----------------------------------------------------------------------

// Accepts "dddd:bb:dd.f" with a 1-8 digit domain (nvidia-smi prints 8), any case, or "bb:dd.f"
// (domain 0). Returns "dddd:bb:dd.f" in lower case (the domain keeps more than 4 digits only when
// it needs them). InvalidArgument otherwise.
absl::StatusOr<std::string> NormalizeBusId(absl::string_view bus_id);

// "0-19,40-59" (Linux cpulist). Empty text is the empty set.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);
std::string FormatCpuList(const std::vector<int>& cpus);
// Comma-separated 32-bit hex words, most significant first, as sysfs `cpumap` and NCCL's
// `affinity` write them ("000000ff,ffff0000,00ffffff"); words may carry "0x" and may be empty
// (hwloc's bitmap format).
absl::StatusOr<std::vector<int>> ParseCpuMask(absl::string_view text);

// --- NCCL's bandwidth model (src/graph/topo.h, v2.27) -------------------------------------------

inline constexpr double kLocalBandwidth = 5000;     // LOC_BW
inline constexpr double kDefaultPciBandwidth = 12;  // PCI_BW: Gen3 x16, NCCL's fallback

// Per-link NVLink rate for a compute capability (NCCL ncclTopoNVLinkBw; unknown -> SM80's 20).
double NvLinkBandwidthPerLink(int compute_capability);
// PCIe link: NCCL's width * per-lane(100 Mb/s units) / 80. `gts` 0 -> Gen3 rate; width 0 -> 16.
double PcieBandwidth(double gts, int width);
// The "16.0 GT/s PCIe" / "8 GT/s" strings of sysfs and NCCL XML; 0 when not recognised.
double ParsePcieGts(absl::string_view link_speed);
// Inter-socket bandwidth for CPUs like `cpu` (NCCL ncclTopoGetInterCpuBw, v2.27 values).
double InterCpuBandwidth(const CpuInfo& cpu);

// --- Graph transforms shared by the importers ---------------------------------------------------

// Connects every pair of CPUs with a kInterCpu link (replacing existing ones).
void ConnectCpus(Graph& graph);
// NCCL's ncclTopoFlattenBcmSwitches: a Broadcom PEX Gen4/Gen5 switch exposes two levels but runs
// at full bandwidth across ports, so child switches with the same id are merged into the parent.
void FlattenBroadcomSwitches(Graph& graph);
// Removes PCI switches below which there is no GPU or NIC, then renumbers nodes.
void PruneEmptySwitches(Graph& graph);
// Removes nodes for which `remove[id]` is true together with their links; renumbers the rest.
void RemoveNodes(Graph& graph, const std::vector<bool>& remove);
// Gives every node without a name a unique default one: GPUs "GPU<index>" (GPUs without an index
// take the lowest unused numbers in PCI bus order), NICs their first port's name (or netdev, or
// "NIC<n>"), CPUs "NUMA<numa_id>" (or "CPU<n>"), switches "PCI <bus id>", NVSwitches "NVSwitch".
// Clashes get a "#<n>" suffix.
void AssignDefaultNames(Graph& graph);
// Sorts a node's or graph's attributes by key (the canonical order ValidateGraph expects).
void SortAttributes(std::vector<std::pair<std::string, std::string>>& attributes);

}  // namespace baton::topology
