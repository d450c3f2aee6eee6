#pragma once

// What a hierarchical schedule is given: one operation on this daemon's share of a communicator.
// A schedule combines the local ranks' buffers in memory, runs one algorithm across the daemons
// (collective/ring_*.h, tree_*.h, ...) on one daemon's worth of data, and writes every local
// rank's result. It is the unit the registry (collective/registry.h) maps a (collective,
// algorithm) to, and what tests run as D daemons x L local ranks over the in-memory transport.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collective/algorithm.h"
#include "collective/layout.h"
#include "collective/op_context.h"
#include "collective/op_spec.h"
#include "common/status_macros.h"
#include "transport/transport.h"

namespace baton::collective {

// One local rank's part of an operation: its own call (all_to_all_v counts differ per rank; every
// other field agrees between ranks) and its buffers, sized as OpSpec::SendElements and
// RecvElements say. A buffer the operation does not use on this rank may be null; a reducing
// collective's part with a null send contributes no input (NodeParts: the node's is in the first).
//
// The regions are the buffers' registrations with the data plane (Endpoint::RegisterMemory),
// which the daemon made when it mapped them: the operation's sends and receives of those buffers
// name them (collective/registered_memory.h). Null where a buffer is not registered.
struct LocalPart {
  const OpSpec* spec = nullptr;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  const transport::MemoryRegion* send_region = nullptr;
  const transport::MemoryRegion* recv_region = nullptr;
};

// A node part: one call for all of a node's local ranks, made by local rank 0 once the node's
// local phase ran in the node arena (collective/node_arena.h, docs/node-arena.md). Its one
// buffer, input and output in place, holds NodePartElements elements:
//   all_reduce, reduce: the node's inputs reduced (summed for an average: the schedules divide
//     by the world); the result replaces them (for reduce only on the root's node);
//   broadcast: the root's data when the root is on this node; the result replaces it;
//   all_gather: the world's blocks, each local rank's own at its rank; the others are filled in;
//   reduce_scatter: the world's blocks, the node's inputs reduced; each local rank's result
//     replaces its own block;
//   barrier: none.
bool HasNodePart(Collective collective);
uint64_t NodePartElements(const OpSpec& spec, int world_size);
// The parts, by local index, that the schedules run for a node part in `buffer` (`spec` the
// node's call; both outlive the parts).
std::vector<LocalPart> NodeParts(const OpSpec& spec, std::byte* buffer, const Layout& layout);

struct Schedule {
  OpContext ctx;  // the operation's endpoint, tags, deadline, chunk, kernels
  const Layout* layout = nullptr;
  const OpSpec* spec = nullptr;            // the operation (parts[0]'s call)
  Algorithm algorithm = Algorithm::kRing;  // the algorithm across daemons
  std::span<const LocalPart> parts;        // by local index (layout->local_ranks())

  bool across() const { return layout->daemon_count() > 1; }
  // Sets `sources` to the local inputs `byte_offset` bytes in (the parts with a send).
  void InputsAt(size_t byte_offset, std::vector<const void*>& sources) const;
  size_t element_bytes() const { return DataTypeSize(spec->type); }

  // Operations whose daemon-side scratch would grow with their size run in slabs: pieces of
  // SlabLength(length, unit_bytes) units of their sliced dimension, each unit needing `unit_bytes`
  // of scratch, at most kSlabChunks chunks of scratch per slab. Every daemon computes the same
  // slabs (the chunk size is the communicator's).
  static constexpr size_t kSlabChunks = 8;
  static constexpr size_t kMaxSlabs = 65000;
  size_t SlabLength(size_t length, size_t unit_bytes) const;
  // Slab k's context: its own range of tag steps (OpContext::first_step).
  OpContext SlabContext(size_t slab) const;
  // The tag of part `part` of the schedule's own first step, for schedules that exchange one
  // message per rank or pair of ranks (gather, scatter, all_to_all_v).
  transport::Tag PartTag(size_t part) const {
    return transport::Tag{ctx.comm, ctx.seq, ctx.first_step, static_cast<uint32_t>(part)};
  }
};

// Whether `bytes` at `a` and `bytes` at `b` share no byte.
bool Apart(const void* a, const void* b, size_t bytes);

// Runs one schedule; the registry's entries have this type.
using ScheduleFn = absl::Status (*)(const Schedule& schedule);

}  // namespace baton::collective
