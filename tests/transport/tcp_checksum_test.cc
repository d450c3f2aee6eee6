// Payload checksums on the TCP data plane (TcpOptions::checksum; frame.h, kFrameFlagChecksum):
// what goes on the wire, that every receive path delivers checksummed messages whatever either
// side's setting, and that a corrupted message fails its receive, names the peer, closes the
// connection and is counted.

#include <array>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/tcp/crc32c.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Endpoint> NewEndpoint(bool checksum) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.checksum = checksum;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Sizes that take every way a payload is read: none, a few bytes, within the read-ahead and
// beyond it, and large ones of several 256 KiB pieces that end mid-piece.
const std::vector<size_t> kSizes = {
    0, 1, 4097, size_t{64} << 10, (size_t{1} << 20) + 7, (size_t{3} << 20) + 5};

// (sender sends checksums, receiver sends checksums): every combination interoperates.
class TcpChecksumRoundTripTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(TcpChecksumRoundTripTest, EveryReceivePathDeliversTheSentBytes) {
  const auto [sender_checks, receiver_checks] = GetParam();
  std::unique_ptr<Endpoint> a = NewEndpoint(sender_checks);
  std::unique_ptr<Endpoint> b = NewEndpoint(receiver_checks);
  ASSERT_TRUE(a && b);
  uint64_t seq = 0;
  uint64_t messages = 0;
  for (const size_t size : kSizes) {
    SCOPED_TRACE(absl::StrCat(size, " bytes"));
    ExpectEveryReceivePathDelivers(*a, *b, size, &seq);
    messages += 3;
  }
  // One SendAll of every size (more frames than fit on its stack), the first receive posted.
  std::vector<std::vector<std::byte>> all_data;
  std::vector<OutMessage> all;
  const uint64_t first = seq + 1;
  for (const size_t size : kSizes) {
    all_data.push_back(Pattern(size, ++seq));
    all.push_back(OutMessage{Tag{.seq = seq}, all_data.back()});
  }
  std::vector<std::byte> first_into(kSizes[0]);
  std::unique_ptr<PostedRecv> first_posted =
      b->PostRecv(a->address(), Tag{.seq = first}, first_into, Deadline(), nullptr);
  ASSERT_TRUE(a->SendAll(b->address(), all, Deadline()).ok());
  ASSERT_TRUE(first_posted->Wait().ok());
  for (size_t i = 1; i < all.size(); ++i) {
    std::vector<std::byte> into(kSizes[i]);
    ASSERT_TRUE(b->Recv(a->address(), all[i].tag, into, Deadline()).ok()) << i;
    EXPECT_TRUE(into == all_data[i]) << i;
  }
  messages += all.size();

  const LinkStats received = StatsFor(*b, a->address());
  EXPECT_EQ(received.rx_messages, messages);
  EXPECT_EQ(received.Counter(kChecksumFailuresCounter), 0u);
  EXPECT_EQ(received.errors, 0u);
  EXPECT_EQ(StatsFor(*a, b->address()).tx_messages, messages);
}

INSTANTIATE_TEST_SUITE_P(SenderAndReceiver, TcpChecksumRoundTripTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return absl::StrCat(std::get<0>(info.param) ? "Checks" : "Plain", "To",
                                               std::get<1>(info.param) ? "Checks" : "Plain");
                         });

// The wire: with checksums on, every data frame has the flag and, after its payload, the
// payload's CRC32C (little-endian); without, neither; ping frames never carry one.
TEST(TcpChecksumTest, DataFramesCarryTheirCrcOnlyWhenOn) {
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "on" : "off");
    std::unique_ptr<Endpoint> endpoint = NewEndpoint(on);
    ASSERT_NE(endpoint, nullptr);
    RawListener peer = BindLoopback(/*listening=*/true);
    const std::vector<std::byte> one = Pattern(1000, 1);
    const std::vector<std::byte> two = Pattern(300000, 2);
    const std::vector<OutMessage> messages = {
        {Tag{.seq = 1}, one}, {Tag{.seq = 2}, {}}, {Tag{.seq = 3}, two}};
    auto sent = std::async(std::launch::async,
                           [&] { return endpoint->SendAll(peer.address, messages, Deadline()); });
    FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(conn.valid());
    ASSERT_EQ(AcceptHello(conn.get(), peer.address), endpoint->address());
    for (const OutMessage& message : messages) {
      const FrameHeader header = ReadHeader(conn.get());
      EXPECT_EQ(header.tag, message.tag);
      EXPECT_EQ(header.checksum, on);
      ASSERT_EQ(header.payload_bytes, message.data.size());
      const std::string payload = ReadString(conn.get(), header.payload_bytes);
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), message.data.begin(),
                             message.data.end(),
                             [](char c, std::byte b) { return static_cast<std::byte>(c) == b; }));
      if (on) {
        const std::string trailer = ReadString(conn.get(), kFrameChecksumBytes);
        EXPECT_EQ(DecodeFrameChecksum(ConstFrameChecksumBytes(
                      reinterpret_cast<const std::byte*>(trailer.data()), kFrameChecksumBytes)),
                  Crc32c(0, message.data));
      }
    }
    ASSERT_TRUE(sent.get().ok());
    // The next frame follows at once: a ping, which has no checksum.
    auto ping = std::async(std::launch::async, [&] {
      return endpoint->RoundTrip(peer.address, Deadline(absl::Milliseconds(300)));
    });
    const FrameHeader header = ReadHeader(conn.get());
    EXPECT_EQ(header.type, FrameType::kPing);
    EXPECT_FALSE(header.checksum);
    EXPECT_EQ(ping.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  }
}

// Writes a data frame with a checksum trailer of `crc` (the payload's own CRC32C unless a test
// corrupts it).
void WriteChecksummedFrame(int fd, const Tag& tag, ConstByteSpan payload, uint32_t crc) {
  WriteFrame(fd, FrameHeader{FrameType::kData, tag, payload.size(), /*checksum=*/true}, payload);
  std::array<std::byte, kFrameChecksumBytes> trailer;
  EncodeFrameChecksum(crc, trailer);
  WriteRaw(fd, trailer);
}

enum class Path { kPosted, kUnexpected, kConsumed };
enum class Corrupt { kPayload, kTrailer };

// A raw peer sends a good checksummed frame, then a corrupted one, on every receive path. The
// receiving endpoint sends no checksums itself and verifies them all the same: the good frame
// arrives, and the corrupted one fails its receive with DataLoss naming the peer and the tag,
// closes the connection, and counts one checksum failure and one error for that peer alone.
TEST(TcpChecksumTest, ACorruptedMessageFailsItsReceiveAndClosesTheConnection) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*checksum=*/false);
  ASSERT_NE(endpoint, nullptr);
  struct Case {
    Path path;
    size_t size;
    Corrupt corrupt;
  };
  const size_t large = (size_t{1} << 20) + 3;
  const std::vector<Case> cases = {
      {Path::kPosted, 100, Corrupt::kPayload},       {Path::kPosted, large, Corrupt::kPayload},
      {Path::kPosted, large, Corrupt::kTrailer},     {Path::kUnexpected, 100, Corrupt::kPayload},
      {Path::kUnexpected, large, Corrupt::kTrailer}, {Path::kConsumed, 100, Corrupt::kTrailer},
      {Path::kConsumed, large, Corrupt::kPayload},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string peer = absl::StrCat("corrupting-peer-", i, ":1");
    SCOPED_TRACE(peer);
    FileDescriptor raw = RawConnect(endpoint->address());
    WriteHello(raw.get(), peer);
    // Communicator 4 has formed with the peer in it: an error that arrives before its receive
    // is kept for it only then (receive_matcher.h).
    const std::vector<std::string> members = {peer};
    endpoint->Restrict(4, members);

    const std::vector<std::byte> good = Pattern(c.size, 2 * i);
    WriteChecksummedFrame(raw.get(), Tag{.comm = 4, .seq = 1}, good, Crc32c(0, good));
    std::vector<std::byte> good_into(c.size);
    ASSERT_TRUE(endpoint->Recv(peer, Tag{.comm = 4, .seq = 1}, good_into, Deadline()).ok());
    EXPECT_TRUE(good_into == good);

    std::vector<std::byte> bad = Pattern(c.size, 2 * i + 1);
    uint32_t crc = Crc32c(0, bad);
    if (c.corrupt == Corrupt::kPayload) {
      bad[c.size / 2] ^= std::byte{0x04};  // as if flipped on the way, after the sender's CRC
    } else {
      crc ^= 0x00010000;
    }
    const Tag tag{.comm = 4, .seq = 2, .step = 3, .part = 1};
    std::vector<std::byte> into(c.size);
    size_t consumed_bytes = 0;
    absl::Status status;
    switch (c.path) {
      case Path::kPosted: {
        std::unique_ptr<PostedRecv> posted =
            endpoint->PostRecv(peer, tag, into, Deadline(), nullptr);
        WriteChecksummedFrame(raw.get(), tag, bad, crc);
        status = posted->Wait();
        break;
      }
      case Path::kUnexpected:
        WriteChecksummedFrame(raw.get(), tag, bad, crc);
        // Closed once the frame has been read and found corrupt, before any receive is posted.
        ASSERT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
        status = endpoint->Recv(peer, tag, into, Deadline());
        break;
      case Path::kConsumed: {
        std::unique_ptr<PostedRecv> consumed = endpoint->PostConsume(
            peer, tag, c.size, Deadline(),
            [&consumed_bytes](size_t, ConstByteSpan piece) { consumed_bytes += piece.size(); });
        WriteChecksummedFrame(raw.get(), tag, bad, crc);
        status = consumed->Wait();
        // The pieces went to the consumer before the check at the end (tcp_transport.h).
        EXPECT_EQ(consumed_bytes, c.size);
        break;
      }
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr("checksum mismatch on a message from peer " + peer));
    EXPECT_THAT(status.message(), HasSubstr(TagToString(tag)));
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
    const LinkStats link = StatsFor(*endpoint, peer);
    EXPECT_EQ(link.Counter(kChecksumFailuresCounter), 1u);
    EXPECT_EQ(link.errors, 1u);
    EXPECT_EQ(link.rx_messages, 1u) << "only the good message counts";
  }
  // Whoever comes next is served as before.
  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), "good-peer:1");
  const std::vector<std::byte> fine = Pattern(5000, 99);
  WriteChecksummedFrame(raw.get(), Tag{.seq = 1}, fine, Crc32c(0, fine));
  std::vector<std::byte> into(fine.size());
  ASSERT_TRUE(endpoint->Recv("good-peer:1", Tag{.seq = 1}, into, Deadline()).ok());
  EXPECT_TRUE(into == fine);
  EXPECT_EQ(StatsFor(*endpoint, "good-peer:1").Counter(kChecksumFailuresCounter), 0u);
}

// A large receive that gives up halfway through its message (its deadline passes) leaves the rest
// to be skipped: the check still covers the whole payload, so an intact message does not count as
// corrupt, and the connection goes on.
TEST(TcpChecksumTest, AReceiveThatGivesUpMidMessageLeavesAnIntactMessageIntact) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*checksum=*/true);
  ASSERT_NE(endpoint, nullptr);
  const std::string peer = "slow-peer:1";
  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), peer);
  const std::vector<std::byte> message = Pattern((size_t{2} << 20) + 11, 5);
  const Tag tag{.seq = 1};
  std::vector<std::byte> into(message.size());
  std::unique_ptr<PostedRecv> posted =
      endpoint->PostRecv(peer, tag, into, Deadline(absl::Milliseconds(300)), nullptr);
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(FrameHeader{FrameType::kData, tag, message.size(), /*checksum=*/true}, header);
  WriteRaw(raw.get(), header);
  // Part of the payload, ending inside a piece (pieces are 256 KiB).
  const size_t first = (size_t{1} << 20) + 1000;
  WriteRaw(raw.get(), std::span(message).first(first));
  EXPECT_EQ(posted->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  WriteRaw(raw.get(), std::span(message).subspan(first));
  std::array<std::byte, kFrameChecksumBytes> trailer;
  EncodeFrameChecksum(Crc32c(0, message), trailer);
  WriteRaw(raw.get(), trailer);

  const std::vector<std::byte> next = Pattern(3000, 6);
  WriteChecksummedFrame(raw.get(), Tag{.seq = 2}, next, Crc32c(0, next));
  std::vector<std::byte> next_into(next.size());
  ASSERT_TRUE(endpoint->Recv(peer, Tag{.seq = 2}, next_into, Deadline()).ok());
  EXPECT_TRUE(next_into == next);
  EXPECT_EQ(StatsFor(*endpoint, peer).Counter(kChecksumFailuresCounter), 0u);
  EXPECT_FALSE(ClosedWithin(raw.get(), absl::Milliseconds(50)));
}

// A payload that arrives in parts, far apart, is read across several turns of the waiting thread
// (each parks it, with its checksum so far and, for a consumed receive, the piece half-filled)
// and arrives intact, into a buffer and to a consumer.
TEST(TcpChecksumTest, APayloadThatArrivesSlowlyIsReadAcrossTurns) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*checksum=*/true);
  ASSERT_NE(endpoint, nullptr);
  const std::string peer = "slow-peer:1";
  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), peer);
  const std::vector<std::byte> message = Pattern((size_t{1} << 20) + 11, 9);
  for (const bool consume : {false, true}) {
    const Tag tag{.seq = consume ? 2u : 1u};
    std::vector<std::byte> into(message.size());
    std::unique_ptr<PostedRecv> posted =
        consume ? endpoint->PostConsume(peer, tag, message.size(), Deadline(),
                                        [&into](size_t offset, ConstByteSpan piece) {
                                          std::copy(piece.begin(), piece.end(),
                                                    into.begin() + static_cast<ptrdiff_t>(offset));
                                        })
                : endpoint->PostRecv(peer, tag, into, Deadline(), nullptr);
    auto waited = std::async(std::launch::async, [&posted] { return posted->Wait(); });
    std::array<std::byte, kFrameHeaderBytes> header;
    EncodeFrameHeader(FrameHeader{FrameType::kData, tag, message.size(), /*checksum=*/true},
                      header);
    WriteRaw(raw.get(), header);
    // Parts that end mid-piece (pieces are 256 KiB), each after more than a slice (20 ms).
    const std::vector<size_t> cuts = {1000, (size_t{1} << 18) + 77, (size_t{3} << 18) + 5,
                                      message.size()};
    size_t at = 0;
    for (const size_t cut : cuts) {
      absl::SleepFor(absl::Milliseconds(50));
      WriteRaw(raw.get(), std::span(message).subspan(at, cut - at));
      at = cut;
    }
    std::array<std::byte, kFrameChecksumBytes> trailer;
    EncodeFrameChecksum(Crc32c(0, message), trailer);
    WriteRaw(raw.get(), std::span(trailer).first(1));
    absl::SleepFor(absl::Milliseconds(50));
    WriteRaw(raw.get(), std::span(trailer).subspan(1));
    const absl::Status status = waited.get();
    EXPECT_TRUE(status.ok()) << status << (consume ? " (consumed)" : "");
    EXPECT_TRUE(into == message) << (consume ? "consumed" : "into a buffer");
  }
  EXPECT_EQ(StatsFor(*endpoint, peer).Counter(kChecksumFailuresCounter), 0u);
}

}  // namespace
}  // namespace baton::transport
