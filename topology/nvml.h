#pragma once

// GPU discovery through NVML, loaded with dlopen at run time: Baton has no link-time dependency on
// the NVIDIA driver, and a machine without it simply has no GPUs.
//
// GpuProbe is the seam: discovery asks a probe for GPUs; tests hand it a fake.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "topology/graph.h"

namespace baton::topology {

struct ProbedNvLink {
  enum class Remote { kGpu, kSwitch, kCpu, kUnknown };
  Remote remote = Remote::kUnknown;
  std::string remote_bus_id;  // canonical, or "" when NVML reports a placeholder
  int links = 0;              // active links to this remote
};

struct ProbedGpu {
  int index = -1;
  std::string bus_id;  // canonical
  std::string uuid;
  std::string model;
  int compute_capability = 0;  // major*10 + minor
  uint64_t memory_bytes = 0;
  int numa_node = -1;  // filled by discovery from sysfs; used when the GPU is not in the PCI tree
  std::vector<ProbedNvLink> nvlinks;  // one entry per distinct remote
};

struct GpuProbeResult {
  std::vector<ProbedGpu> gpus;
  // Why there are no (or fewer) GPUs: "libnvidia-ml.so.1 not found", "nvmlInit failed: ...".
  // Empty when every GPU was read.
  std::string note;
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // Never fails: problems are reported in `note`. May be called from any one thread at a time.
  virtual GpuProbeResult Probe() = 0;
};

// A probe backed by NVML from `library` (dlopen'ed on each Probe and closed afterwards).
std::unique_ptr<GpuProbe> NewNvmlGpuProbe(std::string library = "libnvidia-ml.so.1");

// Folds probed GPUs into `graph`: GPUs found by bus id get NVML's facts; others are added under the
// CPU of their NUMA node (or the first CPU). Existing NVLinks of probed GPUs are replaced by the
// probed ones: GPU remotes give GPU-GPU links (the larger count of the two directions), switch
// or unknown remotes one merged NVSwitch node, CPU remotes (POWER NPUs) a GPU-CPU link; per-link
// bandwidth follows NCCL's table for the GPU's compute capability. FailedPrecondition if the graph
// has no CPU to attach a GPU to.
absl::Status MergeProbedGpus(const std::vector<ProbedGpu>& gpus, Graph& graph);

}  // namespace baton::topology
