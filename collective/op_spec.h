#pragma once

// One operation as every layer describes it: what a rank asked for (collective, counts, type,
// operator, root or peer, algorithm, where its buffers live), with one Validate and the codec of
// the signature the daemons compare. The client API, the gRPC request and the submission channel
// decode into it; the daemon, the schedules and the tuner read it.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "transport/memory.h"

namespace baton::collective {

struct OpSpec {
  Collective collective = Collective::kAllReduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // the reducing collectives only
  // Elements, as the client API counts them: all_reduce, broadcast, reduce: the buffer;
  // reduce_scatter: the block each rank receives; all_gather, gather: the block each rank sends;
  // scatter: the block each rank receives; all_to_all: the block between two ranks; send, recv:
  // the message; 0 for barrier and all_to_all_v.
  uint64_t count = 0;
  // all_to_all_v: elements this rank sends to rank j (send_counts[j], at send_displs[j] of its
  // send buffer) and receives from rank i (recv_counts[i], at recv_displs[i]); world_size each.
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> send_displs;
  std::vector<uint64_t> recv_counts;
  std::vector<uint64_t> recv_displs;
  int root = 0;                        // broadcast, reduce, gather, scatter
  int peer = 0;                        // send: the receiving rank; recv: the sending rank
  std::optional<Algorithm> algorithm;  // the caller's choice, if any
  transport::MemoryKind send_memory = transport::MemoryKind::kHost;
  transport::MemoryKind recv_memory = transport::MemoryKind::kHost;
  // The node arena's step between nodes: local rank 0 submits it for every rank of its daemon,
  // on one buffer holding the node's part (schedule.h, NodePartElements); not part of the
  // signature the daemons compare (a daemon with one local rank submits the plain call).
  bool node_part = false;

  // OK when rank `rank` of `world_size` may run this operation: enumerations in range, root or
  // peer a rank, a requested algorithm that implements the collective (the registry), counts that
  // do not overflow, and for all_to_all_v arrays of the world's size whose receive blocks do not
  // overlap. Else InvalidArgument saying which field is wrong.
  absl::Status Validate(int world_size, int rank) const;

  // Elements of rank `rank`'s send and recv buffers the operation reads or writes (zero where it
  // uses none: broadcast's send off the root, reduce's and gather's recv off the root, scatter's
  // send off the root, the unused side of send and recv, both for barrier). Validate first.
  uint64_t SendElements(int world_size, int rank) const;
  uint64_t RecvElements(int world_size, int rank) const;

  // Whether the root or peer field means anything for this collective.
  bool Rooted() const;
  bool PointToPoint() const {
    return collective == Collective::kSend || collective == Collective::kRecv;
  }

  // "all_reduce(float32, sum, count 1024, ring)", for error messages.
  std::string Describe() const;

  friend bool operator==(const OpSpec&, const OpSpec&) = default;

 private:
  // all_to_all_v's arrays: one entry per rank each, blocks whose ends and bytes do not overflow,
  // receive blocks that do not overlap.
  absl::Status ValidateBlocks(int world_size, uint64_t element) const;
};

// What every rank of an operation must agree on (all_to_all_v's per-peer counts excepted: each
// rank has its own, and the transport checks each message's length), as the daemons exchange it
// and the node arena's ranks publish it (collective/node_arena_layout.h): fixed size, fixed
// layout.
struct Signature {
  uint32_t collective = 0;
  uint32_t type = 0;
  uint32_t op = 0;
  int32_t root = 0;
  uint64_t count = 0;
  uint32_t algorithm = 0;  // 0: the daemons' choice; else 1 + the requested Algorithm
  // 0 from Of and between daemons; the node arena's marks of the kind of round (arena::kAgreeing,
  // arena::kThroughDaemon).
  uint32_t flags = 0;

  static Signature Of(const OpSpec& spec);
  // The fields back as an operation (for error messages; values may be out of range).
  OpSpec AsSpec() const;
  friend bool operator==(const Signature&, const Signature&) = default;
};
static_assert(sizeof(Signature) == 32);

// Whether two local ranks' calls are the same operation (their signatures agree).
inline bool SameOperation(const OpSpec& a, const OpSpec& b) {
  return Signature::Of(a) == Signature::Of(b);
}

}  // namespace baton::collective
