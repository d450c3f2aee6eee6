#pragma once

// The binary frame that the TCP transport puts around every message between daemons (a stream
// transport's framing; part of target baton_transport_tcp). A frame is a fixed-size header followed
// by the payload. Every integer is little-endian on the wire, whatever the host's byte order:
//
//   offset size field
//        0    4 magic          kFrameMagic: the bytes "BTNF"
//        4    1 version        kFrameVersion
//        5    1 type           FrameType: 1 = data, 2 = hello, 3 = ping, 4 = pong,
//                              5 = challenge, 6 = proof, 7 = write, 8 = write ack,
//                              9 = credit, 10 = clear-to-send
//        6    2 flags          bit 0: kFrameFlagChecksum (data and write frames only);
//                              bit 1: kFrameFlagSealed, bit 2: kFrameFlagAuthenticated
//                              (below); the others are 0
//        8    8 comm           Tag::comm
//       16    8 seq            Tag::seq
//       24    4 step           Tag::step
//       28    4 part           Tag::part
//       32    8 payload_bytes  the number of payload bytes that follow the header
//
// kFrameHeaderBytes (40) is the framing overhead of every message: a message of n payload bytes
// costs n + kFrameHeaderBytes bytes on the wire, and that is what LinkStats' tx_bytes/rx_bytes
// count per message (LinkStats, transport/transport.h).
//
// A data frame with kFrameFlagChecksum set is followed, after its payload, by a trailer of
// kFrameChecksumBytes: the CRC32C (crc32c.h) of the payload, little-endian. payload_bytes does not
// count it, and neither do LinkStats (so their bytes are the same with and without checksums).
// A receiver verifies every frame that carries one, whether or not it sends checksums itself, so
// endpoints that differ in the setting interoperate. A build older than the flag rejects such a
// frame (unknown flags): every endpoint of a cluster must have it before any sends checksums.
//
// A connection is sealed when its handshake agrees on it (below): every frame after the handshake
// then has kFrameFlagSealed set (and never the checksum flag), and its payload goes on the wire as
// sealed records, SealedRecords(payload_bytes) of them, each of at most kSealedRecordBytes of the
// payload encrypted with AES-256-GCM and followed by its 16-byte tag (record_cipher.h numbers
// them per direction, transport/auth/record_cipher.h; the frame's 40-byte header is every
// record's associated data). A frame
// with no payload still has one record, empty, whose tag authenticates the header. So a sealed
// frame costs 16 bytes per started 256 KiB more on the wire (not counted in LinkStats either),
// its payload is secret, and a byte changed, dropped, replayed or moved on the way fails the
// record it lands in; the connection then ends. On a sealed connection an unsealed frame is an
// error, and the other way round.
//
// A connection is authenticated when its handshake agrees on that instead (below): every frame
// after the handshake then has kFrameFlagAuthenticated set (and neither the checksum nor the
// sealed flag), and its payload goes on the wire as records exactly as a sealed frame's, the same
// number of them, in the same numbering, except that each record's payload bytes are in the
// clear: its tag is AES-256-GCM's over no plaintext, with the frame's header and then the
// record's payload as associated data (GMAC; auth/record_cipher.h, Payload::kClear). So a byte
// changed, dropped, replayed or moved on the way fails the record it lands in just as on a sealed
// connection, for the same 16 bytes per started 256 KiB, and the payload is not secret. On an
// authenticated connection a frame that is not authenticated is an error, and the other way round.
//
// Every connection starts with a handshake of three frames, all with the tag all zero and none
// counted in LinkStats (transport/auth/handshake.h has the proofs and the payloads):
//   hello      connecting -> accepting: a 16-byte nonce, then the connecting endpoint's address
//              (what its address() returns, at most kMaxHelloAddressBytes), which the receiver
//              attributes the connection's messages to;
//   challenge  accepting -> connecting: the acceptor's 16-byte nonce and its 32-byte proof that
//              it holds the key the two share for that address;
//   proof      connecting -> accepting: the connecting endpoint's 32-byte proof.
// Only then does either side send other frames; a connection whose proof is wrong is closed.
// A hello with kFrameFlagSealed asks that the connection be sealed, one with
// kFrameFlagAuthenticated that it be at least authenticated; a challenge with either flag says
// that the connection will be so (Protection: the acceptor takes the strongest of what the hello
// asks and what it asks of every connection itself). The proofs cover that choice (handshake.h),
// so nobody on the way can weaken it, and a connector refuses a connection weaker than it asked.
//
// A one-sided write (Endpoint::PostWrite) is two write frames, one straight after the other on
// one connection, both with the tag {comm: the communicator, seq: an identifier the writer
// chose for the write}: the first (step 0) carries the write's descriptor, kWriteDescriptorBytes
// (transport/tcp/remote_write.h: the region's key, the offset, the length, the notification), the
// second (step 1) the bytes, which the receiver reads straight into the exposed region. Each is
// checksummed, sealed or authenticated as a data frame is, so the descriptor is checked before
// the receiver acts on it. The receiver answers each write with a write ack frame (the tag
// {seq: the write's identifier}, kWriteAckPayloadBytes: the identifier again and whether it took
// or refused the bytes) over any connection with the writer. Write frames count in LinkStats as one
// message of the bytes written plus kWriteOverheadBytes; acks are not counted.
//
// A ping frame (tag all zero, kPingPayloadBytes of payload: an identifier the sender chose) asks
// the receiving endpoint to answer with a pong frame carrying the same payload, over any
// connection with the sender; Endpoint::RoundTrip times it. Pings and pongs are not counted in
// LinkStats either.
//
// Credit and clear-to-send frames carry flow control (transport/flow_control.h), and are not
// counted in LinkStats either. A credit frame (tag all zero, kCreditPayloadBytes of payload:
// epoch, limit and eager_max, each a little-endian uint64) is the receiver's CreditGrant to the
// sender of data on the connection; every endpoint sends one as its first frame on every
// connection once the handshake is done, which tells the other end the epoch of the link that
// connection belongs to, and more on any connection of that epoch as it returns credit. A
// clear-to-send frame (the tag of the message asked for, kClearToSendPayloadBytes of payload: the
// length of the receive, little-endian) tells the sender that a receive of rendezvous size is
// posted for that message.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/auth/handshake.h"
#include "transport/flow_control.h"
#include "transport/transport.h"

namespace baton::transport {

inline constexpr size_t kFrameHeaderBytes = 40;
inline constexpr uint32_t kFrameMagic = 0x464E5442;  // "BTNF" read as a little-endian uint32
// 2: the keyed handshake (version 1 had a hello without a nonce, and no challenge or proof).
// 3: one-sided writes (write and write ack frames) and flow control (credit and clear-to-send
// frames), without which an endpoint of version 3 would wait for credit from its peer forever.
inline constexpr uint8_t kFrameVersion = 3;
// Largest payload a single frame may carry; a header announcing more is treated as corrupt.
inline constexpr uint64_t kMaxFramePayloadBytes = uint64_t{1} << 30;
// The handshake frames' payloads are auth/handshake.h's: kMaxHelloAddressBytes,
// kHandshakeNonceBytes, kHandshakeProofBytes, kChallengePayloadBytes.
inline constexpr uint64_t kPingPayloadBytes = 8;
inline constexpr uint64_t kWriteDescriptorBytes = 40;
inline constexpr uint64_t kWriteAckPayloadBytes = 16;
// What a one-sided write costs on the wire besides its bytes: two frame headers and the
// descriptor.
inline constexpr uint64_t kWriteOverheadBytes = 2 * kFrameHeaderBytes + kWriteDescriptorBytes;
inline constexpr uint64_t kCreditPayloadBytes = 24;
inline constexpr uint64_t kClearToSendPayloadBytes = 8;
// Flags of FrameHeader's flags field.
inline constexpr uint16_t kFrameFlagChecksum = 0x0001;
inline constexpr size_t kFrameChecksumBytes = 4;
inline constexpr uint16_t kFrameFlagSealed = 0x0002;
inline constexpr uint16_t kFrameFlagAuthenticated = 0x0004;
inline constexpr size_t kSealedRecordBytes = size_t{256} << 10;
inline constexpr size_t kSealTagBytes = 16;

// The records a sealed or authenticated frame of `payload_bytes` has: one per started
// kSealedRecordBytes, and one if there is no payload.
constexpr uint64_t SealedRecords(uint64_t payload_bytes) {
  return payload_bytes == 0 ? 1 : (payload_bytes + kSealedRecordBytes - 1) / kSealedRecordBytes;
}

// A connection's Protection (auth/handshake.h) shows in its frames' flags: kNone, frames as they
// are (a data frame may carry a checksum); kAuthenticated, kFrameFlagAuthenticated;
// kSealed, kFrameFlagSealed.

enum class FrameType : uint8_t {
  kData = 1,
  kHello = 2,
  kPing = 3,
  kPong = 4,
  kChallenge = 5,
  kProof = 6,
  kWrite = 7,
  kWriteAck = 8,
  kCredit = 9,
  kClearToSend = 10,
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  Tag tag;
  uint64_t payload_bytes = 0;
  // kFrameFlagChecksum: the payload is followed by its CRC32C (data and write frames only).
  bool checksum = false;
  // kFrameFlagSealed: on data, ping and pong frames, the payload is sealed records; on a hello,
  // the connector asks for a sealed connection; on a challenge, the acceptor agrees.
  bool sealed = false;
  // kFrameFlagAuthenticated: the same for authenticated records (never with `sealed`).
  bool authenticated = false;

  // Which of the flags above is set.
  Protection protection() const {
    return sealed          ? Protection::kSealed
           : authenticated ? Protection::kAuthenticated
                           : Protection::kNone;
  }
  // The payload is records with tags (sealed or authenticated).
  bool in_records() const { return sealed || authenticated; }
  // Sets the flag of `protection`, clearing the other.
  void set_protection(Protection protection) {
    sealed = protection == Protection::kSealed;
    authenticated = protection == Protection::kAuthenticated;
  }

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

using FrameHeaderBytes = std::span<std::byte, kFrameHeaderBytes>;
using ConstFrameHeaderBytes = std::span<const std::byte, kFrameHeaderBytes>;
using FrameChecksumBytes = std::span<std::byte, kFrameChecksumBytes>;
using ConstFrameChecksumBytes = std::span<const std::byte, kFrameChecksumBytes>;

// Writes `header` in wire format (magic, version and flags included) into `out`.
void EncodeFrameHeader(const FrameHeader& header, FrameHeaderBytes out);

// Parses and validates a header. DataLoss when the magic, version or type are wrong, a flag is
// unknown, the checksum flag is set on a frame other than data or write or with the sealed or
// authenticated flag, the sealed and authenticated flags together or either on a proof frame, or
// the payload length is not
// what the frame type allows: at most kMaxFramePayloadBytes for data and write; a nonce and 1 to
// kMaxHelloAddressBytes of address for hello; exactly kPingPayloadBytes for ping and pong,
// kChallengePayloadBytes for challenge, kHandshakeProofBytes for proof, kWriteAckPayloadBytes
// for write ack, kCreditPayloadBytes for credit and kClearToSendPayloadBytes for clear-to-send.
absl::StatusOr<FrameHeader> DecodeFrameHeader(ConstFrameHeaderBytes in);

// The checksum trailer of a frame with kFrameFlagChecksum, in wire format and back.
void EncodeFrameChecksum(uint32_t crc, FrameChecksumBytes out);
uint32_t DecodeFrameChecksum(ConstFrameChecksumBytes in);

// The payload of a credit frame, and of a clear-to-send frame (the length), in wire format and
// back.
using CreditPayload = std::array<std::byte, kCreditPayloadBytes>;
using ClearToSendPayload = std::array<std::byte, kClearToSendPayloadBytes>;
CreditPayload EncodeCredit(const CreditGrant& grant);
CreditGrant DecodeCredit(const CreditPayload& payload);
ClearToSendPayload EncodeClearToSend(uint64_t length);
uint64_t DecodeClearToSend(const ClearToSendPayload& payload);

}  // namespace baton::transport
