#include "transport/tcp/handshake_io.h"

#include <sys/uio.h>

#include <array>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/tcp/socket.h"

namespace baton::transport::tcp {
namespace {

absl::Status WriteHandshakeFrame(int fd, FrameType type, std::span<const std::byte> payload,
                                 absl::Time deadline, absl::FunctionRef<bool()> cancelled) {
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(FrameHeader{type, Tag{}, payload.size()}, header);
  std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                           iovec{const_cast<std::byte*>(payload.data()), payload.size()}};
  size_t written = 0;
  return WriteFull(fd, iov, deadline, cancelled, &written);
}

// Reads the next frame, which must be of `type`; its payload (at most what frame.h allows for
// the type).
absl::StatusOr<std::vector<std::byte>> ReadHandshakeFrame(int fd, FrameType type,
                                                          absl::Time deadline,
                                                          absl::FunctionRef<bool()> cancelled) {
  std::array<std::byte, kFrameHeaderBytes> bytes;
  size_t read = 0;
  BATON_RETURN_IF_ERROR(ReadFull(fd, bytes, deadline, cancelled, &read));
  BATON_ASSIGN_OR_RETURN(const FrameHeader header, DecodeFrameHeader(bytes));
  if (header.type != type) {
    return absl::DataLossError(absl::StrCat("expected handshake frame type ",
                                            static_cast<int>(type), ", got type ",
                                            static_cast<int>(header.type)));
  }
  std::vector<std::byte> payload(header.payload_bytes);
  BATON_RETURN_IF_ERROR(ReadFull(fd, payload, deadline, cancelled, &read));
  return payload;
}

}  // namespace

absl::Status Introduce(int fd, const std::string& self, const std::string& peer,
                       const HandshakeKey& key, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled) {
  const Hello hello{NewHandshakeNonce(), self};
  const std::string payload = EncodeHello(hello);
  BATON_RETURN_IF_ERROR(
      Annotate(WriteHandshakeFrame(fd, FrameType::kHello,
                                   std::as_bytes(std::span(payload.data(), payload.size())),
                                   deadline, cancelled),
               "sending hello"));
  absl::StatusOr<std::vector<std::byte>> challenge_bytes =
      ReadHandshakeFrame(fd, FrameType::kChallenge, deadline, cancelled);
  if (!challenge_bytes.ok()) {
    return Annotate(challenge_bytes.status(), "reading the handshake challenge");
  }
  const Challenge challenge =
      DecodeChallenge(std::span<const std::byte, kChallengePayloadBytes>(*challenge_bytes));
  const HandshakeTranscript transcript{hello.nonce, challenge.nonce, self, peer};
  if (!HmacEquals(challenge.proof, AcceptorProof(key, transcript))) {
    return absl::PermissionDeniedError(
        "the endpoint there could not prove it holds the handshake key this daemon has for it "
        "(a restarted peer, or someone else on that address)");
  }
  const HandshakeProof proof = ConnectorProof(key, transcript);
  return Annotate(WriteHandshakeFrame(fd, FrameType::kProof, proof, deadline, cancelled),
                  "sending the handshake proof");
}

absl::StatusOr<std::string> Admit(int fd, const std::string& self, HandshakeKeys* keys,
                                  absl::Time deadline) {
  auto never = [] { return false; };
  BATON_ASSIGN_OR_RETURN(std::vector<std::byte> hello_bytes,
                         ReadHandshakeFrame(fd, FrameType::kHello, deadline, never));
  BATON_ASSIGN_OR_RETURN(Hello hello, DecodeHello(hello_bytes));
  HandshakeKey key = kNoHandshakeKey;
  if (keys != nullptr) {
    absl::StatusOr<HandshakeKey> known = keys->ToAccept(hello.address);
    if (!known.ok()) return known.status();
    key = *known;
  }
  const HandshakeNonce nonce = NewHandshakeNonce();
  const HandshakeTranscript transcript{hello.nonce, nonce, hello.address, self};
  const auto challenge = EncodeChallenge(Challenge{nonce, AcceptorProof(key, transcript)});
  BATON_RETURN_IF_ERROR(WriteHandshakeFrame(fd, FrameType::kChallenge, challenge, deadline, never));
  BATON_ASSIGN_OR_RETURN(std::vector<std::byte> proof_bytes,
                         ReadHandshakeFrame(fd, FrameType::kProof, deadline, never));
  HandshakeProof proof;
  std::copy(proof_bytes.begin(), proof_bytes.end(), proof.begin());
  if (!HmacEquals(proof, ConnectorProof(key, transcript))) {
    constexpr size_t kMaxQuoted = 64;  // the address is the caller's claim
    return absl::PermissionDeniedError(
        absl::StrCat("the connection claiming to come from ", hello.address.substr(0, kMaxQuoted),
                     " did not prove the handshake key of that address"));
  }
  return std::move(hello.address);
}

}  // namespace baton::transport::tcp
