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

// A stream-ordered operation's event: slot `slot` of the session's event set `event_set`, which
// the rank recorded on its stream after the work the operation must follow.
struct StreamOrder {
  uint64_t event_set = 0;
  uint32_t slot = 0;
};

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
  std::optional<StreamOrder> stream;  // set for stream-ordered operations
};

}  // namespace baton::daemon
