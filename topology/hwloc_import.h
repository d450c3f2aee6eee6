#pragma once

// Converts an hwloc topology (a recorded `lstopo --of xml` file, or the running machine) into a
// Graph. hwloc itself parses the XML, so every file hwloc 2.x accepts (v1.x and v2.x formats)
// loads the same way live discovery sees a machine.
//
// Mapping:
// * One CPU node per NUMANode that has CPUs (memory-only NUMA nodes are skipped), with its cpuset,
//   local memory, enclosing Package and the Package's CPUVendor/CPUModel/family/model infos.
// * PCI devices: GPUs are class 0x03xx devices from NVIDIA (0x10de), AMD (0x1002) or Hygon
//   (0x1d94), or any class 0x03xx device with a CUDA/NVML/OpenCL/RSMI/LevelZero OS device (so BMC
//   VGA chips are not GPUs); NICs are class 0x02xx devices. Other devices are dropped.
// * PCI bridges are collapsed as NCCL does: only switch upstream ports (bridges at even depth >= 2
//   below the host bridge) become PCI switch nodes; root ports and downstream ports are skipped.
//   A device's upstream link uses its hwloc link speed (GB/s; 0 means unknown and becomes NCCL's
//   12 GB/s default); hwloc does not give lane width or generation, so those stay 0.
// * A PCI subtree hangs off the CPU node of the first NUMA node in its locality.
// * GPU index/model/UUID come from OS devices (nvmlN, cudaN or rsmiN; GPUModel, NVIDIAUUID).
//   NIC ports come from OpenFabrics OS devices (name, PortNState, NodeGUID) and network
//   interfaces (netdev names, paired with ports in order when the counts match).
// * NVLinks come from the "NVLinkBandwidth" distance matrix (MB/s): GPU-GPU, GPU-Package (POWER)
//   and GPU-NVSwitch links; all NVSwitch devices are merged into one NVSwitch node. The per-link
//   rate is inferred from the GPU model as hwloc assigns it (P100: 20 GB/s, B100/B200/GB200:
//   50 GB/s, others 25 GB/s) to give a link count; the bandwidth is the matrix value.
// Broadcom switches are flattened and CPUs connected as for NCCL XML.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"

struct hwloc_topology;  // hwloc's opaque topology (hwloc_topology_t)

namespace baton::topology {

// `topology` must be loaded with I/O objects kept (HWLOC_TYPE_FILTER_KEEP_ALL or _IMPORTANT).
// The result's `source` is left empty for the caller to set.
absl::StatusOr<Graph> GraphFromHwloc(hwloc_topology* topology);

// Parses `xml` with hwloc and converts it. InvalidArgument if hwloc rejects the document.
absl::StatusOr<Graph> ImportHwlocXml(absl::string_view xml);

// Loads the running machine's topology with hwloc (source "live"). Internal if hwloc fails.
absl::StatusOr<Graph> DiscoverWithHwloc();

}  // namespace baton::topology
