#pragma once

// Importers for NCCL's XML formats.
//
// Topology XML (`NCCL_TOPO_FILE` / `NCCL_TOPO_DUMP_FILE`, `<system version="1">`; RCCL writes the
// same schema with version 2):
//   <cpu numaid affinity arch vendor familyid modelid> -> CPU node
//   <pci busid class vendor device subsystem_* link_speed link_width>
//        with <gpu dev sm rank gdr> child, or class 0x03xxxx      -> GPU
//        with <nic> child, or class 0x02xxxx                      -> NIC
//        with <pci> children, or class 0x060400                   -> PCI switch
//   <nic><net name dev speed port guid latency maxconn gdr coll/>  -> NIC ports
//   <nvlink target count tclass>: tclass 0x03xxxx -> GPU-GPU NVLink; 0x068001 -> NVLink to the
//        GPU's CPU; anything else -> NVSwitch (all merged into one NVSwitch node, as NCCL does)
//   <c2c bw count> -> C2C link to the GPU's CPU;  <pcilink target> -> local link between switches
// A `<nic>` directly under `<cpu>` becomes a NIC without a bus id attached to that CPU.
// Unlike NCCL, a PCI endpoint of GPU/NIC class without `<gpu>`/`<nic>` child (the "skeleton"
// files cloud providers publish) still becomes a GPU/NIC node, with only what the file says: no
// index, architecture, ports or NVLinks are invented. Other leaf PCI devices are dropped.
// Broadcom PEX switches are flattened and CPUs connected as NCCL does. Unknown elements and
// attributes are ignored (NCCL ignores them too) except that unknown `<cpu>`/`<gpu>` attributes
// are kept in Node::attributes. Returns InvalidArgument for malformed XML, a missing or bad
// required attribute (pci busid/class, net name), duplicate bus ids, or an `<nvlink>` to a GPU bus
// id that is not in the file.

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"
#include "topology/paths.h"

namespace baton::topology {

absl::StatusOr<Graph> ImportNcclTopologyXml(absl::string_view xml);

// NCCL graph XML (`NCCL_GRAPH_FILE` / `NCCL_GRAPH_DUMP_FILE`): the channels NCCL's search chose.
// It names GPUs by `dev` only and does not describe a machine.
struct NcclChannel {
  std::vector<int> gpu_devs;  // in channel order
  std::vector<int> net_devs;  // <net dev> entries (entry and exit NICs), in order
};
struct NcclSearchGraph {
  int id = -1;       // 0 ring, 1 tree, 2 collnet chain, 3 NVLS, 4 collnet direct
  int pattern = -1;  // 1 balanced tree, 2 split tree, 3 tree, 4 ring, 5 NVLS, 6 collnet direct
  int cross_nic = 0;
  int declared_channels = 0;  // the nchannels attribute
  double speed_intra = 0;
  double speed_inter = 0;
  double latency_inter = 0;
  PathType type_intra = PathType::kDis;
  PathType type_inter = PathType::kDis;
  bool same_channels = false;
  std::vector<NcclChannel> channels;
};
absl::StatusOr<std::vector<NcclSearchGraph>> ImportNcclGraphXml(absl::string_view xml);

}  // namespace baton::topology
