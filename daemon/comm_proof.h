#pragma once

// Proof that a control message about a communicator comes from a daemon that holds the
// communicator's whole 128-bit secret, not only its tag (the first 64 bits, which logs, metrics
// and frames show): an HMAC-SHA256 keyed with the secret over what the message says. The secret
// itself never travels in control messages and is never logged.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/point_to_point.h"

namespace baton::daemon {

// What a daemon tells the other daemons of a plan when it aborts or fails their communicator.
struct AbortNotice {
  explicit AbortNotice(absl::Status reason, std::optional<uint64_t> from_operation = std::nullopt,
                       std::optional<collective::Departure> departed = std::nullopt)
      : reason(std::move(reason)), from_operation(from_operation), departed(std::move(departed)) {}

  absl::Status reason;  // not OK
  // Set: the communicator fails only from this collective on (Communicator::FailFrom).
  std::optional<uint64_t> from_operation;
  // Set: this rank left (destroyed its handle) having sent these messages, so receives of any
  // later message from it fail at once (collective::PointToPoint::SourceLeft).
  std::optional<collective::Departure> departed;
};

// The proof of `notice` about communicator `comm_tag` from the daemon on `from_node`: 64 hex
// digits over every field of the notice.
std::string AbortProof(const std::string& secret, uint64_t comm_tag, const AbortNotice& notice,
                       absl::string_view from_node);

// The proof that the daemon whose data address is `from` made connection data `data` for the
// daemon at `to`, for communicator `comm_tag` (Peer.ConnectPair): 64 hex digits. Bound to the
// direction, so that a daemon's answer cannot be replayed as its request, nor one pair's data
// as another's.
std::string ConnectionDataProof(const std::string& secret, uint64_t comm_tag,
                                absl::string_view from, absl::string_view to,
                                absl::string_view data);

}  // namespace baton::daemon
