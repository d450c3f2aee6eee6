#include "transport/tcp/handshake_io.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/socket.h"

namespace baton::transport::tcp {
namespace {

absl::Status WriteHandshakeFrame(int fd, FrameType type, Protection protection,
                                 std::span<const std::byte> payload, absl::Time deadline,
                                 absl::FunctionRef<bool()> cancelled) {
  std::array<std::byte, kFrameHeaderBytes> header;
  FrameHeader frame{.type = type, .tag = Tag{}, .payload_bytes = payload.size()};
  frame.set_protection(protection);
  EncodeFrameHeader(frame, header);
  std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                           iovec{const_cast<std::byte*>(payload.data()), payload.size()}};
  size_t written = 0;
  return WriteFull(fd, iov, deadline, cancelled, &written);
}

struct HandshakeFrame {
  Protection protection = Protection::kNone;  // the header's flags
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
  HandshakeFrame frame{header.protection(), std::vector<std::byte>(header.payload_bytes)};
  BATON_RETURN_IF_ERROR(ReadFull(fd, frame.payload, deadline, cancelled, &read));
  return frame;
}

// The transcript's protection, as HandshakeTranscript's flags.
HandshakeTranscript Transcript(const HandshakeNonce& connector_nonce,
                               const HandshakeNonce& acceptor_nonce,
                               absl::string_view connector_address,
                               absl::string_view acceptor_address, Protection protection) {
  return HandshakeTranscript{connector_nonce,
                             acceptor_nonce,
                             connector_address,
                             acceptor_address,
                             protection == Protection::kSealed,
                             protection == Protection::kAuthenticated};
}

// This side's ciphers of a sealed or authenticated connection: it seals with `out` and opens
// with `in`.
absl::StatusOr<SealedStream> MakeSealedStream(Protection protection, const RecordSecret& out,
                                              const RecordSecret& in) {
  const RecordCipher::Payload payload = protection == Protection::kSealed
                                            ? RecordCipher::Payload::kEncrypted
                                            : RecordCipher::Payload::kClear;
  BATON_ASSIGN_OR_RETURN(
      RecordCipher seal,
      RecordCipher::Create(out, RecordCipher::Mode::kSeal, RecordCipher::kRecordsPerKey, payload));
  BATON_ASSIGN_OR_RETURN(
      RecordCipher open,
      RecordCipher::Create(in, RecordCipher::Mode::kOpen, RecordCipher::kRecordsPerKey, payload));
  return SealedStream{std::move(seal), std::move(open)};
}

}  // namespace

absl::StatusOr<std::optional<SealedStream>> Introduce(int fd, const std::string& self,
                                                      const std::string& peer,
                                                      const HandshakeKey& key,
                                                      Protection protection, absl::Time deadline,
                                                      absl::FunctionRef<bool()> cancelled) {
  const Hello hello{NewHandshakeNonce(), self};
  const std::string payload = EncodeHello(hello);
  BATON_RETURN_IF_ERROR(
      Annotate(WriteHandshakeFrame(fd, FrameType::kHello, protection,
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
  const HandshakeTranscript transcript =
      Transcript(hello.nonce, challenge.nonce, self, peer, challenge_frame->protection);
  if (!HmacEquals(challenge.proof, AcceptorProof(key, transcript))) {
    return absl::PermissionDeniedError(
        "the endpoint there could not prove it holds the handshake key this daemon has for it "
        "(a restarted peer, or someone else on that address)");
  }
  if (transcript.protection() < protection) {
    // The acceptor cannot protect it so, or someone on the way cleared or weakened the hello's
    // request (the acceptor then honestly proved a weaker connection). Either way nothing is sent
    // with less protection than asked for.
    return absl::DataLossError(absl::StrCat(
        "the connection would be ",
        transcript.protection() == Protection::kNone ? "unsealed and unauthenticated"
                                                     : ProtectionName(transcript.protection()),
        " though this endpoint asked for a ", ProtectionName(protection),
        " one (the peer cannot do that, or someone on the way removed the request)"));
  }
  const HandshakeProof proof = ConnectorProof(key, transcript);
  BATON_RETURN_IF_ERROR(Annotate(
      WriteHandshakeFrame(fd, FrameType::kProof, Protection::kNone, proof, deadline, cancelled),
      "sending the handshake proof"));
  if (transcript.protection() == Protection::kNone) return std::nullopt;
  const SessionSecrets secrets = DeriveSessionSecrets(key, transcript);
  return MakeSealedStream(transcript.protection(), secrets.connector_to_acceptor,
                          secrets.acceptor_to_connector);
}

absl::StatusOr<Admitted> Admit(int fd, const std::string& self, HandshakeKeys* keys,
                               Protection protection, absl::Time deadline) {
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
  const HandshakeTranscript transcript = Transcript(hello.nonce, nonce, hello.address, self,
                                                    std::max(protection, hello_frame.protection));
  const auto challenge = EncodeChallenge(Challenge{nonce, AcceptorProof(key, transcript)});
  BATON_RETURN_IF_ERROR(WriteHandshakeFrame(fd, FrameType::kChallenge, transcript.protection(),
                                            challenge, deadline, never));
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
  if (transcript.protection() != Protection::kNone) {  // before the address moves out of view
    const SessionSecrets secrets = DeriveSessionSecrets(key, transcript);
    BATON_ASSIGN_OR_RETURN(admitted.sealed,
                           MakeSealedStream(transcript.protection(), secrets.acceptor_to_connector,
                                            secrets.connector_to_acceptor));
  }
  admitted.peer = std::move(hello.address);
  return admitted;
}

}  // namespace baton::transport::tcp
