#pragma once

// Lossless JSON form of a Graph: GraphFromJson(GraphToJson(g)) == g for every valid graph.
//
// {"format": "baton.topology.v1", "source": ..., "hostname": ..., "attributes": {...},
//  "nodes": [{"id": 0, "type": "cpu", "name": "NUMA0", "cpu": {...}}, ...],
//  "links": [{"a": 0, "b": 3, "type": "pci", "bandwidth_gbps": 24, "pcie_gts": 16, ...}, ...]}
// Each node carries only the info objects of its type ("cpu"; "pci"; "pci"+"gpu"; "pci"+"nic";
// "nvswitch"). Fields equal to their default are omitted; CPU sets are written as cpulists
// ("0-23,48-71"). Reading is strict: unknown keys, wrong kinds, out-of-range numbers and graphs
// that fail ValidateGraph are InvalidArgument.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/graph.h"

namespace baton::topology {

inline constexpr absl::string_view kGraphJsonFormat = "baton.topology.v1";

std::string GraphToJson(const Graph& graph);
absl::StatusOr<Graph> GraphFromJson(absl::string_view json);

}  // namespace baton::topology
