#include "transport/handshake.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"

namespace baton::transport {
namespace {

HandshakeProof Prove(const HandshakeKey& key, absl::string_view direction,
                     const HandshakeTranscript& t) {
  // Fixed-size nonces first, then each address after its length: no two transcripts share a text.
  std::string text = absl::StrCat("baton-handshake-v1|", direction, "|");
  text.append(reinterpret_cast<const char*>(t.connector_nonce.data()), t.connector_nonce.size());
  text.append(reinterpret_cast<const char*>(t.acceptor_nonce.data()), t.acceptor_nonce.size());
  absl::StrAppend(&text, "|", t.connector_address.size(), ":", t.connector_address, "|",
                  t.acceptor_address.size(), ":", t.acceptor_address);
  return HmacSha256(key, text);
}

}  // namespace

std::string EncodeHello(const Hello& hello) {
  std::string payload(reinterpret_cast<const char*>(hello.nonce.data()), hello.nonce.size());
  payload += hello.address;
  return payload;
}

absl::StatusOr<Hello> DecodeHello(std::span<const std::byte> payload) {
  if (payload.size() <= kHandshakeNonceBytes ||
      payload.size() > kHandshakeNonceBytes + kMaxHelloAddressBytes) {
    return absl::DataLossError(absl::StrCat("a hello of ", payload.size(),
                                            " bytes; it holds a 16-byte nonce and an address of "
                                            "1 to ",
                                            kMaxHelloAddressBytes, " bytes"));
  }
  Hello hello;
  std::memcpy(hello.nonce.data(), payload.data(), kHandshakeNonceBytes);
  hello.address.assign(reinterpret_cast<const char*>(payload.data()) + kHandshakeNonceBytes,
                       payload.size() - kHandshakeNonceBytes);
  return hello;
}

std::array<std::byte, kChallengePayloadBytes> EncodeChallenge(const Challenge& challenge) {
  std::array<std::byte, kChallengePayloadBytes> payload;
  std::memcpy(payload.data(), challenge.nonce.data(), kHandshakeNonceBytes);
  std::memcpy(payload.data() + kHandshakeNonceBytes, challenge.proof.data(), kHandshakeProofBytes);
  return payload;
}

Challenge DecodeChallenge(std::span<const std::byte, kChallengePayloadBytes> payload) {
  Challenge challenge;
  std::memcpy(challenge.nonce.data(), payload.data(), kHandshakeNonceBytes);
  std::memcpy(challenge.proof.data(), payload.data() + kHandshakeNonceBytes, kHandshakeProofBytes);
  return challenge;
}

HandshakeProof AcceptorProof(const HandshakeKey& key, const HandshakeTranscript& transcript) {
  return Prove(key, "accept", transcript);
}

HandshakeProof ConnectorProof(const HandshakeKey& key, const HandshakeTranscript& transcript) {
  return Prove(key, "connect", transcript);
}

HandshakeNonce NewHandshakeNonce() {
  HandshakeNonce nonce;
  SecureRandomBytes(nonce.data(), nonce.size());
  return nonce;
}

}  // namespace baton::transport
