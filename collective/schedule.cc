#include "collective/schedule.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace baton::collective {

size_t Schedule::SlabLength(size_t length, size_t unit_bytes) const {
  const size_t budget = kSlabChunks * ctx.chunk_bytes;
  const size_t slab = std::max<size_t>(1, budget / std::max<size_t>(unit_bytes, 1));
  // Beyond kMaxSlabs slabs they grow instead, so that slab numbers fit in the tags' steps.
  return std::max(slab, (length + kMaxSlabs - 1) / kMaxSlabs);
}

OpContext Schedule::SlabContext(size_t slab) const {
  OpContext slab_ctx = ctx;
  slab_ctx.first_step = ctx.first_step + (static_cast<uint32_t>(slab) << 16);
  return slab_ctx;
}

void Schedule::InputsAt(size_t byte_offset, std::vector<const void*>& sources) const {
  sources.clear();
  for (const LocalPart& part : parts) {
    if (part.send != nullptr) sources.push_back(part.send + byte_offset);
  }
}

bool HasNodePart(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kBarrier:
      return true;
    default:
      return false;
  }
}

uint64_t NodePartElements(const OpSpec& spec, int world_size) {
  switch (spec.collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
      return spec.count;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return spec.count * static_cast<uint64_t>(world_size);
    default:
      return 0;
  }
}

std::vector<LocalPart> NodeParts(const OpSpec& spec, std::byte* buffer, const Layout& layout) {
  const std::vector<int>& local = layout.local_ranks();
  const size_t block = spec.count * DataTypeSize(spec.type);
  std::vector<LocalPart> parts(local.size(), LocalPart{&spec, nullptr, buffer});
  for (size_t i = 0; i < parts.size(); ++i) {
    std::byte* own = buffer == nullptr ? nullptr : buffer + static_cast<size_t>(local[i]) * block;
    switch (spec.collective) {
      case Collective::kBroadcast:
        parts[i].send = buffer;  // the root's data, whichever local rank it is
        break;
      case Collective::kAllGather:
        parts[i].send = own;
        break;
      case Collective::kReduceScatter:
        parts[i].recv = own;
        [[fallthrough]];
      case Collective::kAllReduce:
      case Collective::kReduce:
        if (i == 0) parts[i].send = buffer;
        break;
      default:
        parts[i].recv = nullptr;
        break;
    }
  }
  return parts;
}

bool Apart(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x + bytes <= y || y + bytes <= x;
}

}  // namespace baton::collective
