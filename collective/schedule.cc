#include "collective/schedule.h"

#include <algorithm>
#include <cstdint>

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

bool Apart(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x + bytes <= y || y + bytes <= x;
}

}  // namespace baton::collective
