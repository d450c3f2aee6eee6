#pragma once

// What every collective algorithm is given: the operation's context (endpoint, tags, deadline,
// chunk size) and this participant's place among the others, either as a ring (the ring
// algorithms only talk to their two neighbours) or as the full list of participants (the tree and
// direct algorithms).
//
// A "participant" is whoever calls the algorithm: in batond, one daemon of the communicator. All
// participants of one operation call the same function with the same arguments, apart from their
// own rank and buffers, and the same ctx.comm and ctx.seq.
//
// Tags: an operation uses only tags {ctx.comm, ctx.seq, ctx.first_step + step, part} with the
// step and part numbers its header lists, so operations with different (comm, seq) never see each
// other's messages. Operations on one communicator must run one at a time per sequence number (a
// seq is never reused while an operation with it may still have messages in flight).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collective/op_stats.h"
#include "device/kernels.h"
#include "transport/transport.h"

namespace baton::collective {

class ScratchPool;

// This participant's place in a ring of endpoints.
struct Ring {
  int rank = 0;      // position in the ring, 0 <= rank < size
  int size = 1;      // number of participants
  std::string prev;  // endpoint address of position (rank - 1 + size) % size
  std::string next;  // endpoint address of position (rank + 1) % size
};

// Every participant's endpoint address, and which of them this one is.
struct Participants {
  int rank = 0;                        // this participant, 0 <= rank < addresses.size()
  std::vector<std::string> addresses;  // addresses[i] is participant i's endpoint address

  int size() const { return static_cast<int>(addresses.size()); }
};

// What every algorithm needs to run one operation.
struct OpContext {
  transport::Endpoint* endpoint = nullptr;  // not owned
  uint64_t comm = 0;                        // the communicator's tag
  uint64_t seq = 0;                         // the operation's sequence number
  // Added to every step number the algorithm puts in its tags, so that a caller can run several
  // algorithm calls within one operation (each with its own range of steps) without their
  // messages meeting. The algorithms number their steps from 0 and use fewer than 2^16.
  uint32_t first_step = 0;
  absl::Time deadline = absl::InfiniteFuture();
  size_t chunk_bytes = size_t{1} << 20;  // largest message the pipeline sends at once
  OpStats* stats = nullptr;              // if set, reduction time is added to stats->reduce
  // The element-wise kernels for the operation's buffers (device/kernels.h); never null.
  const device::Kernels* kernels = &device::HostKernels();
  // Where the algorithm takes its scratch from (TakeScratch, collective/registered_memory.h):
  // memory registered with the data plane once and reused; null: plain memory.
  ScratchPool* scratch = nullptr;
};

// The slot an algorithm's reduction time goes to: PhaseTimer timer(ReduceSlot(ctx)).
inline std::chrono::nanoseconds* ReduceSlot(const OpContext& ctx) {
  return ctx.stats == nullptr ? nullptr : &ctx.stats->reduce;
}

}  // namespace baton::collective
