#pragma once

// Proof that a control message about a communicator comes from a daemon that holds the
// communicator's whole 128-bit secret, not only its tag (the first 64 bits, which logs, metrics
// and frames show): an HMAC-SHA256 keyed with the secret over what the message says. The secret
// itself never travels in control messages and is never logged.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace baton::daemon {

// The proof of an abort of communicator `comm_tag` with status code `code` and `message`, by
// the daemon on `from_node`, from collective `from_operation` on when it is set: 64 hex digits.
std::string AbortProof(const std::string& secret, uint64_t comm_tag, int code,
                       absl::string_view message, absl::string_view from_node,
                       std::optional<uint64_t> from_operation = std::nullopt);

}  // namespace baton::daemon
