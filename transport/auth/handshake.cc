#include "transport/auth/handshake.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"

namespace baton::transport {
absl::string_view ProtectionName(Protection protection) {
  switch (protection) {
    case Protection::kNone:
      return "none";
    case Protection::kAuthenticated:
      return "authenticated";
    case Protection::kSealed:
      return "sealed";
  }
  return "unknown";
}

namespace {

// Fixed-size nonces first, then each address after its length: no two transcripts share a text.
// An unprotected connection's text is what version 1 of the handshake proved (no suffix).
std::string TranscriptText(absl::string_view purpose, const HandshakeTranscript& t) {
  std::string text = absl::StrCat(purpose, "|");
  text.append(reinterpret_cast<const char*>(t.connector_nonce.data()), t.connector_nonce.size());
  text.append(reinterpret_cast<const char*>(t.acceptor_nonce.data()), t.acceptor_nonce.size());
  absl::StrAppend(&text, "|", t.connector_address.size(), ":", t.connector_address, "|",
                  t.acceptor_address.size(), ":", t.acceptor_address);
  if (t.protection() != Protection::kNone)
    absl::StrAppend(&text, "|", ProtectionName(t.protection()));
  return text;
}

HandshakeProof Prove(const HandshakeKey& key, absl::string_view direction,
                     const HandshakeTranscript& t) {
  return HmacSha256(key, TranscriptText(absl::StrCat("baton-handshake-v1|", direction), t));
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

SessionSecrets DeriveSessionSecrets(const HandshakeKey& key,
                                    const HandshakeTranscript& transcript) {
  std::array<std::byte, 2 * kHandshakeNonceBytes> salt;
  std::copy(transcript.connector_nonce.begin(), transcript.connector_nonce.end(), salt.begin());
  std::copy(transcript.acceptor_nonce.begin(), transcript.acceptor_nonce.end(),
            salt.begin() + kHandshakeNonceBytes);
  std::array<std::byte, 2 * sizeof(RecordSecret)> material;
  HkdfSha256(key, salt, TranscriptText("baton-session-v1", transcript), material);
  SessionSecrets secrets;
  std::copy_n(material.begin(), secrets.connector_to_acceptor.size(),
              secrets.connector_to_acceptor.begin());
  std::copy_n(material.begin() + secrets.connector_to_acceptor.size(),
              secrets.acceptor_to_connector.size(), secrets.acceptor_to_connector.begin());
  return secrets;
}

HandshakeNonce NewHandshakeNonce() {
  HandshakeNonce nonce;
  SecureRandomBytes(nonce.data(), nonce.size());
  return nonce;
}

}  // namespace baton::transport
