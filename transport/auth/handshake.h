#pragma once

// The keyed handshake that opens every connection between two endpoints, whatever carries it:
// three messages, hello, challenge and proof (TCP sends them as frames, transport/tcp/frame.h).
// Transport-neutral (target baton_transport_auth), so that every transport can link it alone. The
// connecting endpoint names its address; both then prove, with HMAC-SHA256 over both nonces and
// both addresses, that they hold the key the two share for that address. Where the key comes from
// is the HandshakeKeys' business: batond's acceptor derives it from a secret of its own, and hands
// it to the daemon at that address only over mutual TLS (daemon/data_keys.h), so a connection is
// believed to come from an address only if the daemon certified for it opened it, and the
// connecting side knows it reached the daemon it asked for the key. Without HandshakeKeys both
// sides use kNoHandshakeKey: the handshake then only checks that the other end speaks the protocol
// (development and tests).
//
// The handshake also settles whether the connection is sealed or authenticated (Protection): if
// so, each direction seals its messages with a RecordCipher (record_cipher.h) whose secret
// DeriveSessionSecrets derives from the key and the transcript, so that every connection and
// direction (and each protection) has its own.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/hmac.h"
#include "transport/auth/record_cipher.h"

namespace baton::transport {

// The sizes of the handshake's messages' parts.
inline constexpr uint64_t kMaxHelloAddressBytes = 1024;
inline constexpr uint64_t kHandshakeNonceBytes = 16;
inline constexpr uint64_t kHandshakeProofBytes = 32;
inline constexpr uint64_t kChallengePayloadBytes = kHandshakeNonceBytes + kHandshakeProofBytes;

// How a connection's messages are protected, weakest first: the handshake settles on the
// strongest that either end asks for, and its proofs cover the choice, so nobody on the way can
// weaken it.
enum class Protection : uint8_t {
  kNone = 0,           // messages as they are
  kAuthenticated = 1,  // records with tags (record_cipher.h), payload in the clear
  kSealed = 2,         // records with tags, payload encrypted
};
// "none", "authenticated" or "sealed".
absl::string_view ProtectionName(Protection protection);

inline constexpr size_t kHandshakeKeyBytes = 32;
using HandshakeKey = std::array<std::byte, kHandshakeKeyBytes>;
using HandshakeNonce = std::array<std::byte, kHandshakeNonceBytes>;
using HandshakeProof = Hmac;
static_assert(sizeof(HandshakeProof) == kHandshakeProofBytes);

inline constexpr HandshakeKey kNoHandshakeKey{};

// The keys of one endpoint's connections. Thread-safe; called without the endpoint's locks held.
class HandshakeKeys {
 public:
  virtual ~HandshakeKeys() = default;
  // The key this endpoint proves itself with when it connects to `peer` (the peer's address),
  // which the peer issued. `refresh`: the cached one did not match (the peer may have
  // restarted); obtain it again. An error fails the connection attempt.
  virtual absl::StatusOr<HandshakeKey> ToConnect(const std::string& peer, bool refresh,
                                                 absl::Time deadline) = 0;
  // The key a connection that says it comes from `peer` must prove. An error refuses it.
  virtual absl::StatusOr<HandshakeKey> ToAccept(const std::string& peer) = 0;
};

// A hello's payload: the connecting endpoint's nonce and address.
struct Hello {
  HandshakeNonce nonce{};
  std::string address;
};
std::string EncodeHello(const Hello& hello);
// DataLoss unless `payload` is a nonce and 1 to kMaxHelloAddressBytes of address.
absl::StatusOr<Hello> DecodeHello(std::span<const std::byte> payload);

// A challenge's payload: the acceptor's nonce and proof.
struct Challenge {
  HandshakeNonce nonce{};
  HandshakeProof proof{};
};
std::array<std::byte, kChallengePayloadBytes> EncodeChallenge(const Challenge& challenge);
Challenge DecodeChallenge(std::span<const std::byte, kChallengePayloadBytes> payload);

// What the two handshake messages after the hello prove: both nonces and both addresses, one
// direction each, so that no proof can be replayed for the other direction, another connection
// or another pair of endpoints.
// The proofs also cover whether the connection is sealed or authenticated, so that a proof for
// one choice does not pass for another.
struct HandshakeTranscript {
  HandshakeNonce connector_nonce{};
  HandshakeNonce acceptor_nonce{};
  absl::string_view connector_address;
  absl::string_view acceptor_address;
  bool sealed = false;
  bool authenticated = false;  // never with `sealed`

  Protection protection() const {
    return sealed          ? Protection::kSealed
           : authenticated ? Protection::kAuthenticated
                           : Protection::kNone;
  }
};
HandshakeProof AcceptorProof(const HandshakeKey& key, const HandshakeTranscript& transcript);
HandshakeProof ConnectorProof(const HandshakeKey& key, const HandshakeTranscript& transcript);

// The secrets of a sealed or authenticated connection's two directions: HKDF-SHA256 of `key`,
// salted with both nonces and expanded for both addresses, 32 bytes each.
struct SessionSecrets {
  RecordSecret connector_to_acceptor{};
  RecordSecret acceptor_to_connector{};
};
SessionSecrets DeriveSessionSecrets(const HandshakeKey& key, const HandshakeTranscript& transcript);

// A fresh random nonce.
HandshakeNonce NewHandshakeNonce();

}  // namespace baton::transport
