#pragma once

// The handshake (transport/auth/handshake.h) spoken over a connected socket, each side's part.
// Internal to transport/tcp/.

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/auth/handshake.h"
#include "transport/auth/record_cipher.h"

namespace baton::transport::tcp {

// The ciphers of a sealed or authenticated connection (frame.h), as one side holds them: the one
// it seals its frames with and the one it opens the other side's with (both encrypt, or neither:
// RecordCipher::encrypts).
struct SealedStream {
  RecordCipher seal;
  RecordCipher open;
};

// The connecting side, `self` dialling `peer`, with `key`; `protection`: the least it asks for.
// The connection's ciphers if it is sealed or authenticated (whenever `protection` asks, or if the
// acceptor asks that of every connection: the stronger wins), else nullopt. PermissionDenied when
// the other end cannot prove that it holds `key` (the caller may fetch the key again and retry
// once); DataLoss when it does not speak the protocol, or answers with a connection weaker than
// asked for; others as for ReadFull and WriteFull.
absl::StatusOr<std::optional<SealedStream>> Introduce(int fd, const std::string& self,
                                                      const std::string& peer,
                                                      const HandshakeKey& key,
                                                      Protection protection, absl::Time deadline,
                                                      absl::FunctionRef<bool()> cancelled);
// The same, asking for a sealed connection (`seal`) or for nothing.
inline absl::StatusOr<std::optional<SealedStream>> Introduce(int fd, const std::string& self,
                                                             const std::string& peer,
                                                             const HandshakeKey& key, bool seal,
                                                             absl::Time deadline,
                                                             absl::FunctionRef<bool()> cancelled) {
  return Introduce(fd, self, peer, key, seal ? Protection::kSealed : Protection::kNone, deadline,
                   cancelled);
}

// What the accepting side learns: who connected, once it proved the key for that address, and
// the ciphers if the connection is sealed or authenticated.
struct Admitted {
  std::string peer;
  std::optional<SealedStream> sealed;
};

// The accepting side `self`, with the keys of `keys` (null: kNoHandshakeKey); `protection`: what
// it gives the connection even if the connector asked for less (the stronger of the two wins).
// PermissionDenied for a wrong proof or an address `keys` refuses, DataLoss for anything not the
// protocol, DeadlineExceeded at `deadline`.
absl::StatusOr<Admitted> Admit(int fd, const std::string& self, HandshakeKeys* keys,
                               Protection protection, absl::Time deadline);
// The same, sealing every connection (`seal`) or only those whose connector asks.
inline absl::StatusOr<Admitted> Admit(int fd, const std::string& self, HandshakeKeys* keys,
                                      bool seal, absl::Time deadline) {
  return Admit(fd, self, keys, seal ? Protection::kSealed : Protection::kNone, deadline);
}

}  // namespace baton::transport::tcp
