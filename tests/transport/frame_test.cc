#include "transport/tcp/frame.h"

#include <array>
#include <cstddef>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::transport {
namespace {

using Bytes = std::array<std::byte, kFrameHeaderBytes>;

Bytes Encode(const FrameHeader& header) {
  Bytes bytes{};
  EncodeFrameHeader(header, bytes);
  return bytes;
}

TEST(FrameTest, HeaderIsFortyBytes) { EXPECT_EQ(kFrameHeaderBytes, 40u); }

TEST(FrameTest, RoundTrips) {
  const FrameHeader header{FrameType::kData,
                           Tag{.comm = 0xfedcba9876543210, .seq = 42, .step = 7, .part = 3},
                           123456789};
  absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(Encode(header));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, header);
}

TEST(FrameTest, WireLayoutIsLittleEndian) {
  const Bytes bytes = Encode(FrameHeader{FrameType::kHello,
                                         Tag{.comm = 0x0102030405060708,
                                             .seq = 0x1112131415161718,
                                             .step = 0x21222324,
                                             .part = 0x31323334},
                                         0x0000000000000345});
  const std::array<int, kFrameHeaderBytes> expected = {
      'B',  'T',  'N',  'F',  3,    2,    0,    0,     // magic, version, type, flags
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // comm
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // seq
      0x24, 0x23, 0x22, 0x21, 0x34, 0x33, 0x32, 0x31,  // step, part
      0x45, 0x03, 0,    0,    0,    0,    0,    0};    // payload_bytes
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
    EXPECT_EQ(static_cast<int>(bytes[i]), expected[i]) << "byte " << i;
  }
}

TEST(FrameTest, RejectsCorruptHeaders) {
  const Bytes good = Encode(FrameHeader{FrameType::kData, Tag{.comm = 1}, 10});
  struct Case {
    const char* name;
    size_t offset;
    std::byte value;
  };
  for (const Case& c : {Case{"magic", 0, std::byte{'X'}}, Case{"version", 4, std::byte{1}},
                        Case{"type", 5, std::byte{9}}, Case{"flags", 6, std::byte{8}}}) {
    Bytes bad = good;
    bad[c.offset] = c.value;
    absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(bad);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << c.name;
  }
}

// Bit 0 of the flags says that a data frame's payload is followed by its CRC32C; every bit beyond
// the three known ones, and the checksum bit on any other frame type, is corruption.
TEST(FrameTest, ChecksumFlagRoundTripsOnDataFramesOnly) {
  const FrameHeader checked{FrameType::kData, Tag{.comm = 5, .seq = 6}, 1000, /*checksum=*/true};
  const Bytes bytes = Encode(checked);
  EXPECT_EQ(static_cast<int>(bytes[6]), 1);
  EXPECT_EQ(static_cast<int>(bytes[7]), 0);
  absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->checksum);
  EXPECT_EQ(*decoded, checked);
  absl::StatusOr<FrameHeader> plain =
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kData, Tag{.comm = 5}, 1000}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->checksum);

  for (const uint16_t unknown :
       {uint16_t{0x0008}, uint16_t{0x0009}, uint16_t{0x0100}, uint16_t{0x8000}, uint16_t{0xffff}}) {
    Bytes bad = bytes;
    bad[6] = static_cast<std::byte>(unknown & 0xff);
    bad[7] = static_cast<std::byte>(unknown >> 8);
    absl::StatusOr<FrameHeader> rejected = DecodeFrameHeader(bad);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kDataLoss) << unknown;
    EXPECT_THAT(rejected.status().message(), ::testing::HasSubstr("unknown frame flags"))
        << unknown;
  }
  struct Control {
    FrameType type;
    uint64_t bytes;
  };
  for (const Control& control :
       {Control{FrameType::kHello, kHandshakeNonceBytes + 5},
        Control{FrameType::kPing, kPingPayloadBytes}, Control{FrameType::kPong, kPingPayloadBytes},
        Control{FrameType::kChallenge, kChallengePayloadBytes},
        Control{FrameType::kProof, kHandshakeProofBytes}}) {
    ASSERT_TRUE(DecodeFrameHeader(Encode(FrameHeader{control.type, Tag{}, control.bytes})).ok());
    absl::StatusOr<FrameHeader> rejected = DecodeFrameHeader(
        Encode(FrameHeader{control.type, Tag{}, control.bytes, /*checksum=*/true}));
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kDataLoss)
        << static_cast<int>(control.type);
    EXPECT_THAT(rejected.status().message(), ::testing::HasSubstr("checksum flag"));
  }
}

// Write frames carry a communicator's one-sided writes (up to a frame's limit, with or without a
// checksum); a write ack is exactly its identifier and answer, never checksummed.
TEST(FrameTest, WriteFramesAndTheirAcks) {
  const FrameHeader write{FrameType::kWrite, Tag{.comm = 9, .seq = 3, .step = 1}, 12345,
                          /*checksum=*/true};
  absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(Encode(write));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, write);
  EXPECT_EQ(
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kWrite, Tag{}, kMaxFramePayloadBytes + 1}))
          .status()
          .code(),
      absl::StatusCode::kDataLoss);
  EXPECT_TRUE(
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kWriteAck, Tag{}, kWriteAckPayloadBytes}))
          .ok());
  EXPECT_EQ(
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kWriteAck, Tag{}, kWriteAckPayloadBytes + 1}))
          .status()
          .code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeFrameHeader(Encode(FrameHeader{FrameType::kWriteAck, Tag{}, kWriteAckPayloadBytes,
                                                 /*checksum=*/true}))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

// Bit 1 says that a frame is sealed (data, ping, pong), that a connector asks for a sealed
// connection (hello) or that the acceptor agrees (challenge). A proof is never sealed, and a
// sealed frame never carries a checksum.
TEST(FrameTest, SealedFlagRoundTripsWhereItMeansSomething) {
  struct Kind {
    FrameType type;
    uint64_t bytes;
  };
  for (const Kind& kind :
       {Kind{FrameType::kData, 12345}, Kind{FrameType::kData, 0},
        Kind{FrameType::kHello, kHandshakeNonceBytes + 5},
        Kind{FrameType::kPing, kPingPayloadBytes}, Kind{FrameType::kPong, kPingPayloadBytes},
        Kind{FrameType::kChallenge, kChallengePayloadBytes}}) {
    const FrameHeader sealed{
        .type = kind.type, .tag = Tag{.comm = 9}, .payload_bytes = kind.bytes, .sealed = true};
    const Bytes bytes = Encode(sealed);
    EXPECT_EQ(static_cast<int>(bytes[6]), 2);
    absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, sealed);
  }
  absl::StatusOr<FrameHeader> proof =
      DecodeFrameHeader(Encode(FrameHeader{.type = FrameType::kProof,
                                           .tag = Tag{},
                                           .payload_bytes = kHandshakeProofBytes,
                                           .sealed = true}));
  EXPECT_EQ(proof.status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<FrameHeader> both = DecodeFrameHeader(Encode(FrameHeader{.type = FrameType::kData,
                                                                          .tag = Tag{},
                                                                          .payload_bytes = 10,
                                                                          .checksum = true,
                                                                          .sealed = true}));
  EXPECT_EQ(both.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(both.status().message(), ::testing::HasSubstr("checksum flag on a sealed frame"));
}

// Bit 2 says that a frame is authenticated (data, ping, pong), that a connector asks for at least
// an authenticated connection (hello) or that the acceptor agrees (challenge). A proof never is,
// an authenticated frame carries no checksum, and no frame is both sealed and authenticated.
TEST(FrameTest, AuthenticatedFlagRoundTripsWhereItMeansSomething) {
  struct Kind {
    FrameType type;
    uint64_t bytes;
  };
  for (const Kind& kind :
       {Kind{FrameType::kData, 12345}, Kind{FrameType::kData, 0},
        Kind{FrameType::kHello, kHandshakeNonceBytes + 5},
        Kind{FrameType::kPing, kPingPayloadBytes}, Kind{FrameType::kPong, kPingPayloadBytes},
        Kind{FrameType::kChallenge, kChallengePayloadBytes}}) {
    const FrameHeader authenticated{.type = kind.type,
                                    .tag = Tag{.comm = 9},
                                    .payload_bytes = kind.bytes,
                                    .authenticated = true};
    EXPECT_EQ(authenticated.protection(), Protection::kAuthenticated);
    EXPECT_TRUE(authenticated.in_records());
    const Bytes bytes = Encode(authenticated);
    EXPECT_EQ(static_cast<int>(bytes[6]), 4);
    EXPECT_EQ(static_cast<int>(bytes[7]), 0);
    absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, authenticated);
  }
  struct Refused {
    FrameHeader header;
    const char* why;
  };
  for (const Refused& refused : {
           Refused{FrameHeader{.type = FrameType::kProof,
          .tag = Tag{},
          .payload_bytes = kHandshakeProofBytes,
          .authenticated = true},
                   "authenticated flag on a handshake proof"},
           Refused{FrameHeader{.type = FrameType::kData,
           .tag = Tag{},
           .payload_bytes = 10,
           .checksum = true,
           .authenticated = true},
                   "checksum flag on an authenticated frame"},
           Refused{FrameHeader{.type = FrameType::kData,
           .tag = Tag{},
           .payload_bytes = 10,
           .sealed = true,
           .authenticated = true},
                   "sealed and authenticated flags on one frame"},
       }) {
    absl::StatusOr<FrameHeader> decoded = DecodeFrameHeader(Encode(refused.header));
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << refused.why;
    EXPECT_THAT(decoded.status().message(), ::testing::HasSubstr(refused.why));
  }
  // set_protection sets one flag and clears the other; Protection orders weakest first.
  FrameHeader header;
  header.set_protection(Protection::kSealed);
  EXPECT_TRUE(header.sealed && !header.authenticated);
  header.set_protection(Protection::kAuthenticated);
  EXPECT_TRUE(!header.sealed && header.authenticated);
  header.set_protection(Protection::kNone);
  EXPECT_FALSE(header.in_records());
  EXPECT_LT(Protection::kNone, Protection::kAuthenticated);
  EXPECT_LT(Protection::kAuthenticated, Protection::kSealed);
}

TEST(FrameTest, SealedRecordsAreOnePerStartedRecordAndOneForNothing) {
  EXPECT_EQ(SealedRecords(0), 1u);
  EXPECT_EQ(SealedRecords(1), 1u);
  EXPECT_EQ(SealedRecords(kSealedRecordBytes), 1u);
  EXPECT_EQ(SealedRecords(kSealedRecordBytes + 1), 2u);
  EXPECT_EQ(SealedRecords(kMaxFramePayloadBytes), kMaxFramePayloadBytes / kSealedRecordBytes);
}

TEST(FrameTest, ChecksumTrailerIsLittleEndian) {
  std::array<std::byte, kFrameChecksumBytes> trailer{};
  EncodeFrameChecksum(0xE3069283, trailer);
  EXPECT_EQ(static_cast<int>(trailer[0]), 0x83);
  EXPECT_EQ(static_cast<int>(trailer[1]), 0x92);
  EXPECT_EQ(static_cast<int>(trailer[2]), 0x06);
  EXPECT_EQ(static_cast<int>(trailer[3]), 0xE3);
  EXPECT_EQ(DecodeFrameChecksum(trailer), 0xE3069283u);
}

TEST(FrameTest, LimitsPayloadLength) {
  EXPECT_TRUE(
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kData, Tag{}, kMaxFramePayloadBytes})).ok());
  absl::StatusOr<FrameHeader> too_long =
      DecodeFrameHeader(Encode(FrameHeader{FrameType::kData, Tag{}, kMaxFramePayloadBytes + 1}));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(too_long.status().message(), ::testing::HasSubstr("1073741825"));

  // A hello holds a nonce and 1 to kMaxHelloAddressBytes of address.
  const uint64_t most_hello = kHandshakeNonceBytes + kMaxHelloAddressBytes;
  EXPECT_TRUE(DecodeFrameHeader(Encode(FrameHeader{FrameType::kHello, Tag{}, most_hello})).ok());
  for (const uint64_t wrong : {uint64_t{0}, kHandshakeNonceBytes, most_hello + 1}) {
    EXPECT_FALSE(DecodeFrameHeader(Encode(FrameHeader{FrameType::kHello, Tag{}, wrong})).ok())
        << wrong;
  }

  // The other control frames have one size each.
  struct Fixed {
    FrameType type;
    int wire_type;
    uint64_t bytes;
  };
  for (const Fixed& fixed : {Fixed{FrameType::kPing, 3, kPingPayloadBytes},
                             Fixed{FrameType::kPong, 4, kPingPayloadBytes},
                             Fixed{FrameType::kChallenge, 5, kChallengePayloadBytes},
                             Fixed{FrameType::kProof, 6, kHandshakeProofBytes}}) {
    absl::StatusOr<FrameHeader> decoded =
        DecodeFrameHeader(Encode(FrameHeader{fixed.type, Tag{}, fixed.bytes}));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->type, fixed.type);
    EXPECT_EQ(static_cast<int>(Encode(FrameHeader{fixed.type, Tag{}, fixed.bytes})[5]),
              fixed.wire_type);
    for (const uint64_t wrong : {uint64_t{0}, fixed.bytes - 1, fixed.bytes + 1}) {
      EXPECT_EQ(DecodeFrameHeader(Encode(FrameHeader{fixed.type, Tag{}, wrong})).status().code(),
                absl::StatusCode::kDataLoss)
          << fixed.wire_type << " " << wrong;
    }
  }
}

}  // namespace
}  // namespace baton::transport
