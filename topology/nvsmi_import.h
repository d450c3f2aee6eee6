#pragma once

// Imports the matrix printed by `nvidia-smi topo -m` (old and new layouts: device columns, then
// "CPU Affinity" and optionally "NUMA Affinity" / "GPU NUMA ID", then the legend and an optional
// "NIC Legend" naming NICn columns).
//
// The matrix gives relations, not a PCIe tree, so the importer rebuilds the smallest tree that
// reproduces them and then checks it: every non-NVLink cell must equal the PCI path type of the
// rebuilt graph (NODE counts as PHB and SOC as SYS, like NCCL), else InvalidArgument.
// * CPU domains: endpoints joined by any relation other than SYS share a CPU node; GPUs with a
//   "NUMA Affinity" column take that NUMA id (a NIC inherits the id of its domain's GPUs);
//   otherwise NUMA ids stay unknown (-1). CPU sets come from the "CPU Affinity" column when all
//   GPUs of a domain agree, and are always kept per GPU in GpuInfo::cpu_affinity.
// * PIX groups (endpoints pairwise PIX) hang under one switch; PIX groups related by PXB under a
//   common parent switch; an endpoint with no PIX/PXB partner hangs directly off its CPU.
// * NV# cells become NVLinks of # links. If a GPU's NVLink counts add up to more than 18 (the most
//   links a GPU has), the GPUs are attached to one NVSwitch instead, with the largest count of
//   each GPU's row. The compute capability is unknown, so NCCL's default per-link rate applies.
// PCI links carry NCCL's default bandwidth (the matrix has no speeds).

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"

namespace baton::topology {

absl::StatusOr<Graph> ImportNvidiaSmiTopo(absl::string_view text);

}  // namespace baton::topology
