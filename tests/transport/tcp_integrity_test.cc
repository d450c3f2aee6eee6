// Authenticated connections on the TCP data plane (TcpOptions::authenticate; frame.h,
// kFrameFlagAuthenticated): which protection a connection gets, what goes on the wire (the
// payload in the clear, a tag per record), that every receive path delivers authenticated
// messages, and that whatever someone on the way does to the bytes (alter, replay, drop, reorder)
// fails the receive instead of delivering it. And the gap it closes: a man in the middle between
// two real endpoints rewrites a payload unnoticed when the connection is plain, even with
// checksums (he fixes the CRC32C), and cannot when it is authenticated.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/auth/handshake.h"
#include "transport/auth/record_cipher.h"
#include "transport/tcp/crc32c.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

TcpOptions OptionsFor(Protection protection, bool checksum = false) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.authenticate = protection == Protection::kAuthenticated;
  options.seal = protection == Protection::kSealed;
  options.checksum = checksum;
  return options;
}

std::unique_ptr<Endpoint> NewEndpoint(const TcpOptions& options) {
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

std::unique_ptr<Endpoint> NewEndpoint(Protection protection, bool checksum = false) {
  return NewEndpoint(OptionsFor(protection, checksum));
}

const std::vector<size_t> kSizes = {
    0, 1, 4097, size_t{64} << 10, kSealedRecordBytes, (size_t{1} << 20) + 7, (size_t{3} << 20) + 5};

// (sender asks, receiver asks): authenticated with the other end plain, authenticating or
// sealing; everything arrives either way, down every receive path, and the counters see the same
// bytes as on a plain link. The sender also asks for checksums, which records leave out.
class TcpIntegrityRoundTripTest
    : public ::testing::TestWithParam<std::tuple<Protection, Protection>> {};

TEST_P(TcpIntegrityRoundTripTest, EveryReceivePathDeliversTheSentBytes) {
  const auto [sender_asks, receiver_asks] = GetParam();
  std::unique_ptr<Endpoint> a = NewEndpoint(sender_asks, /*checksum=*/true);
  std::unique_ptr<Endpoint> b = NewEndpoint(receiver_asks);
  ASSERT_TRUE(a && b);
  uint64_t seq = 0;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  for (const size_t size : kSizes) {
    SCOPED_TRACE(absl::StrCat(size, " bytes"));
    ExpectEveryReceivePathDelivers(*a, *b, size, &seq);
    ExpectEveryReceivePathDelivers(*b, *a, size, &seq);
    messages += 3;
    bytes += 3 * (size + kFrameHeaderBytes);
  }
  // One SendAll of every size: small frames written together, large ones record by record.
  std::vector<std::vector<std::byte>> all_data;
  std::vector<OutMessage> all;
  for (const size_t size : kSizes) {
    all_data.push_back(Pattern(size, ++seq));
    all.push_back(OutMessage{Tag{.seq = seq}, all_data.back()});
    bytes += size + kFrameHeaderBytes;
  }
  ASSERT_TRUE(a->SendAll(b->address(), all, Deadline()).ok());
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<std::byte> into(kSizes[i]);
    ASSERT_TRUE(b->Recv(a->address(), all[i].tag, into, Deadline()).ok()) << i;
    EXPECT_TRUE(into == all_data[i]) << i;
  }
  messages += all.size();
  EXPECT_TRUE(a->RoundTrip(b->address(), Deadline()).ok());
  EXPECT_TRUE(b->RoundTrip(a->address(), Deadline()).ok());

  const LinkStats received = StatsFor(*b, a->address());
  EXPECT_EQ(received.rx_messages, messages);
  EXPECT_EQ(received.rx_bytes, bytes);
  EXPECT_EQ(received.Counter(kSealFailuresCounter), 0u);
  EXPECT_EQ(received.Counter(kChecksumFailuresCounter), 0u);
  EXPECT_EQ(received.errors, 0u);
  EXPECT_EQ(StatsFor(*a, b->address()).tx_bytes, bytes);
}

INSTANTIATE_TEST_SUITE_P(
    SenderAndReceiver, TcpIntegrityRoundTripTest,
    ::testing::Values(std::make_tuple(Protection::kAuthenticated, Protection::kAuthenticated),
                      std::make_tuple(Protection::kAuthenticated, Protection::kNone),
                      std::make_tuple(Protection::kNone, Protection::kAuthenticated),
                      std::make_tuple(Protection::kAuthenticated, Protection::kSealed),
                      std::make_tuple(Protection::kSealed, Protection::kAuthenticated)),
    [](const ::testing::TestParamInfo<std::tuple<Protection, Protection>>& info) {
      auto name = [](Protection p) {
        return p == Protection::kNone     ? "Plain"
               : p == Protection::kSealed ? "Seals"
                                          : "Authenticates";
      };
      return absl::StrCat(name(std::get<0>(info.param)), "To", name(std::get<1>(info.param)));
    });

// An authenticated frame as a raw peer writes it: header, then each record in the clear and its
// tag.
std::vector<std::byte> AuthenticateFrame(RecordCipher& seal, const FrameHeader& header,
                                         ConstByteSpan payload) {
  std::vector<std::byte> bytes(kFrameHeaderBytes);
  EncodeFrameHeader(header,
                    std::span<std::byte, kFrameHeaderBytes>(bytes.data(), kFrameHeaderBytes));
  const std::vector<std::byte> associated = bytes;
  for (uint64_t record = 0; record < SealedRecords(payload.size()); ++record) {
    const size_t offset = record * kSealedRecordBytes;
    const ConstByteSpan piece =
        payload.subspan(offset, std::min(kSealedRecordBytes, payload.size() - offset));
    seal.Begin(associated);
    seal.Authenticate(piece);
    absl::StatusOr<AeadTag> tag = seal.Seal();
    EXPECT_TRUE(tag.ok());
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    bytes.insert(bytes.end(), tag->begin(), tag->end());
  }
  return bytes;
}

std::vector<std::byte> AuthenticateData(RecordCipher& seal, const Tag& tag, ConstByteSpan payload) {
  return AuthenticateFrame(seal,
                           FrameHeader{.type = FrameType::kData,
                                       .tag = tag,
                                       .payload_bytes = payload.size(),
                                       .authenticated = true},
                           payload);
}

// Reads one authenticated frame off `fd` as the raw end of an authenticated connection: its
// header, its payload as it crossed the wire, and whether every record's tag checked.
struct RawFrame {
  FrameHeader header;
  std::vector<std::byte> payload;
  bool authentic = true;
};
RawFrame ReadAuthenticatedFrame(int fd, RecordCipher& open, size_t* wire_bytes) {
  std::array<std::byte, kFrameHeaderBytes> header_bytes;
  size_t read = 0;
  EXPECT_TRUE(ReadFull(fd, header_bytes, Deadline(absl::Seconds(10)), &read).ok());
  absl::StatusOr<FrameHeader> header = DecodeFrameHeader(header_bytes);
  EXPECT_TRUE(header.ok()) << header.status();
  RawFrame frame{header.ok() ? *header : FrameHeader{}, {}, true};
  frame.payload.resize(frame.header.payload_bytes);
  for (uint64_t record = 0; record < SealedRecords(frame.payload.size()); ++record) {
    const size_t offset = record * kSealedRecordBytes;
    const std::span<std::byte> piece =
        std::span(frame.payload)
            .subspan(offset, std::min(kSealedRecordBytes, frame.payload.size() - offset));
    AeadTag tag;
    EXPECT_TRUE(ReadFull(fd, piece, Deadline(absl::Seconds(10)), &read).ok());
    EXPECT_TRUE(ReadFull(fd, tag, Deadline(absl::Seconds(10)), &read).ok());
    open.Begin(header_bytes);
    open.Update(piece, piece.data());
    frame.authentic = open.Open(tag) && frame.authentic;
  }
  *wire_bytes += read;
  return frame;
}

// What an authenticating endpoint puts on the wire, read by a raw acceptor that asks for nothing:
// every frame (data and ping) is authenticated, never checksummed; each payload crosses as it is,
// record by record, each followed by a tag that checks, in order.
TEST(TcpIntegrityTest, PayloadsCrossInTheClearWithATagPerRecord) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(Protection::kAuthenticated, /*checksum=*/true);
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/true);
  const std::vector<std::byte> one = Pattern(1000, 1);
  const std::vector<std::byte> two = Pattern((size_t{1} << 20) + 300, 2);
  const std::vector<OutMessage> messages = {
      {Tag{.seq = 1}, one}, {Tag{.seq = 2}, {}}, {Tag{.seq = 3}, two}};
  auto sent = std::async(std::launch::async,
                         [&] { return endpoint->SendAll(peer.address, messages, Deadline()); });
  FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(conn.valid());
  absl::StatusOr<tcp::Admitted> admitted =
      tcp::Admit(conn.get(), peer.address, nullptr, Protection::kNone, Deadline());
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->sealed.has_value()) << "the endpoint asked for authentication";
  EXPECT_FALSE(admitted->sealed->open.encrypts());
  // Flow control: the raw peer grants credit, and the endpoint's first frame is its own credit.
  WriteRaw(conn.get(), AuthenticateFrame(admitted->sealed->seal,
                                         FrameHeader{.type = FrameType::kCredit,
                                                     .tag = Tag{},
                                                     .payload_bytes = kCreditPayloadBytes,
                                                     .authenticated = true},
                                         GenerousCredit()));
  size_t credit_wire = 0;
  EXPECT_EQ(ReadAuthenticatedFrame(conn.get(), admitted->sealed->open, &credit_wire).header.type,
            FrameType::kCredit);
  size_t wire = 0;
  for (const OutMessage& message : messages) {
    const RawFrame frame = ReadAuthenticatedFrame(conn.get(), admitted->sealed->open, &wire);
    EXPECT_TRUE(frame.header.authenticated);
    EXPECT_FALSE(frame.header.sealed);
    EXPECT_FALSE(frame.header.checksum);
    EXPECT_EQ(frame.header.tag, message.tag);
    EXPECT_TRUE(frame.authentic) << "a record's tag did not check";
    EXPECT_TRUE(std::equal(frame.payload.begin(), frame.payload.end(), message.data.begin(),
                           message.data.end()))
        << "the payload crossed altered";
  }
  ASSERT_TRUE(sent.get().ok());
  EXPECT_EQ(wire, 3 * kFrameHeaderBytes + one.size() + two.size() +
                      kSealTagBytes * (1 + 1 + SealedRecords(two.size())));
  auto ping = std::async(std::launch::async, [&] {
    return endpoint->RoundTrip(peer.address, Deadline(absl::Milliseconds(500)));
  });
  const RawFrame frame = ReadAuthenticatedFrame(conn.get(), admitted->sealed->open, &wire);
  EXPECT_EQ(frame.header.type, FrameType::kPing);
  EXPECT_TRUE(frame.header.authenticated);
  EXPECT_TRUE(frame.authentic);
  EXPECT_EQ(ping.get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

// Every pair of what an acceptor asks of all its connections and what a connector asks: the
// connection gets the stronger, and carries a message protected so.
TEST(TcpIntegrityTest, TheStrongestProtectionEitherEndAsksForWins) {
  const std::vector<Protection> all = {Protection::kNone, Protection::kAuthenticated,
                                       Protection::kSealed};
  for (const Protection acceptor_asks : all) {
    std::unique_ptr<Endpoint> endpoint = NewEndpoint(acceptor_asks);
    ASSERT_NE(endpoint, nullptr);
    for (const Protection connector_asks : all) {
      const std::string peer = absl::StrCat("raw-peer-", static_cast<int>(connector_asks), ":1");
      SCOPED_TRACE(absl::StrCat("acceptor ", ProtectionName(acceptor_asks), ", connector ",
                                ProtectionName(connector_asks)));
      const Protection expected = std::max(acceptor_asks, connector_asks);
      FileDescriptor raw = RawConnect(endpoint->address());
      absl::StatusOr<std::optional<tcp::SealedStream>> stream =
          tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey, connector_asks,
                         Deadline(), [] { return false; });
      ASSERT_TRUE(stream.ok()) << stream.status();
      ASSERT_EQ(stream->has_value(), expected != Protection::kNone);
      const std::vector<std::byte> data = Pattern(777, 3);
      if (expected == Protection::kNone) {
        WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, data.size()}, data);
      } else {
        RecordCipher& seal = (*stream)->seal;
        EXPECT_EQ(seal.encrypts(), expected == Protection::kSealed);
        EXPECT_EQ((*stream)->open.encrypts(), expected == Protection::kSealed);
        if (expected == Protection::kAuthenticated) {
          WriteRaw(raw.get(), AuthenticateData(seal, Tag{.seq = 1}, data));
        } else {
          FrameHeader header{.type = FrameType::kData,
                             .tag = Tag{.seq = 1},
                             .payload_bytes = data.size(),
                             .sealed = true};
          std::vector<std::byte> frame(kFrameHeaderBytes + data.size() + kSealTagBytes);
          EncodeFrameHeader(
              header, std::span<std::byte, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
          seal.Begin(std::span(frame).first(kFrameHeaderBytes));
          seal.Update(data, frame.data() + kFrameHeaderBytes);
          absl::StatusOr<AeadTag> tag = seal.Seal();
          ASSERT_TRUE(tag.ok());
          std::copy(tag->begin(), tag->end(), frame.end() - kSealTagBytes);
          WriteRaw(raw.get(), frame);
        }
      }
      std::vector<std::byte> into(data.size());
      ASSERT_TRUE(endpoint->Recv(peer, Tag{.seq = 1}, into, Deadline()).ok());
      EXPECT_TRUE(into == data);
    }
  }
}

// Writes an attacked frame: the endpoint may close the connection before it has all of it.
void WriteUntilClosed(int fd, ConstByteSpan bytes) {
  std::array<iovec, 1> iov{iovec{const_cast<std::byte*>(bytes.data()), bytes.size()}};
  size_t written = 0;
  (void)WriteFull(fd, iov, Deadline(), &written);
}

enum class Path { kPosted, kUnexpected, kConsumed };
enum class Attack {
  kFlipPayload,  // a byte of a record's payload changed
  kFlipTag,      // a byte of a record's tag changed
  kFlipHeader,   // a byte of the header (here: the step) changed
  kReplay,       // the previous frame's bytes again
  kDrop,         // a frame left out: the next one's records have the wrong numbers
  kReorder,      // the next two frames swapped
};

// A raw peer on an authenticated connection sends a good frame, then an attacked one: the good
// frame arrives; the attacked one never does. Its receive fails with DataLoss naming the peer,
// the connection closes, and the link counts one seal failure and one error. A consumer was
// handed nothing of the attacked message past the records that checked.
TEST(TcpIntegrityTest, AnAlteredReplayedDroppedOrReorderedFrameIsNeverDelivered) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(Protection::kNone);
  ASSERT_NE(endpoint, nullptr);
  struct Case {
    Path path;
    size_t size;
    Attack attack;
  };
  const size_t large = (size_t{1} << 20) + 3;
  const std::vector<Case> cases = {
      {Path::kPosted, 100, Attack::kFlipPayload},   {Path::kPosted, large, Attack::kFlipPayload},
      {Path::kPosted, large, Attack::kFlipTag},     {Path::kPosted, 100, Attack::kFlipHeader},
      {Path::kPosted, 100, Attack::kReplay},        {Path::kPosted, large, Attack::kDrop},
      {Path::kPosted, 100, Attack::kReorder},       {Path::kUnexpected, 100, Attack::kFlipPayload},
      {Path::kUnexpected, large, Attack::kReplay},  {Path::kUnexpected, 0, Attack::kFlipHeader},
      {Path::kUnexpected, large, Attack::kReorder}, {Path::kConsumed, large, Attack::kFlipPayload},
      {Path::kConsumed, 100, Attack::kDrop},        {Path::kConsumed, large, Attack::kFlipTag},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string peer = absl::StrCat("attacked-peer-", i, ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    absl::StatusOr<std::optional<tcp::SealedStream>> stream =
        tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey,
                       Protection::kAuthenticated, Deadline(), [] { return false; });
    ASSERT_TRUE(stream.ok() && stream->has_value()) << stream.status();
    RecordCipher& seal = (*stream)->seal;
    ASSERT_FALSE(seal.encrypts());
    const std::vector<std::string> members = {peer};
    endpoint->Restrict(4, members);

    const std::vector<std::byte> good = Pattern(c.size, 2 * i);
    const std::vector<std::byte> good_frame =
        AuthenticateData(seal, Tag{.comm = 4, .seq = 1}, good);
    WriteRaw(raw.get(), good_frame);
    std::vector<std::byte> good_into(c.size);
    ASSERT_TRUE(endpoint->Recv(peer, Tag{.comm = 4, .seq = 1}, good_into, Deadline()).ok());
    EXPECT_TRUE(good_into == good);

    const Tag tag{.comm = 4, .seq = 2, .step = 3, .part = 1};
    const std::vector<std::byte> payload = Pattern(c.size, 2 * i + 1);
    std::vector<std::byte> bad;
    switch (c.attack) {
      case Attack::kFlipPayload:
        bad = AuthenticateData(seal, tag, payload);
        bad[kFrameHeaderBytes + c.size / 2] ^= std::byte{0x04};
        break;
      case Attack::kFlipTag:
        bad = AuthenticateData(seal, tag, payload);
        bad.back() ^= std::byte{0x01};
        break;
      case Attack::kFlipHeader:
        bad = AuthenticateData(seal, Tag{.comm = 4, .seq = 2, .step = 2, .part = 1}, payload);
        bad[24] ^= std::byte{0x01};  // the step, 2 -> 3: the header the receive waits for
        break;
      case Attack::kReplay:
        bad = good_frame;
        break;
      case Attack::kDrop:
        (void)AuthenticateData(seal, Tag{.comm = 4, .seq = 9}, Pattern(10, 1));  // never sent
        bad = AuthenticateData(seal, tag, payload);
        break;
      case Attack::kReorder: {
        // The frame for seq 9 was authenticated first but arrives second.
        const std::vector<std::byte> earlier =
            AuthenticateData(seal, Tag{.comm = 4, .seq = 9}, Pattern(10, 1));
        bad = AuthenticateData(seal, tag, payload);
        bad.insert(bad.end(), earlier.begin(), earlier.end());
        break;
      }
    }
    // A replayed frame carries its own tag: receive that one.
    const Tag receive_tag = c.attack == Attack::kReplay ? Tag{.comm = 4, .seq = 1} : tag;
    std::vector<std::byte> into(c.size);
    size_t consumed_bytes = 0;
    absl::Status status;
    switch (c.path) {
      case Path::kPosted: {
        std::unique_ptr<PostedRecv> posted =
            endpoint->PostRecv(peer, receive_tag, into, Deadline(), nullptr);
        WriteUntilClosed(raw.get(), bad);
        status = posted->Wait();
        break;
      }
      case Path::kUnexpected:
        WriteUntilClosed(raw.get(), bad);
        ASSERT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
        status = endpoint->Recv(peer, receive_tag, into, Deadline());
        break;
      case Path::kConsumed: {
        std::unique_ptr<PostedRecv> consumed = endpoint->PostConsume(
            peer, receive_tag, c.size, Deadline(),
            [&consumed_bytes](size_t, ConstByteSpan piece) { consumed_bytes += piece.size(); });
        WriteUntilClosed(raw.get(), bad);
        status = consumed->Wait();
        break;
      }
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr("an authenticated message from peer " + peer));
    EXPECT_THAT(status.message(), HasSubstr("did not open"));
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
    if (c.path == Path::kConsumed) {
      const size_t checked =
          c.attack == Attack::kFlipPayload
              ? (c.size / 2) / (kSealedRecordBytes + kSealTagBytes) * kSealedRecordBytes
          : c.attack == Attack::kFlipTag ? (SealedRecords(c.size) - 1) * kSealedRecordBytes
                                         : 0;
      EXPECT_EQ(consumed_bytes, checked);
    }
    const LinkStats link = StatsFor(*endpoint, peer);
    EXPECT_EQ(link.Counter(kSealFailuresCounter), 1u);
    EXPECT_EQ(link.errors, 1u);
    EXPECT_EQ(link.rx_messages, 1u) << "only the good message counts";
  }
}

// Frames that do not match an authenticated connection, and authenticated frames on connections
// that are not: plain or sealed frames slipped into an authenticated one (someone inserting their
// own), authenticated ones into a plain one. None is delivered; the connection closes.
TEST(TcpIntegrityTest, AFrameThatDoesNotMatchTheConnectionClosesIt) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(Protection::kNone);
  ASSERT_NE(endpoint, nullptr);
  struct Case {
    Protection connection;
    Protection frame;
  };
  for (const Case& c : {Case{Protection::kAuthenticated, Protection::kNone},
                        Case{Protection::kAuthenticated, Protection::kSealed},
                        Case{Protection::kNone, Protection::kAuthenticated},
                        Case{Protection::kSealed, Protection::kAuthenticated}}) {
    const std::string peer = absl::StrCat("mismatched-peer-", static_cast<int>(c.connection),
                                          static_cast<int>(c.frame), ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    absl::StatusOr<std::optional<tcp::SealedStream>> stream =
        tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey, c.connection,
                       Deadline(), [] { return false; });
    ASSERT_TRUE(stream.ok()) << stream.status();
    const std::vector<std::byte> data = Pattern(64, 7);
    std::vector<std::byte> into(data.size());
    std::unique_ptr<PostedRecv> posted =
        endpoint->PostRecv(peer, Tag{.seq = 1}, into, Deadline(absl::Seconds(2)), nullptr);
    // A frame with the connection's own records but another flag, or another flag altogether.
    absl::StatusOr<RecordCipher> own =
        RecordCipher::Create(RecordSecret{}, RecordCipher::Mode::kSeal,
                             RecordCipher::kRecordsPerKey, RecordCipher::Payload::kClear);
    ASSERT_TRUE(own.ok());
    RecordCipher& seal = stream->has_value() ? (*stream)->seal : *own;
    FrameHeader header{FrameType::kData, Tag{.seq = 1}, data.size()};
    header.set_protection(c.frame);
    if (c.frame == Protection::kNone) {
      WriteFrame(raw.get(), header, data);
    } else {
      WriteRaw(raw.get(), AuthenticateFrame(seal, header, data));
    }
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
    EXPECT_FALSE(posted->Wait().ok());
    EXPECT_EQ(StatsFor(*endpoint, peer).rx_messages, 0u);
    EXPECT_EQ(StatsFor(*endpoint, peer).errors, 1u);
  }
}

// Someone on the way weakens the hello's request (authenticated to nothing, sealed to
// authenticated): the acceptor honestly answers with the weaker connection, and the endpoint that
// asked refuses it before it sends anything.
TEST(TcpIntegrityTest, NobodyOnTheWayCanWeakenTheProtection) {
  for (const Protection asks : {Protection::kAuthenticated, Protection::kSealed}) {
    SCOPED_TRACE(ProtectionName(asks));
    const Protection weakened =
        asks == Protection::kSealed ? Protection::kAuthenticated : Protection::kNone;
    std::unique_ptr<Endpoint> endpoint = NewEndpoint(asks);
    ASSERT_NE(endpoint, nullptr);
    RawListener peer = BindLoopback(/*listening=*/true);
    const std::vector<std::byte> data = Pattern(100, 8);
    auto sent = std::async(std::launch::async, [&] {
      return endpoint->Send(peer.address, Tag{.seq = 1}, data, Deadline(absl::Seconds(10)));
    });
    FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(conn.valid());
    const FrameHeader hello_header = ReadHeader(conn.get());
    EXPECT_EQ(hello_header.type, FrameType::kHello);
    EXPECT_EQ(hello_header.protection(), asks);
    const std::string hello_payload = ReadString(conn.get(), hello_header.payload_bytes);
    absl::StatusOr<Hello> hello = DecodeHello(std::as_bytes(std::span(hello_payload)));
    ASSERT_TRUE(hello.ok()) << hello.status();
    const HandshakeNonce nonce = NewHandshakeNonce();
    const HandshakeTranscript transcript{hello->nonce,
                                         nonce,
                                         hello->address,
                                         peer.address,
                                         weakened == Protection::kSealed,
                                         weakened == Protection::kAuthenticated};
    const auto challenge =
        EncodeChallenge(Challenge{nonce, AcceptorProof(kNoHandshakeKey, transcript)});
    FrameHeader challenge_header{FrameType::kChallenge, Tag{}, challenge.size()};
    challenge_header.set_protection(weakened);
    WriteFrame(conn.get(), challenge_header, challenge);
    const absl::Status status = sent.get();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(" though this endpoint asked for a ",
                                                         ProtectionName(asks))));
    EXPECT_TRUE(ClosedWithin(conn.get(), absl::Seconds(10)));
  }
}

// A man in the middle of one TCP connection: the listener at `address` (a port on 127.0.0.1 equal
// to the real receiver's port on 127.0.0.2, so that both ends' handshakes name the same address)
// relays everything between the first connection it accepts and `target`, except that it rewrites
// byte `offset` of the first data frame's payload, and, when that frame carries a CRC32C, the
// CRC32C to match, as a deliberate attacker would. He cannot mend a record's tag.
class Interceptor {
 public:
  static std::unique_ptr<Interceptor> Listen(const std::string& address, const std::string& target,
                                             size_t offset) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(PortOf(address)));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd.get(), 4) != 0) {
      return nullptr;  // that port is taken on 127.0.0.1: the caller tries another
    }
    return std::unique_ptr<Interceptor>(new Interceptor(std::move(fd), target, offset));
  }

  ~Interceptor() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      for (const int fd : {from_, to_}) {
        if (fd >= 0) shutdown(fd, SHUT_RDWR);
      }
    }
    thread_.join();
  }

  // Whether a payload byte was rewritten.
  bool rewrote() const { return rewrote_; }

 private:
  Interceptor(FileDescriptor listener, std::string target, size_t offset)
      : listener_(std::move(listener)), target_(std::move(target)), offset_(offset) {
    thread_ = std::thread([this] { Run(); });
  }

  void Run() {
    pollfd pfd{listener_.get(), POLLIN, 0};
    while (!stop_ && poll(&pfd, 1, 50) == 0) {
    }
    if (stop_) return;
    FileDescriptor from(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(PortOf(target_)));
    inet_pton(AF_INET, target_.substr(0, target_.rfind(':')).c_str(), &addr.sin_addr);
    FileDescriptor to(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!from.valid() || connect(to.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      from_ = from.get();
      to_ = to.get();
    }
    std::thread back([this, &from, &to] { Relay(to.get(), from.get()); });
    Forward(from.get(), to.get());
    back.join();
  }

  // Copies what arrives on `in` to `out` until either ends.
  void Relay(int in, int out) {
    std::vector<std::byte> buffer(size_t{64} << 10);
    while (!stop_) {
      pollfd pfd{in, POLLIN, 0};
      if (poll(&pfd, 1, 50) == 0) continue;
      const ssize_t n = recv(in, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      std::array<iovec, 1> iov{iovec{buffer.data(), static_cast<size_t>(n)}};
      size_t written = 0;
      if (!WriteFull(out, iov, Deadline(), &written).ok()) break;
    }
    shutdown(out, SHUT_RDWR);
  }

  // Reads `bytes` off `fd` and appends them to `frame`.
  bool Take(int fd, size_t bytes, std::vector<std::byte>& frame) {
    const size_t at = frame.size();
    frame.resize(at + bytes);
    size_t read = 0;
    return ReadFull(
               fd, std::span(frame).subspan(at), Deadline(), [this] { return stop_.load(); }, &read)
        .ok();
  }

  // The connector's side: the hello and proof as they are; the first data frame whole, rewritten;
  // the rest as it comes.
  void Forward(int from, int to) {
    while (!stop_) {
      std::vector<std::byte> frame;
      if (!Take(from, kFrameHeaderBytes, frame)) break;
      absl::StatusOr<FrameHeader> header = DecodeFrameHeader(
          std::span<const std::byte, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
      if (!header.ok()) break;
      // (On a hello, a protection flag is a request, not records.)
      const bool data = header->type == FrameType::kData;
      const bool handshake = header->type == FrameType::kHello ||
                             header->type == FrameType::kChallenge ||
                             header->type == FrameType::kProof;
      const size_t trailer = handshake          ? 0
                             : header->checksum ? kFrameChecksumBytes
                             : header->in_records()
                                 ? kSealTagBytes * SealedRecords(header->payload_bytes)
                                 : 0;
      if (!Take(from, header->payload_bytes + trailer, frame)) break;
      if (data && offset_ < header->payload_bytes) {
        // (offset_ < kSealedRecordBytes: in the first record, right after the header.)
        frame[kFrameHeaderBytes + offset_] ^= std::byte{0x5a};
        if (header->checksum) {
          const uint32_t crc =
              Crc32c(0, std::span(frame).subspan(kFrameHeaderBytes, header->payload_bytes));
          EncodeFrameChecksum(crc, std::span<std::byte, kFrameChecksumBytes>(
                                       frame.data() + kFrameHeaderBytes + header->payload_bytes,
                                       kFrameChecksumBytes));
        }
        rewrote_ = true;
      }
      std::array<iovec, 1> iov{iovec{frame.data(), frame.size()}};
      size_t written = 0;
      if (!WriteFull(to, iov, Deadline(), &written).ok()) break;
      if (data) break;
    }
    Relay(from, to);
  }

  const FileDescriptor listener_;
  const std::string target_;
  const size_t offset_;
  absl::Mutex mu_;
  // The relayed connection's two sockets (owned by Run), for the destructor to shut down.
  int from_ ABSL_GUARDED_BY(mu_) = -1;
  int to_ ABSL_GUARDED_BY(mu_) = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> rewrote_{false};
  std::thread thread_;
};

// Two real endpoints with a man in the middle of their connection who rewrites one byte of a
// 4 KiB message. Plain, the receiver gets the altered bytes and no error; with checksums too, since
// he mends the CRC32C; authenticated (by the sender's choice or the receiver's), the receive fails
// with DataLoss naming the sender and the link counts a seal failure.
TEST(TcpIntegrityTest, AManInTheMiddleRewritesPayloadsUnlessTheyAreAuthenticated) {
  struct Case {
    const char* name;
    Protection sender;
    bool checksum;
    Protection receiver;
  };
  for (const Case& c :
       {Case{"plain", Protection::kNone, false, Protection::kNone},
        Case{"checksummed", Protection::kNone, true, Protection::kNone},
        Case{"sender authenticates", Protection::kAuthenticated, false, Protection::kNone},
        Case{"receiver authenticates", Protection::kNone, true, Protection::kAuthenticated}}) {
    SCOPED_TRACE(c.name);
    // The receiver listens on 127.0.0.2 and calls itself 127.0.0.1:<its port>, where the
    // interceptor listens (if that port is free on 127.0.0.1; else another try).
    std::unique_ptr<Endpoint> receiver;
    std::unique_ptr<Interceptor> interceptor;
    constexpr size_t kOffset = 1234;
    for (int attempt = 0; attempt < 20 && interceptor == nullptr; ++attempt) {
      TcpOptions options = OptionsFor(c.receiver);
      options.listen_address = "127.0.0.2:0";
      options.advertise_host = "127.0.0.1";
      receiver = NewEndpoint(options);
      ASSERT_NE(receiver, nullptr);
      interceptor = Interceptor::Listen(
          receiver->address(), absl::StrCat("127.0.0.2:", PortOf(receiver->address())), kOffset);
    }
    ASSERT_NE(interceptor, nullptr) << "no port free on both 127.0.0.1 and 127.0.0.2";
    std::unique_ptr<Endpoint> sender = NewEndpoint(c.sender, c.checksum);
    ASSERT_NE(sender, nullptr);

    const std::vector<std::byte> data = Pattern(4096, 11);
    std::vector<std::byte> into(data.size());
    const Tag tag{.comm = 1, .seq = 1};
    std::unique_ptr<PostedRecv> posted =
        receiver->PostRecv(sender->address(), tag, into, Deadline(), nullptr);
    ASSERT_TRUE(sender->Send(receiver->address(), tag, data, Deadline()).ok());
    const absl::Status received = posted->Wait();
    EXPECT_TRUE(interceptor->rewrote());
    const LinkStats link = StatsFor(*receiver, sender->address());
    if (c.sender == Protection::kNone && c.receiver == Protection::kNone) {
      // The gap: wrong data, delivered as right.
      EXPECT_TRUE(received.ok()) << received;
      ASSERT_EQ(into.size(), data.size());
      for (size_t i = 0; i < data.size(); ++i) {
        if (i == kOffset) {
          EXPECT_EQ(into[i], data[i] ^ std::byte{0x5a});
        } else {
          ASSERT_EQ(into[i], data[i]) << "byte " << i;
        }
      }
      EXPECT_EQ(link.Counter(kChecksumFailuresCounter), 0u);
      EXPECT_EQ(link.errors, 0u);
    } else {
      EXPECT_EQ(received.code(), absl::StatusCode::kDataLoss) << received;
      EXPECT_THAT(received.message(),
                  HasSubstr("an authenticated message from peer " + sender->address()));
      EXPECT_EQ(link.Counter(kSealFailuresCounter), 1u);
    }
    sender.reset();  // the interceptor's relays end with the connection
    interceptor.reset();
  }
}

}  // namespace
}  // namespace baton::transport
