#pragma once

// The handshake (transport/handshake.h) spoken over a connected socket, each side's part.
// Internal to transport/tcp/.

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/handshake.h"
#include "transport/record_cipher.h"

namespace baton::transport::tcp {

// The ciphers of a sealed connection (frame.h), as one side holds them: the one it seals its
// frames with and the one it opens the other side's with.
struct SealedStream {
  RecordCipher seal;
  RecordCipher open;
};

// The connecting side, `self` dialling `peer`, with `key`; `seal`: ask for a sealed connection.
// The connection's ciphers if it is sealed (whenever `seal`, or if the acceptor seals every
// connection), else nullopt. PermissionDenied when the other end cannot prove that it holds `key`
// (the caller may fetch the key again and retry once); DataLoss when it does not speak the
// protocol, or answers a request to seal with an unsealed connection; others as for ReadFull and
// WriteFull.
absl::StatusOr<std::optional<SealedStream>> Introduce(int fd, const std::string& self,
                                                      const std::string& peer,
                                                      const HandshakeKey& key, bool seal,
                                                      absl::Time deadline,
                                                      absl::FunctionRef<bool()> cancelled);

// What the accepting side learns: who connected, once it proved the key for that address, and
// the ciphers if the connection is sealed.
struct Admitted {
  std::string peer;
  std::optional<SealedStream> sealed;
};

// The accepting side `self`, with the keys of `keys` (null: kNoHandshakeKey); `seal`: seal the
// connection even if the connector did not ask. PermissionDenied for a wrong proof or an address
// `keys` refuses, DataLoss for anything not the protocol, DeadlineExceeded at `deadline`.
absl::StatusOr<Admitted> Admit(int fd, const std::string& self, HandshakeKeys* keys, bool seal,
                               absl::Time deadline);

}  // namespace baton::transport::tcp
