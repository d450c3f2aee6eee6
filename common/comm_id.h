#pragma once

// The text of a communicator id, "<root daemon's peer address>/<secret>", as every party that
// handles one checks it: libbaton before it sends one to its daemon, the daemon before it uses
// one. The secret is 128 random bits written as 32 hex digits; its first 64 bits are the
// communicator's tag (which logs, metrics and frames show), the whole 128 bits its credential.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

// The longest communicator id accepted ("<root address>/<32 hex digits>").
inline constexpr size_t kMaxCommIdBytes = 320;
inline constexpr size_t kCommSecretDigits = 32;

// OK when `text` is at most kMaxCommIdBytes of printable ASCII (0x21-0x7e), which every address
// and secret is; else InvalidArgument naming the first offending byte by its offset and value,
// never quoting the text (it may be anything, of any length). So an id that is not UTF-8, which
// gRPC string fields cannot carry, gets a clear error before it is sent.
absl::Status CheckCommIdText(std::string_view text);

// The secret of an id in canonical form (32 lower case hex digits), from 32 hex digits of
// either case: InvalidArgument otherwise. Every digit counts: two texts name one secret only when
// all 128 bits are equal.
absl::StatusOr<std::string> CanonicalCommSecret(std::string_view secret);

// The communicator tag of a canonical secret (its first 64 bits); InvalidArgument unless
// `secret` is canonical.
absl::StatusOr<uint64_t> CommTagOfSecret(std::string_view secret);

}  // namespace baton
