// Sealed connections on the TCP data plane (TcpOptions::seal; frame.h, kFrameFlagSealed): who
// seals, what goes on the wire (nothing of the payload in the clear), that every receive path
// delivers sealed messages, and that whatever someone on the way does to the bytes (alter,
// replay, drop, insert, or turn sealing off in the handshake) fails the receive or the connection
// instead of delivering anything.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/auth/handshake.h"
#include "transport/auth/record_cipher.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Endpoint> NewEndpoint(bool seal, bool checksum = false) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.seal = seal;
  options.checksum = checksum;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Every way a payload is read: none, a few bytes, within the read-ahead and beyond it, exactly one
// record, and several records ending mid-record.
const std::vector<size_t> kSizes = {
    0, 1, 4097, size_t{64} << 10, kSealedRecordBytes, (size_t{1} << 20) + 7, (size_t{3} << 20) + 5};

// (sender seals, receiver seals): a connection is sealed if either side seals, and everything
// arrives either way. The sender also sends checksums, which a sealed connection leaves out.
class TcpSealRoundTripTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(TcpSealRoundTripTest, EveryReceivePathDeliversTheSentBytes) {
  const auto [sender_seals, receiver_seals] = GetParam();
  std::unique_ptr<Endpoint> a = NewEndpoint(sender_seals, /*checksum=*/true);
  std::unique_ptr<Endpoint> b = NewEndpoint(receiver_seals);
  ASSERT_TRUE(a && b);
  uint64_t seq = 0;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  for (const size_t size : kSizes) {
    SCOPED_TRACE(absl::StrCat(size, " bytes"));
    ExpectEveryReceivePathDelivers(*a, *b, size, &seq);
    ExpectEveryReceivePathDelivers(*b, *a, size, &seq);  // back, on the same connection
    messages += 3;
    bytes += 3 * (size + kFrameHeaderBytes);
  }
  // One SendAll of every size: small frames sealed together, large ones record by record.
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
  // Pings and pongs too.
  EXPECT_TRUE(a->RoundTrip(b->address(), Deadline()).ok());
  EXPECT_TRUE(b->RoundTrip(a->address(), Deadline()).ok());

  // The counters do not see the seal: the same bytes as on an unsealed link.
  const LinkStats received = StatsFor(*b, a->address());
  EXPECT_EQ(received.rx_messages, messages);
  EXPECT_EQ(received.rx_bytes, bytes);
  EXPECT_EQ(received.Counter(kSealFailuresCounter), 0u);
  EXPECT_EQ(received.Counter(kChecksumFailuresCounter), 0u);
  EXPECT_EQ(received.errors, 0u);
  EXPECT_EQ(StatsFor(*a, b->address()).tx_bytes, bytes);
}

INSTANTIATE_TEST_SUITE_P(SenderAndReceiver, TcpSealRoundTripTest,
                         ::testing::Values(std::make_tuple(true, true),
                                           std::make_tuple(true, false),
                                           std::make_tuple(false, true)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return absl::StrCat(std::get<0>(info.param) ? "Seals" : "Plain", "To",
                                               std::get<1>(info.param) ? "Seals" : "Plain");
                         });

// Reads one sealed frame off `fd` as the raw end of a sealed connection: its header and the
// opened payload, or nothing if a record did not open. `wire` gets every byte read.
struct RawFrame {
  FrameHeader header;
  std::optional<std::vector<std::byte>> payload;
};
RawFrame ReadSealedFrame(int fd, RecordCipher& open, std::string* wire) {
  std::array<std::byte, kFrameHeaderBytes> header_bytes;
  size_t read = 0;
  EXPECT_TRUE(ReadFull(fd, header_bytes, Deadline(absl::Seconds(10)), &read).ok());
  wire->append(reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size());
  absl::StatusOr<FrameHeader> header = DecodeFrameHeader(header_bytes);
  EXPECT_TRUE(header.ok()) << header.status();
  RawFrame frame{header.ok() ? *header : FrameHeader{}, std::vector<std::byte>()};
  std::vector<std::byte>& payload = *frame.payload;
  payload.resize(frame.header.payload_bytes);
  bool opened = true;
  for (uint64_t record = 0; record < SealedRecords(payload.size()); ++record) {
    const size_t offset = record * kSealedRecordBytes;
    const std::span<std::byte> piece =
        std::span(payload).subspan(offset, std::min(kSealedRecordBytes, payload.size() - offset));
    AeadTag tag;
    EXPECT_TRUE(ReadFull(fd, piece, Deadline(absl::Seconds(10)), &read).ok());
    EXPECT_TRUE(ReadFull(fd, tag, Deadline(absl::Seconds(10)), &read).ok());
    wire->append(reinterpret_cast<const char*>(piece.data()), piece.size());
    wire->append(reinterpret_cast<const char*>(tag.data()), tag.size());
    open.Begin(header_bytes);
    open.Update(piece, piece.data());
    opened = open.Open(tag) && opened;
  }
  if (!opened) frame.payload.reset();
  return frame;
}

// A sealed frame as a raw peer writes it: header, then each record and its tag.
std::vector<std::byte> SealFrame(RecordCipher& seal, const FrameHeader& header,
                                 ConstByteSpan payload) {
  std::vector<std::byte> bytes(kFrameHeaderBytes);
  EncodeFrameHeader(header,
                    std::span<std::byte, kFrameHeaderBytes>(bytes.data(), kFrameHeaderBytes));
  const std::vector<std::byte> associated = bytes;
  for (uint64_t record = 0; record < SealedRecords(payload.size()); ++record) {
    const size_t offset = record * kSealedRecordBytes;
    const ConstByteSpan piece =
        payload.subspan(offset, std::min(kSealedRecordBytes, payload.size() - offset));
    const size_t at = bytes.size();
    bytes.resize(at + piece.size());
    seal.Begin(associated);
    seal.Update(piece, bytes.data() + at);
    absl::StatusOr<AeadTag> tag = seal.Seal();
    EXPECT_TRUE(tag.ok());
    bytes.insert(bytes.end(), tag->begin(), tag->end());
  }
  return bytes;
}

std::vector<std::byte> SealData(RecordCipher& seal, const Tag& tag, ConstByteSpan payload) {
  return SealFrame(
      seal,
      FrameHeader{
          .type = FrameType::kData, .tag = tag, .payload_bytes = payload.size(), .sealed = true},
      payload);
}

// What a sealing endpoint puts on the wire, read by a raw acceptor that does not ask for a seal:
// the endpoint asked, so the connection is sealed; every frame (data and ping) is; the payload's
// bytes appear nowhere on the wire; and the records open, in order, to the payload.
TEST(TcpSealTest, NothingOfThePayloadCrossesTheWireInTheClear) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/true);
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
      tcp::Admit(conn.get(), peer.address, nullptr, /*seal=*/false, Deadline());
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->peer, endpoint->address());
  ASSERT_TRUE(admitted->sealed.has_value()) << "the endpoint asked for a sealed connection";
  // Flow control: the raw peer grants credit, and the endpoint's first frame is its own credit.
  WriteRaw(conn.get(), SealFrame(admitted->sealed->seal,
                                 FrameHeader{.type = FrameType::kCredit,
                                             .tag = Tag{},
                                             .payload_bytes = kCreditPayloadBytes,
                                             .sealed = true},
                                 GenerousCredit()));
  std::string credit_wire;
  EXPECT_EQ(ReadSealedFrame(conn.get(), admitted->sealed->open, &credit_wire).header.type,
            FrameType::kCredit);
  std::string wire;
  for (const OutMessage& message : messages) {
    const RawFrame frame = ReadSealedFrame(conn.get(), admitted->sealed->open, &wire);
    EXPECT_TRUE(frame.header.sealed);
    EXPECT_FALSE(frame.header.checksum);
    EXPECT_EQ(frame.header.tag, message.tag);
    ASSERT_TRUE(frame.payload.has_value()) << "a record did not open";
    EXPECT_TRUE(std::equal(frame.payload->begin(), frame.payload->end(), message.data.begin(),
                           message.data.end()));
  }
  ASSERT_TRUE(sent.get().ok());
  EXPECT_EQ(wire.size(), 3 * kFrameHeaderBytes + one.size() + two.size() +
                             kSealTagBytes * (1 + 1 + SealedRecords(two.size())));
  // No 32-byte run of either payload appears in what crossed the wire.
  for (const std::vector<std::byte>* payload : {&one, &two}) {
    for (size_t at = 0; at + 32 <= payload->size(); at += 4096) {
      const std::string run(reinterpret_cast<const char*>(payload->data()) + at, 32);
      EXPECT_EQ(wire.find(run), std::string::npos) << "plaintext at payload offset " << at;
    }
  }
  // A ping is sealed too.
  auto ping = std::async(std::launch::async, [&] {
    return endpoint->RoundTrip(peer.address, Deadline(absl::Milliseconds(500)));
  });
  const RawFrame frame = ReadSealedFrame(conn.get(), admitted->sealed->open, &wire);
  EXPECT_EQ(frame.header.type, FrameType::kPing);
  EXPECT_TRUE(frame.header.sealed);
  EXPECT_TRUE(frame.payload.has_value());
  EXPECT_EQ(ping.get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

// An endpoint that seals seals a connection whose connector did not ask; one that does not seal
// still seals when asked.
TEST(TcpSealTest, TheAcceptorSealsWhenEitherSideSeals) {
  for (const bool acceptor_seals : {true, false}) {
    for (const bool connector_asks : {true, false}) {
      SCOPED_TRACE(
          absl::StrCat("acceptor seals ", acceptor_seals, ", connector asks ", connector_asks));
      std::unique_ptr<Endpoint> endpoint = NewEndpoint(acceptor_seals);
      ASSERT_NE(endpoint, nullptr);
      FileDescriptor raw = RawConnect(endpoint->address());
      absl::StatusOr<std::optional<tcp::SealedStream>> sealed =
          tcp::Introduce(raw.get(), "raw-peer:1", endpoint->address(), kNoHandshakeKey,
                         connector_asks, Deadline(), [] { return false; });
      ASSERT_TRUE(sealed.ok()) << sealed.status();
      EXPECT_EQ(sealed->has_value(), acceptor_seals || connector_asks);
      // Either way the connection carries a message, sealed or not as agreed.
      const std::vector<std::byte> data = Pattern(777, 3);
      if (sealed->has_value()) {
        WriteRaw(raw.get(), SealData((*sealed)->seal, Tag{.seq = 1}, data));
      } else {
        WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, data.size()}, data);
      }
      std::vector<std::byte> into(data.size());
      ASSERT_TRUE(endpoint->Recv("raw-peer:1", Tag{.seq = 1}, into, Deadline()).ok());
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
  kFlipPayload,  // a byte of a record changed
  kFlipTag,      // a byte of a record's tag changed
  kFlipHeader,   // a byte of the header (here: the step) changed
  kReplay,       // the previous frame's bytes again
  kDrop,         // a frame left out: the next one's records have the wrong numbers
};

// A raw peer on a sealed connection sends a good frame, then an attacked one: the good frame
// arrives; the attacked one never does. It fails its receive with DataLoss naming the peer
// (posted and consumed receives; an unexpected message's receive gets the same error), the
// connection closes, and the link counts one seal failure and one error. A consumer was handed
// nothing of the attacked message past the records that opened.
TEST(TcpSealTest, AnAlteredReplayedOrDroppedFrameIsNeverDelivered) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/false);
  ASSERT_NE(endpoint, nullptr);
  struct Case {
    Path path;
    size_t size;
    Attack attack;
  };
  const size_t large = (size_t{1} << 20) + 3;
  const std::vector<Case> cases = {
      {Path::kPosted, 100, Attack::kFlipPayload},  {Path::kPosted, large, Attack::kFlipPayload},
      {Path::kPosted, large, Attack::kFlipTag},    {Path::kPosted, 100, Attack::kFlipHeader},
      {Path::kPosted, 100, Attack::kReplay},       {Path::kPosted, large, Attack::kDrop},
      {Path::kUnexpected, 100, Attack::kFlipTag},  {Path::kUnexpected, large, Attack::kReplay},
      {Path::kUnexpected, 0, Attack::kFlipHeader}, {Path::kConsumed, large, Attack::kFlipPayload},
      {Path::kConsumed, 100, Attack::kDrop},       {Path::kConsumed, large, Attack::kFlipTag},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string peer = absl::StrCat("attacked-peer-", i, ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    absl::StatusOr<std::optional<tcp::SealedStream>> sealed =
        tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey, /*seal=*/true,
                       Deadline(), [] { return false; });
    ASSERT_TRUE(sealed.ok() && sealed->has_value()) << sealed.status();
    RecordCipher& seal = (*sealed)->seal;
    const std::vector<std::string> members = {peer};
    endpoint->Restrict(4, members);

    const std::vector<std::byte> good = Pattern(c.size, 2 * i);
    const std::vector<std::byte> good_frame = SealData(seal, Tag{.comm = 4, .seq = 1}, good);
    WriteRaw(raw.get(), good_frame);
    std::vector<std::byte> good_into(c.size);
    ASSERT_TRUE(endpoint->Recv(peer, Tag{.comm = 4, .seq = 1}, good_into, Deadline()).ok());
    EXPECT_TRUE(good_into == good);

    const Tag tag{.comm = 4, .seq = 2, .step = 3, .part = 1};
    const std::vector<std::byte> payload = Pattern(c.size, 2 * i + 1);
    std::vector<std::byte> bad;
    switch (c.attack) {
      case Attack::kFlipPayload:
        bad = SealData(seal, tag, payload);
        bad[kFrameHeaderBytes + c.size / 2] ^= std::byte{0x04};
        break;
      case Attack::kFlipTag:
        bad = SealData(seal, tag, payload);
        bad.back() ^= std::byte{0x01};
        break;
      case Attack::kFlipHeader:
        bad = SealData(seal, Tag{.comm = 4, .seq = 2, .step = 2, .part = 1}, payload);
        bad[24] ^= std::byte{0x01};  // the step, 2 -> 3: the header the receive waits for
        break;
      case Attack::kReplay:
        bad = good_frame;
        break;
      case Attack::kDrop:
        (void)SealData(seal, Tag{.comm = 4, .seq = 9}, Pattern(10, 1));  // never sent
        bad = SealData(seal, tag, payload);
        break;
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
    EXPECT_THAT(status.message(), HasSubstr("a sealed message from peer " + peer));
    EXPECT_THAT(status.message(), HasSubstr("did not open"));
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
    // Records before the attacked one opened and were consumed; none after.
    if (c.path == Path::kConsumed) {
      // (The flipped byte is at wire offset c.size / 2 after the header, among the tags.)
      const size_t opened =
          c.attack == Attack::kFlipPayload
              ? (c.size / 2) / (kSealedRecordBytes + kSealTagBytes) * kSealedRecordBytes
          : c.attack == Attack::kFlipTag ? (SealedRecords(c.size) - 1) * kSealedRecordBytes
                                         : 0;
      EXPECT_EQ(consumed_bytes, opened);
    }
    const LinkStats link = StatsFor(*endpoint, peer);
    EXPECT_EQ(link.Counter(kSealFailuresCounter), 1u);
    EXPECT_EQ(link.errors, 1u);
    EXPECT_EQ(link.rx_messages, 1u) << "only the good message counts";
  }
}

// A raw peer introduced on a sealed connection to `endpoint` as `peer`; the connection and its
// ciphers.
struct SealedPeer {
  FileDescriptor fd;
  std::optional<tcp::SealedStream> sealed;
};
SealedPeer ConnectSealed(Endpoint& endpoint, const std::string& peer) {
  SealedPeer raw{RawConnect(endpoint.address()), std::nullopt};
  absl::StatusOr<std::optional<tcp::SealedStream>> sealed =
      tcp::Introduce(raw.fd.get(), peer, endpoint.address(), kNoHandshakeKey, /*seal=*/true,
                     Deadline(), [] { return false; });
  EXPECT_TRUE(sealed.ok() && sealed->has_value()) << sealed.status();
  if (sealed.ok()) raw.sealed = *std::move(sealed);
  return raw;
}

// A record that does not open fails more than the receive of its own frame: whatever the peer
// sent may be lost from there on (a dropped frame is noticed only at the next one, whose tag is
// another receive's), so every receive waiting for the peer fails with DataLoss at once, and so
// does every receive posted before the peer connects again. Here the attacked frame is a replay
// of a message already received, and the receive that waits is for another message.
TEST(TcpSealTest, ARecordThatDoesNotOpenFailsEveryReceiveFromThePeerWithDataLoss) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/false);
  ASSERT_NE(endpoint, nullptr);
  const std::string peer = "replaying-peer:1";
  SealedPeer raw = ConnectSealed(*endpoint, peer);
  ASSERT_TRUE(raw.sealed.has_value());
  const std::vector<std::byte> good = Pattern(100, 1);
  const std::vector<std::byte> good_frame = SealData(raw.sealed->seal, Tag{.seq = 1}, good);
  WriteRaw(raw.fd.get(), good_frame);
  std::vector<std::byte> into(good.size());
  ASSERT_TRUE(endpoint->Recv(peer, Tag{.seq = 1}, into, Deadline()).ok());

  std::vector<std::byte> waiting_into(50);
  std::unique_ptr<PostedRecv> waiting =
      endpoint->PostRecv(peer, Tag{.seq = 2}, waiting_into, Deadline(), nullptr);
  WriteUntilClosed(raw.fd.get(), good_frame);  // the same bytes again
  const absl::Status status = waiting->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("a sealed message from peer " + peer));
  EXPECT_THAT(status.message(), HasSubstr("did not open"));
  EXPECT_TRUE(ClosedWithin(raw.fd.get(), absl::Seconds(10)));
  // Until the peer connects again.
  std::vector<std::byte> later_into(50);
  const absl::Status later = endpoint->Recv(peer, Tag{.seq = 3}, later_into, Deadline());
  EXPECT_EQ(later.code(), absl::StatusCode::kDataLoss) << later;
  EXPECT_EQ(StatsFor(*endpoint, peer).Counter(kSealFailuresCounter), 1u);
}

// The peer has two connections, and a frame is dropped on one of them: the next frame there does
// not open. The receive for the dropped message fails with DataLoss at once (the other connection
// is still up, so it would otherwise wait for its deadline), every connection with the peer is
// closed, and once the peer connects again its messages arrive.
TEST(TcpSealTest, AFrameDroppedOnOneOfThePeersConnectionsFailsItsReceiveAtOnce) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/false);
  ASSERT_NE(endpoint, nullptr);
  const std::string peer = "dropping-peer:1";
  SealedPeer attacked = ConnectSealed(*endpoint, peer);
  SealedPeer healthy = ConnectSealed(*endpoint, peer);
  ASSERT_TRUE(attacked.sealed.has_value() && healthy.sealed.has_value());
  for (SealedPeer* raw : {&attacked, &healthy}) {
    const std::vector<std::byte> data = Pattern(64, raw == &attacked ? 1 : 2);
    const Tag tag{.seq = raw == &attacked ? 1u : 2u};
    WriteRaw(raw->fd.get(), SealData(raw->sealed->seal, tag, data));
    std::vector<std::byte> into(data.size());
    ASSERT_TRUE(endpoint->Recv(peer, tag, into, Deadline()).ok());
    EXPECT_TRUE(into == data);
  }

  std::vector<std::byte> dropped_into(64);
  const absl::Time start = absl::Now();
  std::unique_ptr<PostedRecv> dropped =
      endpoint->PostRecv(peer, Tag{.seq = 3}, dropped_into, Deadline(absl::Seconds(10)), nullptr);
  (void)SealData(attacked.sealed->seal, Tag{.seq = 3}, Pattern(64, 3));  // lost on the way
  WriteUntilClosed(attacked.fd.get(),
                   SealData(attacked.sealed->seal, Tag{.seq = 4}, Pattern(64, 4)));
  const absl::Status status = dropped->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("peer " + peer));
  EXPECT_LT(absl::Now() - start, absl::Seconds(8)) << "at once, not at its deadline";
  EXPECT_TRUE(ClosedWithin(attacked.fd.get(), absl::Seconds(10)));
  EXPECT_TRUE(ClosedWithin(healthy.fd.get(), absl::Seconds(10)));

  SealedPeer again = ConnectSealed(*endpoint, peer);
  ASSERT_TRUE(again.sealed.has_value());
  // The endpoint admits the connection after the raw side's handshake returns.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!StatsFor(*endpoint, peer).up && absl::Now() < until) std::this_thread::yield();
  ASSERT_TRUE(StatsFor(*endpoint, peer).up);
  const std::vector<std::byte> data = Pattern(64, 5);
  WriteRaw(again.fd.get(), SealData(again.sealed->seal, Tag{.seq = 5}, data));
  std::vector<std::byte> into(data.size());
  const absl::Status received = endpoint->Recv(peer, Tag{.seq = 5}, into, Deadline());
  ASSERT_TRUE(received.ok()) << received;
  EXPECT_TRUE(into == data);
}

// Frames that do not match the connection: unsealed ones on a sealed connection (someone inserting
// their own) and sealed ones on an unsealed one. Neither is delivered; the connection closes, and
// the receive waiting for the peer fails with DataLoss naming it.
TEST(TcpSealTest, AFrameThatDoesNotMatchTheConnectionClosesIt) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/false);
  ASSERT_NE(endpoint, nullptr);
  for (const bool sealed_connection : {true, false}) {
    const std::string peer = absl::StrCat("mismatched-peer-", sealed_connection, ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    absl::StatusOr<std::optional<tcp::SealedStream>> sealed =
        tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey, sealed_connection,
                       Deadline(), [] { return false; });
    ASSERT_TRUE(sealed.ok()) << sealed.status();
    ASSERT_EQ(sealed->has_value(), sealed_connection);
    const std::vector<std::byte> data = Pattern(64, 7);
    std::vector<std::byte> into(data.size());
    std::unique_ptr<PostedRecv> posted =
        endpoint->PostRecv(peer, Tag{.seq = 1}, into, Deadline(absl::Seconds(2)), nullptr);
    if (sealed_connection) {
      WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, data.size()}, data);
    } else {
      absl::StatusOr<RecordCipher> own =
          RecordCipher::Create(RecordSecret{}, RecordCipher::Mode::kSeal);
      ASSERT_TRUE(own.ok());
      WriteRaw(raw.get(), SealData(*own, Tag{.seq = 1}, data));
    }
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
    const absl::Status status = posted->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr("peer " + peer));
    EXPECT_NE(into, data);
    EXPECT_EQ(StatsFor(*endpoint, peer).rx_messages, 0u);
    EXPECT_EQ(StatsFor(*endpoint, peer).errors, 1u);
  }
}

// Someone on the way clears the hello's sealed flag: the acceptor, which does not seal itself,
// honestly answers with an unsealed connection, and the endpoint that asked refuses it before
// it sends anything. Or they clear the challenge's flag: the acceptor's proof covered it, so the
// connector refuses the connection even though it did not ask.
TEST(TcpSealTest, NobodyOnTheWayCanTurnSealingOff) {
  for (const bool strip_hello : {true, false}) {
    SCOPED_TRACE(strip_hello ? "hello flag cleared" : "challenge flag cleared");
    std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/strip_hello);
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
    EXPECT_EQ(hello_header.sealed, strip_hello);
    const std::string hello_payload = ReadString(conn.get(), hello_header.payload_bytes);
    absl::StatusOr<Hello> hello = DecodeHello(std::as_bytes(std::span(hello_payload)));
    ASSERT_TRUE(hello.ok()) << hello.status();
    // The acceptor's answer: unsealed, as the stripped hello asked; or sealed with its flag
    // cleared on the way.
    const HandshakeNonce nonce = NewHandshakeNonce();
    const HandshakeTranscript transcript{hello->nonce, nonce, hello->address, peer.address,
                                         /*sealed=*/!strip_hello};
    const auto challenge =
        EncodeChallenge(Challenge{nonce, AcceptorProof(kNoHandshakeKey, transcript)});
    WriteFrame(conn.get(), FrameHeader{FrameType::kChallenge, Tag{}, challenge.size()}, challenge);
    const absl::Status status = sent.get();
    EXPECT_FALSE(status.ok());
    if (strip_hello) {
      EXPECT_THAT(status.message(), HasSubstr("unsealed"));
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
      EXPECT_THAT(status.message(), HasSubstr("could not prove"));
    }
    // No proof and no data frame: the connection just closes.
    EXPECT_TRUE(ClosedWithin(conn.get(), absl::Seconds(10)));
  }
}

// A large receive that gives up partway through a sealed message, inside a record or inside a
// tag: the rest is read and opened all the same (the record spans the receiver's buffer and the
// scratch buffer), the message does not count as altered, and the connection goes on.
TEST(TcpSealTest, AReceiveThatGivesUpMidRecordLeavesTheConnectionInStep) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*seal=*/true);
  ASSERT_NE(endpoint, nullptr);
  const std::vector<std::byte> message = Pattern((size_t{2} << 20) + 11, 5);
  // Where the first part of the frame ends: inside the fifth record, inside the fifth tag.
  const size_t in_record = kFrameHeaderBytes + 4 * (kSealedRecordBytes + kSealTagBytes) + 1000;
  const size_t in_tag = kFrameHeaderBytes + 5 * kSealedRecordBytes + 4 * kSealTagBytes + 5;
  for (const size_t cut : {in_record, in_tag}) {
    const std::string peer = absl::StrCat("slow-peer-", cut, ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    absl::StatusOr<std::optional<tcp::SealedStream>> sealed =
        tcp::Introduce(raw.get(), peer, endpoint->address(), kNoHandshakeKey, /*seal=*/true,
                       Deadline(), [] { return false; });
    ASSERT_TRUE(sealed.ok() && sealed->has_value()) << sealed.status();
    const Tag tag{.seq = 1};
    const std::vector<std::byte> frame = SealData((*sealed)->seal, tag, message);
    std::vector<std::byte> into(message.size());
    std::unique_ptr<PostedRecv> posted =
        endpoint->PostRecv(peer, tag, into, Deadline(absl::Milliseconds(300)), nullptr);
    WriteRaw(raw.get(), std::span(frame).first(cut));
    EXPECT_EQ(posted->Wait().code(), absl::StatusCode::kDeadlineExceeded);
    WriteRaw(raw.get(), std::span(frame).subspan(cut));

    const std::vector<std::byte> next = Pattern(3000, 6);
    WriteRaw(raw.get(), SealData((*sealed)->seal, Tag{.seq = 2}, next));
    std::vector<std::byte> next_into(next.size());
    ASSERT_TRUE(endpoint->Recv(peer, Tag{.seq = 2}, next_into, Deadline()).ok());
    EXPECT_TRUE(next_into == next);
    EXPECT_EQ(StatsFor(*endpoint, peer).Counter(kSealFailuresCounter), 0u);
    EXPECT_FALSE(ClosedWithin(raw.get(), absl::Milliseconds(50)));
  }
}

}  // namespace
}  // namespace baton::transport
