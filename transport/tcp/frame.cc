#include "transport/tcp/frame.h"

#include "absl/strings/str_cat.h"

namespace baton::transport {
namespace {

// Byte-by-byte so that the wire format does not depend on the host's byte order or alignment.
template <typename T>
void PutLittleEndian(T value, std::byte* out) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[i] = static_cast<std::byte>(static_cast<uint64_t>(value) >> (8 * i));
  }
}

template <typename T>
T GetLittleEndian(const std::byte* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<uint64_t>(in[i]) << (8 * i);
  }
  return static_cast<T>(value);
}

constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 4;
constexpr size_t kTypeOffset = 5;
constexpr size_t kFlagsOffset = 6;
constexpr size_t kCommOffset = 8;
constexpr size_t kSeqOffset = 16;
constexpr size_t kStepOffset = 24;
constexpr size_t kPartOffset = 28;
constexpr size_t kPayloadBytesOffset = 32;
static_assert(kPayloadBytesOffset + sizeof(uint64_t) == kFrameHeaderBytes);

}  // namespace

void EncodeFrameHeader(const FrameHeader& header, FrameHeaderBytes out) {
  std::byte* p = out.data();
  PutLittleEndian<uint32_t>(kFrameMagic, p + kMagicOffset);
  PutLittleEndian<uint8_t>(kFrameVersion, p + kVersionOffset);
  PutLittleEndian<uint8_t>(static_cast<uint8_t>(header.type), p + kTypeOffset);
  const uint16_t flags = (header.checksum ? kFrameFlagChecksum : 0) |
                         (header.sealed ? kFrameFlagSealed : 0) |
                         (header.authenticated ? kFrameFlagAuthenticated : 0);
  PutLittleEndian<uint16_t>(flags, p + kFlagsOffset);
  PutLittleEndian<uint64_t>(header.tag.comm, p + kCommOffset);
  PutLittleEndian<uint64_t>(header.tag.seq, p + kSeqOffset);
  PutLittleEndian<uint32_t>(header.tag.step, p + kStepOffset);
  PutLittleEndian<uint32_t>(header.tag.part, p + kPartOffset);
  PutLittleEndian<uint64_t>(header.payload_bytes, p + kPayloadBytesOffset);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(ConstFrameHeaderBytes in) {
  const std::byte* p = in.data();
  const auto magic = GetLittleEndian<uint32_t>(p + kMagicOffset);
  if (magic != kFrameMagic) {
    return absl::DataLossError(
        absl::StrCat("bad frame magic 0x", absl::Hex(magic, absl::kZeroPad8)));
  }
  const auto version = GetLittleEndian<uint8_t>(p + kVersionOffset);
  if (version != kFrameVersion) {
    return absl::DataLossError(absl::StrCat("unsupported frame version ", version,
                                            " (this build speaks ", kFrameVersion, ")"));
  }
  const auto flags = GetLittleEndian<uint16_t>(p + kFlagsOffset);
  if ((flags & ~(kFrameFlagChecksum | kFrameFlagSealed | kFrameFlagAuthenticated)) != 0) {
    return absl::DataLossError(absl::StrCat("unknown frame flags 0x", absl::Hex(flags)));
  }
  FrameHeader header;
  header.checksum = (flags & kFrameFlagChecksum) != 0;
  header.sealed = (flags & kFrameFlagSealed) != 0;
  header.authenticated = (flags & kFrameFlagAuthenticated) != 0;
  const auto type = GetLittleEndian<uint8_t>(p + kTypeOffset);
  // Only data and write frames carry a checksum: the handshake has its own proofs, and a ping's
  // payload is an identifier that a corruption merely leaves unanswered. A sealed or authenticated
  // frame's records are authenticated already.
  const bool checksummed = type == static_cast<uint8_t>(FrameType::kData) ||
                           type == static_cast<uint8_t>(FrameType::kWrite);
  if (header.checksum && (!checksummed || header.in_records())) {
    return absl::DataLossError(absl::StrCat("checksum flag on ",
                                            header.sealed ? "a sealed frame"
                                            : header.authenticated
                                                ? "an authenticated frame"
                                                : absl::StrCat("a frame of type ", type),
                                            ", which carries none"));
  }
  if (header.sealed && header.authenticated) {
    return absl::DataLossError("sealed and authenticated flags on one frame");
  }
  if (header.in_records() && type == static_cast<uint8_t>(FrameType::kProof)) {
    return absl::DataLossError(
        absl::StrCat(ProtectionName(header.protection()), " flag on a handshake proof"));
  }
  uint64_t min_payload = 0;
  uint64_t max_payload = 0;
  auto exactly = [&](uint64_t bytes) { min_payload = max_payload = bytes; };
  switch (type) {
    case static_cast<uint8_t>(FrameType::kData):
    case static_cast<uint8_t>(FrameType::kWrite):
      max_payload = kMaxFramePayloadBytes;
      break;
    case static_cast<uint8_t>(FrameType::kWriteAck):
      exactly(kWriteAckPayloadBytes);
      break;
    case static_cast<uint8_t>(FrameType::kHello):
      min_payload = kHandshakeNonceBytes + 1;
      max_payload = kHandshakeNonceBytes + kMaxHelloAddressBytes;
      break;
    case static_cast<uint8_t>(FrameType::kPing):
    case static_cast<uint8_t>(FrameType::kPong):
      exactly(kPingPayloadBytes);
      break;
    case static_cast<uint8_t>(FrameType::kChallenge):
      exactly(kChallengePayloadBytes);
      break;
    case static_cast<uint8_t>(FrameType::kProof):
      exactly(kHandshakeProofBytes);
      break;
    case static_cast<uint8_t>(FrameType::kCredit):
      exactly(kCreditPayloadBytes);
      break;
    case static_cast<uint8_t>(FrameType::kClearToSend):
      exactly(kClearToSendPayloadBytes);
      break;
    default:
      return absl::DataLossError(absl::StrCat("unknown frame type ", type));
  }
  header.type = static_cast<FrameType>(type);
  header.tag.comm = GetLittleEndian<uint64_t>(p + kCommOffset);
  header.tag.seq = GetLittleEndian<uint64_t>(p + kSeqOffset);
  header.tag.step = GetLittleEndian<uint32_t>(p + kStepOffset);
  header.tag.part = GetLittleEndian<uint32_t>(p + kPartOffset);
  header.payload_bytes = GetLittleEndian<uint64_t>(p + kPayloadBytesOffset);
  if (header.payload_bytes > max_payload) {
    return absl::DataLossError(absl::StrCat("frame announces ", header.payload_bytes,
                                            " payload bytes, more than the limit of ",
                                            max_payload));
  }
  if (header.payload_bytes < min_payload) {
    return absl::DataLossError(absl::StrCat("frame of type ", type, " with ", header.payload_bytes,
                                            " payload bytes instead of at least ", min_payload));
  }
  return header;
}

void EncodeFrameChecksum(uint32_t crc, FrameChecksumBytes out) {
  PutLittleEndian<uint32_t>(crc, out.data());
}

uint32_t DecodeFrameChecksum(ConstFrameChecksumBytes in) {
  return GetLittleEndian<uint32_t>(in.data());
}

CreditPayload EncodeCredit(const CreditGrant& grant) {
  CreditPayload payload;
  PutLittleEndian<uint64_t>(grant.epoch, payload.data());
  PutLittleEndian<uint64_t>(grant.limit, payload.data() + 8);
  PutLittleEndian<uint64_t>(grant.eager_max, payload.data() + 16);
  return payload;
}

CreditGrant DecodeCredit(const CreditPayload& payload) {
  return CreditGrant{GetLittleEndian<uint64_t>(payload.data()),
                     GetLittleEndian<uint64_t>(payload.data() + 8),
                     GetLittleEndian<uint64_t>(payload.data() + 16)};
}

ClearToSendPayload EncodeClearToSend(uint64_t length) {
  ClearToSendPayload payload;
  PutLittleEndian<uint64_t>(length, payload.data());
  return payload;
}

uint64_t DecodeClearToSend(const ClearToSendPayload& payload) {
  return GetLittleEndian<uint64_t>(payload.data());
}

}  // namespace baton::transport
