#pragma once

// How collectives cut a buffer: into one segment per participant (the ring algorithms, and the
// elements each participant owns after a reduce-scatter or contributes to an all-gather), and
// each segment or block into chunks of at most OpContext::chunk_bytes (one transport message
// each). The daemon uses these to compute which elements a participant owns and the tests to
// predict every algorithm's traffic. All functions are pure.

#include <cstddef>

#include "collective/data_type.h"

namespace baton::collective {

// A contiguous run of elements.
struct ElementRange {
  size_t begin = 0;   // index of the first element
  size_t length = 0;  // number of elements

  friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

// Segment `index` of `count` elements split into `parts` (> 0) as evenly as possible: the first
// count % parts segments get one element more than the others, and the segments follow each other
// in index order. `index` is taken modulo `parts` (negative values too), which is how the ring
// schedules name the segment "r - s".
ElementRange SegmentOf(size_t count, int parts, int index);

// The number of elements one message carries: chunk_bytes / element size, rounded down, at least
// one element. 0 for an unknown type.
size_t ChunkElements(size_t chunk_bytes, DataType type);

// The number of messages that carry `length` elements at `chunk_elements` (> 0) per message:
// length / chunk_elements rounded up (0 for an empty range), without overflowing.
size_t ChunkCount(size_t length, size_t chunk_elements);

// A chain (ring broadcast and reduce) forwards a chunk only once it has all of it, so a buffer of
// a few chunks crosses the chain nearly one hop at a time, the links taking turns: 1 MiB in one
// 1 MiB chunk over 4 daemons at 1 Gbit/s took 21 ms, against 8.4 ms for the bytes themselves.
// A chain cuts its buffer into kChainChunks chunks, each at least kMinChainChunkBytes (a message
// the waiting thread reads itself) and at most chunk_bytes.
inline constexpr size_t kChainChunks = 16;
inline constexpr size_t kMinChainChunkBytes = size_t{64} << 10;

// The elements one message of a chain over `count` elements carries: count / kChainChunks,
// within [min(kMinChainChunkBytes, chunk_bytes), chunk_bytes] in bytes, as ChunkElements rounds.
size_t ChainChunkElements(size_t chunk_bytes, size_t count, DataType type);

// Chunk `part` of `range` at `chunk_elements` per chunk; the last one may be shorter.
ElementRange ChunkOf(const ElementRange& range, size_t chunk_elements, size_t part);

}  // namespace baton::collective
