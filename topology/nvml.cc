#include "topology/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace baton::topology {

namespace {

// The subset of nvml.h we call, declared here so no NVIDIA header is needed to build. Layouts are
// NVML's stable ABI (nvmlPciInfo_t as used by the _v3 / _v2 entry points).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvmlNvLinkMaxLinks = 18;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
enum NvLinkDeviceType { kNvLinkGpu = 0, kNvLinkIbmNpu = 1, kNvLinkSwitch = 2 };

// dlopen handle, closed on scope exit.
class Library {
 public:
  explicit Library(const std::string& name)
      : handle_(dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  bool loaded() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn Symbol(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(handle_, name));
  }

 private:
  void* handle_;
};

struct NvmlApi {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*GetCount)(unsigned*);
  nvmlReturn_t (*GetHandleByIndex)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*GetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*);
  nvmlReturn_t (*GetName)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*GetUuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*GetCudaComputeCapability)(nvmlDevice_t, int*, int*);
  nvmlReturn_t (*GetNvLinkState)(nvmlDevice_t, unsigned, int*);
  nvmlReturn_t (*GetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
  nvmlReturn_t (*GetNvLinkRemoteDeviceType)(nvmlDevice_t, unsigned, int*);  // optional
};

bool LoadApi(const Library& lib, NvmlApi* api) {
  api->Init = lib.Symbol<decltype(api->Init)>("nvmlInit_v2");
  api->Shutdown = lib.Symbol<decltype(api->Shutdown)>("nvmlShutdown");
  api->ErrorString = lib.Symbol<decltype(api->ErrorString)>("nvmlErrorString");
  api->GetCount = lib.Symbol<decltype(api->GetCount)>("nvmlDeviceGetCount_v2");
  api->GetHandleByIndex =
      lib.Symbol<decltype(api->GetHandleByIndex)>("nvmlDeviceGetHandleByIndex_v2");
  api->GetPciInfo = lib.Symbol<decltype(api->GetPciInfo)>("nvmlDeviceGetPciInfo_v3");
  api->GetName = lib.Symbol<decltype(api->GetName)>("nvmlDeviceGetName");
  api->GetUuid = lib.Symbol<decltype(api->GetUuid)>("nvmlDeviceGetUUID");
  api->GetMemoryInfo = lib.Symbol<decltype(api->GetMemoryInfo)>("nvmlDeviceGetMemoryInfo");
  api->GetCudaComputeCapability =
      lib.Symbol<decltype(api->GetCudaComputeCapability)>("nvmlDeviceGetCudaComputeCapability");
  api->GetNvLinkState = lib.Symbol<decltype(api->GetNvLinkState)>("nvmlDeviceGetNvLinkState");
  api->GetNvLinkRemotePciInfo =
      lib.Symbol<decltype(api->GetNvLinkRemotePciInfo)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  api->GetNvLinkRemoteDeviceType =
      lib.Symbol<decltype(api->GetNvLinkRemoteDeviceType)>("nvmlDeviceGetNvLinkRemoteDeviceType");
  return api->Init && api->Shutdown && api->ErrorString && api->GetCount && api->GetHandleByIndex &&
         api->GetPciInfo;
}

// NVML prints an 8-digit domain ("00000000:1D:00.0"); sysfs and our graph use 4.
std::string CanonicalBusId(const char* text) {
  absl::StatusOr<std::string> id = NormalizeBusId(text);
  return id.ok() ? *id : "";
}

std::vector<ProbedNvLink> ProbeNvLinks(const NvmlApi& api, nvmlDevice_t device) {
  std::map<std::pair<int, std::string>, int> links;  // (remote kind, bus id) -> count
  if (api.GetNvLinkState == nullptr || api.GetNvLinkRemotePciInfo == nullptr) return {};
  for (unsigned link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
    int active = 0;
    // Links past the GPU's last one return an error; so do inactive ones on some drivers.
    if (api.GetNvLinkState(device, link, &active) != kNvmlSuccess || active == 0) continue;
    nvmlPciInfo_t remote{};
    if (api.GetNvLinkRemotePciInfo(device, link, &remote) != kNvmlSuccess) continue;
    int kind = -1;
    if (api.GetNvLinkRemoteDeviceType != nullptr &&
        api.GetNvLinkRemoteDeviceType(device, link, &kind) != kNvmlSuccess) {
      kind = -1;
    }
    ++links[{kind, CanonicalBusId(remote.busId)}];
  }
  std::vector<ProbedNvLink> out;
  for (const auto& [key, count] : links) {
    ProbedNvLink l;
    l.remote = key.first == kNvLinkGpu      ? ProbedNvLink::Remote::kGpu
               : key.first == kNvLinkSwitch ? ProbedNvLink::Remote::kSwitch
               : key.first == kNvLinkIbmNpu ? ProbedNvLink::Remote::kCpu
                                            : ProbedNvLink::Remote::kUnknown;
    l.remote_bus_id = key.second;
    l.links = count;
    out.push_back(std::move(l));
  }
  return out;
}

class NvmlGpuProbe final : public GpuProbe {
 public:
  explicit NvmlGpuProbe(std::string library) : library_(std::move(library)) {}

  GpuProbeResult Probe() override {
    GpuProbeResult result;
    Library lib(library_);
    if (!lib.loaded()) {
      result.note = absl::StrCat(library_, " not found: no NVIDIA driver, no GPUs");
      return result;
    }
    NvmlApi api{};
    if (!LoadApi(lib, &api)) {
      result.note = absl::StrCat(library_, " lacks the NVML entry points we need");
      return result;
    }
    if (const nvmlReturn_t rc = api.Init(); rc != kNvmlSuccess) {
      result.note = absl::StrCat("nvmlInit failed: ", api.ErrorString(rc));
      return result;
    }
    unsigned count = 0;
    if (const nvmlReturn_t rc = api.GetCount(&count); rc != kNvmlSuccess) {
      result.note = absl::StrCat("nvmlDeviceGetCount failed: ", api.ErrorString(rc));
      count = 0;
    }
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t device = nullptr;
      nvmlPciInfo_t pci{};
      if (api.GetHandleByIndex(i, &device) != kNvmlSuccess ||
          api.GetPciInfo(device, &pci) != kNvmlSuccess) {
        absl::StrAppend(&result.note, result.note.empty() ? "" : "; ", "GPU ", i,
                        " could not be queried");
        continue;
      }
      ProbedGpu gpu;
      gpu.index = static_cast<int>(i);
      gpu.bus_id = CanonicalBusId(pci.busId);
      char text[96] = {};
      if (api.GetName != nullptr && api.GetName(device, text, sizeof(text)) == kNvmlSuccess) {
        gpu.model = text;
      }
      char uuid[96] = {};
      if (api.GetUuid != nullptr && api.GetUuid(device, uuid, sizeof(uuid)) == kNvmlSuccess) {
        gpu.uuid = uuid;
      }
      nvmlMemory_t memory{};
      if (api.GetMemoryInfo != nullptr && api.GetMemoryInfo(device, &memory) == kNvmlSuccess) {
        gpu.memory_bytes = memory.total;
      }
      int major = 0, minor = 0;
      if (api.GetCudaComputeCapability != nullptr &&
          api.GetCudaComputeCapability(device, &major, &minor) == kNvmlSuccess) {
        gpu.compute_capability = major * 10 + minor;
      }
      gpu.nvlinks = ProbeNvLinks(api, device);
      result.gpus.push_back(std::move(gpu));
    }
    api.Shutdown();
    return result;
  }

 private:
  std::string library_;
};

void AddNvLink(Graph& graph, int gpu, int peer, int count, bool take_max) {
  for (Link& l : graph.links) {
    if (l.type == LinkType::kNvLink &&
        ((l.a == gpu && l.b == peer) || (l.a == peer && l.b == gpu))) {
      l.nvlink_count = take_max ? std::max(l.nvlink_count, count) : l.nvlink_count + count;
      l.bandwidth_gbps = l.nvlink_count * l.nvlink_per_link_gbps;
      return;
    }
  }
  Link link;
  link.a = gpu;
  link.b = peer;
  link.type = LinkType::kNvLink;
  link.nvlink_count = count;
  link.nvlink_per_link_gbps = NvLinkBandwidthPerLink(graph.nodes[gpu].gpu.compute_capability);
  link.bandwidth_gbps = count * link.nvlink_per_link_gbps;
  graph.AddLink(link);
}

}  // namespace

std::unique_ptr<GpuProbe> NewNvmlGpuProbe(std::string library) {
  return std::make_unique<NvmlGpuProbe>(std::move(library));
}

absl::Status MergeProbedGpus(const std::vector<ProbedGpu>& gpus, Graph& graph) {
  std::vector<int> node_of;
  for (const ProbedGpu& probed : gpus) {
    int id = probed.bus_id.empty() ? -1 : graph.FindByBusId(probed.bus_id);
    if (id >= 0 && graph.nodes[id].type != NodeType::kGpu) {
      return absl::FailedPreconditionError(
          absl::StrCat("NVML GPU ", probed.bus_id, " is a non-GPU node in the graph"));
    }
    if (id < 0) {
      int cpu = -1;  // the CPU of the GPU's NUMA node, else the first CPU
      for (const Node& node : graph.nodes) {
        if (node.type != NodeType::kCpu) continue;
        if (cpu < 0) cpu = node.id;
        if (node.cpu.numa_id == probed.numa_node) {
          cpu = node.id;
          break;
        }
      }
      if (cpu < 0) return absl::FailedPreconditionError("no CPU node to attach an NVML GPU to");
      Node node;
      node.type = NodeType::kGpu;
      node.pci.bus_id = probed.bus_id;
      node.pci.class_code = 0x030200;
      node.pci.vendor = 0x10de;
      id = graph.AddNode(std::move(node));
      Link link;
      link.a = cpu;
      link.b = id;
      link.type = LinkType::kPci;
      link.bandwidth_gbps = kDefaultPciBandwidth;
      graph.AddLink(link);
    }
    GpuInfo& info = graph.nodes[id].gpu;
    info.index = probed.index;
    if (!probed.uuid.empty()) info.uuid = probed.uuid;
    if (!probed.model.empty()) info.model = probed.model;
    if (probed.compute_capability > 0) info.compute_capability = probed.compute_capability;
    if (probed.memory_bytes > 0) info.memory_bytes = probed.memory_bytes;
    node_of.push_back(id);
  }
  std::erase_if(graph.links, [&](const Link& l) {
    return l.type == LinkType::kNvLink &&
           (std::find(node_of.begin(), node_of.end(), l.a) != node_of.end() ||
            std::find(node_of.begin(), node_of.end(), l.b) != node_of.end());
  });
  int nvswitch = -1;
  for (const Node& node : graph.nodes) {
    if (node.type == NodeType::kNvSwitch) nvswitch = node.id;
  }
  for (size_t g = 0; g < gpus.size(); ++g) {
    const int gpu = node_of[g];
    for (const ProbedNvLink& link : gpus[g].nvlinks) {
      const int remote = link.remote_bus_id.empty() ? -1 : graph.FindByBusId(link.remote_bus_id);
      const bool remote_is_gpu = remote >= 0 && graph.nodes[remote].type == NodeType::kGpu;
      if (link.remote == ProbedNvLink::Remote::kCpu) {
        const int cpu = graph.CpuOf(gpu);
        if (cpu >= 0) AddNvLink(graph, gpu, cpu, link.links, /*take_max=*/false);
      } else if (remote_is_gpu && link.remote != ProbedNvLink::Remote::kSwitch) {
        if (remote != gpu) AddNvLink(graph, gpu, remote, link.links, /*take_max=*/true);
      } else {
        if (nvswitch < 0) {
          Node node;
          node.type = NodeType::kNvSwitch;
          nvswitch = graph.AddNode(std::move(node));
        }
        std::vector<std::string>& ids = graph.nodes[nvswitch].nvswitch.bus_ids;
        if (!link.remote_bus_id.empty() &&
            std::find(ids.begin(), ids.end(), link.remote_bus_id) == ids.end()) {
          ids.push_back(link.remote_bus_id);
          std::sort(ids.begin(), ids.end());
        }
        AddNvLink(graph, gpu, nvswitch, link.links, /*take_max=*/false);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::topology
