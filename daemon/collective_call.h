#pragma once

// A request to run one collective, as the client API describes it, already decoded from whichever
// way it arrived (a gRPC request or a submission channel). Node::RunCollective validates the rest.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"

namespace baton::daemon {

struct CollectiveCall {
  uint64_t session_id = 0;
  uint64_t comm_tag = 0;
  int rank = 0;
  collective::Collective kind = collective::Collective::kAllReduce;
  int root = 0;  // broadcast, reduce, gather and scatter
  int peer = 0;  // send: the destination rank; recv: the source rank
  std::optional<collective::Algorithm> algorithm;  // unset: the daemon chooses
  collective::DataType data_type = collective::DataType::kFloat32;
  collective::ReduceOp reduce_op = collective::ReduceOp::kSum;
  // Elements, as the client API counts them per operation: of each buffer for all_reduce,
  // broadcast and reduce; of the output for reduce_scatter; of the input for all_gather; per peer
  // for all_to_all; of the per-rank block for gather and scatter; of the message for send and
  // recv; 0 for all_to_all_v.
  uint64_t count = 0;
  // all_to_all_v, in elements, world_size entries each (empty for other collectives): block j of
  // send is send_counts[j] elements from send_displs[j] and goes to rank j; the block from rank i
  // is recv_counts[i] elements and lands at recv_displs[i].
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> send_displs;
  std::vector<uint64_t> recv_counts;
  std::vector<uint64_t> recv_displs;
  uint64_t send_buffer = 0;
  uint64_t send_offset = 0;
  uint64_t recv_buffer = 0;
  uint64_t recv_offset = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

}  // namespace baton::daemon
