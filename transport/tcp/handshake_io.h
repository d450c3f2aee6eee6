#pragma once

// The handshake (transport/handshake.h) spoken over a connected socket, each side's part.
// Internal to transport/tcp/.

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/handshake.h"

namespace baton::transport::tcp {

// The connecting side, `self` dialling `peer`, with `key`. PermissionDenied when the other end
// cannot prove that it holds `key` (the caller may fetch the key again and retry once);
// DataLoss when it does not speak the protocol; others as for ReadFull and WriteFull.
absl::Status Introduce(int fd, const std::string& self, const std::string& peer,
                       const HandshakeKey& key, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled);

// The accepting side `self`: the connecting endpoint's address once it proved the key that
// `keys` (null: kNoHandshakeKey) has for it. PermissionDenied for a wrong proof or an address
// `keys` refuses, DataLoss for anything not the protocol, DeadlineExceeded at `deadline`.
absl::StatusOr<std::string> Admit(int fd, const std::string& self, HandshakeKeys* keys,
                                  absl::Time deadline);

}  // namespace baton::transport::tcp
