#pragma once

// A request to run one collective, as the client API describes it, already decoded from whichever
// way it arrived (a gRPC request or a submission channel). Node::RunCollective validates the rest.

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"

namespace baton::daemon {

struct CollectiveCall {
  uint64_t session_id = 0;
  uint64_t comm_tag = 0;
  int rank = 0;
  collective::Collective kind = collective::Collective::kAllReduce;
  int root = 0;
  std::optional<collective::Algorithm> algorithm;  // unset: the daemon chooses
  collective::DataType data_type = collective::DataType::kFloat32;
  collective::ReduceOp reduce_op = collective::ReduceOp::kSum;
  uint64_t count = 0;
  uint64_t send_buffer = 0;
  uint64_t send_offset = 0;
  uint64_t recv_buffer = 0;
  uint64_t recv_offset = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

}  // namespace baton::daemon
