#pragma once

// A request to run one operation: who asks (session, communicator, rank), what (the OpSpec), on
// which registered buffers, and until when; decoded from whichever way it arrived (a gRPC
// request in ClientService::Collective, a submission channel in ChannelServer::Decode: one
// decoder each). Node::RunCollective validates the spec and resolves the buffers.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "collective/op_spec.h"

namespace baton::daemon {

struct CollectiveCall {
  uint64_t session_id = 0;
  uint64_t comm_tag = 0;
  int rank = 0;
  collective::OpSpec spec;  // what the rank asked for (collective/op_spec.h)
  // The buffers, as registered buffer ids and offsets (SessionRegistry).
  uint64_t send_buffer = 0;
  uint64_t send_offset = 0;
  uint64_t recv_buffer = 0;
  uint64_t recv_offset = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

}  // namespace baton::daemon
