#include "collective/segments.h"

#include <algorithm>

namespace baton::collective {

ElementRange SegmentOf(size_t count, int parts, int index) {
  const size_t n = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>((index % parts + parts) % parts);
  const size_t base = count / n;
  const size_t extra = count % n;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

size_t ChunkElements(size_t chunk_bytes, DataType type) {
  const size_t element_size = DataTypeSize(type);
  if (element_size == 0) return 0;
  return std::max<size_t>(1, chunk_bytes / element_size);
}

size_t ChainChunkElements(size_t chunk_bytes, size_t count, DataType type) {
  const size_t element_size = DataTypeSize(type);
  if (element_size == 0) return 0;
  const size_t per_chunk = count / kChainChunks;
  const size_t wanted =
      per_chunk > chunk_bytes / element_size ? chunk_bytes : per_chunk * element_size;
  const size_t smallest = std::min(kMinChainChunkBytes, chunk_bytes);
  return ChunkElements(std::clamp(wanted, smallest, chunk_bytes), type);
}

size_t ChunkCount(size_t length, size_t chunk_elements) {
  return length / chunk_elements + (length % chunk_elements != 0 ? 1 : 0);
}

ElementRange ChunkOf(const ElementRange& range, size_t chunk_elements, size_t part) {
  const size_t offset = part * chunk_elements;
  return {range.begin + offset, std::min(chunk_elements, range.length - offset)};
}

}  // namespace baton::collective
