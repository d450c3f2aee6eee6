#include "transport/tcp/handshake_io.h"

#include <sys/uio.h>

#include <array>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/tcp/socket.h"

namespace baton::transport::tcp {
namespace {

absl::Status WriteHandshakeFrame(int fd, FrameType type, bool sealed,
                                 std::span<const std::byte> payload, absl::Time deadline,
                                 absl::FunctionRef<bool()> cancelled) {
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(
      FrameHeader{.type = type, .tag = Tag{}, .payload_bytes = payload.size(), .sealed = sealed},
      header);
  std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                           iovec{const_cast<std::byte*>(payload.data()), payload.size()}};
  size_t written = 0;
  return WriteFull(fd, iov, deadline, cancelled, &written);
}

struct HandshakeFrame {
  bool sealed = false;  // the header's kFrameFlagSealed
  std::vector<std::byte> payload;
};

// Reads the next frame, which must be of `type`, with its payload (at most what frame.h allows
// for the type).
absl::StatusOr<HandshakeFrame> ReadHandshakeFrame(int fd, FrameType type, absl::Time deadline,
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
  HandshakeFrame frame{header.sealed, std::vector<std::byte>(header.payload_bytes)};
  BATON_RETURN_IF_ERROR(ReadFull(fd, frame.payload, deadline, cancelled, &read));
  return frame;
}

// This side's ciphers of a sealed connection: it seals with `out` and opens with `in`.
absl::StatusOr<SealedStream> MakeSealedStream(const RecordSecret& out, const RecordSecret& in) {
  BATON_ASSIGN_OR_RETURN(RecordCipher seal, RecordCipher::Create(out, RecordCipher::Mode::kSeal));
  BATON_ASSIGN_OR_RETURN(RecordCipher open, RecordCipher::Create(in, RecordCipher::Mode::kOpen));
  return SealedStream{std::move(seal), std::move(open)};
}

}  // namespace

absl::StatusOr<std::optional<SealedStream>> Introduce(int fd, const std::string& self,
                                                      const std::string& peer,
                                                      const HandshakeKey& key, bool seal,
                                                      absl::Time deadline,
                                                      absl::FunctionRef<bool()> cancelled) {
  const Hello hello{NewHandshakeNonce(), self};
  const std::string payload = EncodeHello(hello);
  BATON_RETURN_IF_ERROR(
      Annotate(WriteHandshakeFrame(fd, FrameType::kHello, seal,
                                   std::as_bytes(std::span(payload.data(), payload.size())),
                                   deadline, cancelled),
               "sending hello"));
  absl::StatusOr<HandshakeFrame> challenge_frame =
      ReadHandshakeFrame(fd, FrameType::kChallenge, deadline, cancelled);
  if (!challenge_frame.ok()) {
    return Annotate(challenge_frame.status(), "reading the handshake challenge");
  }
  const Challenge challenge =
      DecodeChallenge(std::span<const std::byte, kChallengePayloadBytes>(challenge_frame->payload));
  const HandshakeTranscript transcript{hello.nonce, challenge.nonce, self, peer,
                                       challenge_frame->sealed};
  if (!HmacEquals(challenge.proof, AcceptorProof(key, transcript))) {
    return absl::PermissionDeniedError(
        "the endpoint there could not prove it holds the handshake key this daemon has for it "
        "(a restarted peer, or someone else on that address)");
  }
  if (seal && !challenge_frame->sealed) {
    // The acceptor cannot seal, or someone on the way cleared the hello's request (the acceptor
    // then honestly proved an unsealed connection). Either way nothing is sent unsealed.
    return absl::DataLossError(
        "the connection would be unsealed though this endpoint asked for a sealed one (the peer "
        "cannot seal, or someone on the way removed the request)");
  }
  const HandshakeProof proof = ConnectorProof(key, transcript);
  BATON_RETURN_IF_ERROR(
      Annotate(WriteHandshakeFrame(fd, FrameType::kProof, false, proof, deadline, cancelled),
               "sending the handshake proof"));
  if (!transcript.sealed) return std::nullopt;
  const SessionSecrets secrets = DeriveSessionSecrets(key, transcript);
  return MakeSealedStream(secrets.connector_to_acceptor, secrets.acceptor_to_connector);
}

absl::StatusOr<Admitted> Admit(int fd, const std::string& self, HandshakeKeys* keys, bool seal,
                               absl::Time deadline) {
  auto never = [] { return false; };
  BATON_ASSIGN_OR_RETURN(HandshakeFrame hello_frame,
                         ReadHandshakeFrame(fd, FrameType::kHello, deadline, never));
  BATON_ASSIGN_OR_RETURN(Hello hello, DecodeHello(hello_frame.payload));
  HandshakeKey key = kNoHandshakeKey;
  if (keys != nullptr) {
    absl::StatusOr<HandshakeKey> known = keys->ToAccept(hello.address);
    if (!known.ok()) return known.status();
    key = *known;
  }
  const HandshakeNonce nonce = NewHandshakeNonce();
  const HandshakeTranscript transcript{hello.nonce, nonce, hello.address, self,
                                       seal || hello_frame.sealed};
  const auto challenge = EncodeChallenge(Challenge{nonce, AcceptorProof(key, transcript)});
  BATON_RETURN_IF_ERROR(WriteHandshakeFrame(fd, FrameType::kChallenge, transcript.sealed, challenge,
                                            deadline, never));
  BATON_ASSIGN_OR_RETURN(HandshakeFrame proof_frame,
                         ReadHandshakeFrame(fd, FrameType::kProof, deadline, never));
  HandshakeProof proof;
  std::copy(proof_frame.payload.begin(), proof_frame.payload.end(), proof.begin());
  if (!HmacEquals(proof, ConnectorProof(key, transcript))) {
    constexpr size_t kMaxQuoted = 64;  // the address is the caller's claim
    return absl::PermissionDeniedError(
        absl::StrCat("the connection claiming to come from ", hello.address.substr(0, kMaxQuoted),
                     " did not prove the handshake key of that address"));
  }
  Admitted admitted;
  if (transcript.sealed) {  // before the address moves out of the transcript's view
    const SessionSecrets secrets = DeriveSessionSecrets(key, transcript);
    BATON_ASSIGN_OR_RETURN(admitted.sealed, MakeSealedStream(secrets.acceptor_to_connector,
                                                             secrets.connector_to_acceptor));
  }
  admitted.peer = std::move(hello.address);
  return admitted;
}

}  // namespace baton::transport::tcp
