// What only the TCP transport has: its wire protocol, sockets and connection handling, driven
// here by raw loopback sockets that play a misbehaving or slow peer (raw_tcp_peer.h). The Endpoint
// contract itself is tested by transport_conformance_test; payload checksums by
// tcp_checksum_test.

#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/socket.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TcpOptions Options(const std::string& listen_address, const std::string& advertise_host = "") {
  TcpOptions options;
  options.listen_address = listen_address;
  options.advertise_host = advertise_host;
  return options;
}

std::unique_ptr<Endpoint> NewLoopbackEndpoint() {
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(Options("127.0.0.1:0"));
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Small and large reads in any mix return exactly the stream's bytes, whether they come from the
// read-ahead, straight from the socket, or both; EOF and deadlines behave as for ReadFull.
TEST(BufferedReaderTest, ReadsExactlyTheStreamThroughItsReadAhead) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  FileDescriptor reader_fd(fds[0]);
  FileDescriptor writer_fd(fds[1]);
  const std::vector<size_t> sizes = {40, 8, 40, 0, 1, 40, 5000, 40, 4095, 3, 4096, 40, 70000, 7};
  size_t total = 0;
  for (size_t size : sizes) total += size;
  std::vector<std::byte> sent(total);
  for (size_t i = 0; i < total; ++i) sent[i] = static_cast<std::byte>((i * 37 + 11) & 0xff);
  auto writer = std::async(std::launch::async, [&] {
    // In uneven pieces, with pauses, so that reads find the socket both full and empty.
    size_t offset = 0;
    for (size_t piece = 1; offset < total; piece = piece * 3 + 1) {
      const size_t n = std::min(piece, total - offset);
      std::array<iovec, 1> iov{iovec{sent.data() + offset, n}};
      size_t written = 0;
      if (!WriteFull(writer_fd.get(), iov, absl::Now() + absl::Seconds(30), &written).ok()) return;
      offset += n;
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  BufferedReader reader(reader_fd.get());
  std::vector<std::byte> received;
  size_t counted = 0;
  for (size_t size : sizes) {
    std::vector<std::byte> part(size);
    ASSERT_TRUE(reader.Read(part, absl::Now() + absl::Seconds(30), &counted).ok());
    received.insert(received.end(), part.begin(), part.end());
  }
  writer.get();
  EXPECT_EQ(counted, total);
  EXPECT_TRUE(received == sent);

  // Nothing more arrives: the deadline ends the read; then EOF is reported as such.
  std::array<std::byte, 8> more;
  size_t none = 0;
  EXPECT_EQ(reader.Read(more, absl::Now() + absl::Milliseconds(30), &none).code(),
            absl::StatusCode::kDeadlineExceeded);
  writer_fd.Reset();
  const absl::Status eof = reader.Read(more, absl::Now() + absl::Seconds(30), &none);
  EXPECT_EQ(eof.code(), absl::StatusCode::kUnavailable) << eof;
  EXPECT_EQ(none, 0u);
}

TEST(TcpTransportTest, AdvertisesTheBoundLoopbackPort) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  EXPECT_THAT(endpoint->address(), StartsWith("127.0.0.1:"));
  EXPECT_GT(PortOf(endpoint->address()), 0);
  auto advertised = NewTcpEndpoint(Options("127.0.0.1:0", "node-7.example"));
  ASSERT_TRUE(advertised.ok());
  EXPECT_THAT((*advertised)->address(), StartsWith("node-7.example:"));
}

TEST(TcpTransportTest, RejectsMalformedListenAddress) {
  EXPECT_EQ(NewTcpEndpoint(Options("no-port")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewTcpEndpoint(Options("127.0.0.1:99999")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpTransportTest, BadFramesCloseTheConnectionAndCountAnError) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  {
    FileDescriptor raw = RawConnect(endpoint->address());
    WriteHello(raw.get(), "bad-magic:1");
    std::array<std::byte, kFrameHeaderBytes> garbage;
    garbage.fill(std::byte{0x5a});
    WriteRaw(raw.get(), garbage);
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
  }
  {
    FileDescriptor raw = RawConnect(endpoint->address());
    WriteHello(raw.get(), "too-long:1");
    std::array<std::byte, kFrameHeaderBytes> header;
    EncodeFrameHeader(FrameHeader{FrameType::kData, Tag{}, kMaxFramePayloadBytes + 1}, header);
    WriteRaw(raw.get(), header);
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
  }
  {
    // Data before any hello: the sender cannot be named, so there is nobody to count against.
    FileDescriptor raw = RawConnect(endpoint->address());
    WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{}, 0}, {});
    EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));
  }
  EXPECT_EQ(StatsFor(*endpoint, "bad-magic:1").errors, 1u);
  EXPECT_EQ(StatsFor(*endpoint, "too-long:1").errors, 1u);
  // Whoever comes next is served normally.
  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), "good:1");
  const std::string payload = "fine";
  WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, payload.size()},
             std::as_bytes(std::span(payload.data(), payload.size())));
  std::string received(4, '\0');
  ASSERT_TRUE(endpoint
                  ->Recv("good:1", Tag{.seq = 1},
                         std::as_writable_bytes(std::span(received.data(), received.size())),
                         Deadline())
                  .ok());
  EXPECT_EQ(received, payload);
}

TEST(TcpTransportTest, LostPeerIsReceivableAgainAfterItReconnects) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  const std::string peer = "restarting-peer:1";
  {
    FileDescriptor raw = RawConnect(endpoint->address());
    WriteHello(raw.get(), peer);
    WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, 0}, {});
  }  // closed: the endpoint loses the peer
  EXPECT_TRUE(endpoint->Recv(peer, Tag{.seq = 1}, {}, Deadline()).ok());
  absl::Status lost;
  const absl::Time give_up = Deadline(absl::Seconds(10));
  do {
    lost = endpoint->Recv(peer, Tag{.seq = 2}, {}, absl::Now() + absl::Milliseconds(20));
  } while (absl::IsDeadlineExceeded(lost) && absl::Now() < give_up);
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_THAT(lost.message(), HasSubstr("lost connection from peer restarting-peer:1"));

  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), peer);
  WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 2}, 0}, {});
  // Until the endpoint has read the new hello, the peer still counts as lost.
  absl::Status received;
  const absl::Time reconnect_deadline = Deadline(absl::Seconds(10));
  while (absl::IsUnavailable(received = endpoint->Recv(peer, Tag{.seq = 2}, {}, Deadline())) &&
         absl::Now() < reconnect_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(received.ok()) << received;
}

TEST(TcpTransportTest, ConnectIsRetriedUntilThePeerListens) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/false);
  const std::string payload = "retry";
  auto send = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.comm = 2, .seq = 3},
                          std::as_bytes(std::span(payload.data(), payload.size())), Deadline());
  });
  absl::SleepFor(absl::Milliseconds(100));  // let a few attempts be refused; correct either way
  ASSERT_EQ(listen(peer.fd.get(), 16), 0);
  FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(conn.valid());
  EXPECT_EQ(AcceptHello(conn.get(), peer.address), endpoint->address());
  const FrameHeader data = ReadHeader(conn.get());
  EXPECT_EQ(data.type, FrameType::kData);
  EXPECT_EQ(data.tag, (Tag{.comm = 2, .seq = 3}));
  EXPECT_EQ(ReadString(conn.get(), data.payload_bytes), payload);
  EXPECT_TRUE(send.get().ok());
}

// An operation whose connection the peer closes after it sent on it fails (what it sent may not
// have arrived), naming the peer; the next operation connects afresh.
TEST(TcpTransportTest, SendNoticesAClosedConnectionAndThenReconnects) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/true);
  // Sends that connect wait for the raw peer's half of the handshake.
  auto first = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.seq = 1}, {}, Deadline());
  });
  {
    FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(conn.valid());
    AcceptHello(conn.get(), peer.address);
    ReadHeader(conn.get());
    ASSERT_TRUE(first.get().ok());
  }  // the peer drops the connection
  // The first send after the close may still be accepted by the kernel; the next cannot be.
  absl::Status failed;
  for (uint32_t step = 1; step < 4 && failed.ok(); ++step) {
    failed = endpoint->Send(peer.address, Tag{.seq = 1, .step = step}, {}, Deadline());
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(failed.message(), HasSubstr(peer.address));
  EXPECT_GE(StatsFor(*endpoint, peer.address).errors, 1u);

  auto again = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.seq = 9}, {}, Deadline());
  });
  FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(conn.valid());
  EXPECT_EQ(AcceptHello(conn.get(), peer.address), endpoint->address());
  EXPECT_TRUE(again.get().ok());
}

// A connection the peer closed (say it restarted) before an operation sent anything on it is
// replaced within the operation's deadline: the send connects afresh, with the handshake, and
// succeeds, with no error counted.
TEST(TcpTransportTest, AConnectionFoundClosedBeforeAnOperationStartsIsReplaced) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/true);
  auto first = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.comm = 1, .seq = 1}, {}, Deadline());
  });
  {
    FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(conn.valid());
    AcceptHello(conn.get(), peer.address);
    ReadHeader(conn.get());
    ASSERT_TRUE(first.get().ok());
  }  // the peer drops the connection
  // Once the endpoint has seen it go (the link is down), an operation of the same communicator
  // and one of another start on a new connection.
  const std::string payload = "fresh";
  for (const Tag tag : {Tag{.comm = 1, .seq = 2}, Tag{.comm = 2, .seq = 1}}) {
    const absl::Time until = Deadline(absl::Seconds(10));
    while (StatsFor(*endpoint, peer.address).up && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_FALSE(StatsFor(*endpoint, peer.address).up);
    auto next = std::async(std::launch::async, [&] {
      return endpoint->Send(peer.address, tag,
                            std::as_bytes(std::span(payload.data(), payload.size())), Deadline());
    });
    FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(conn.valid());
    EXPECT_EQ(AcceptHello(conn.get(), peer.address), endpoint->address());
    const FrameHeader header = ReadHeader(conn.get());
    EXPECT_EQ(header.tag, tag);
    EXPECT_EQ(ReadString(conn.get(), header.payload_bytes), payload);
    EXPECT_TRUE(next.get().ok());
  }  // and drops that one too
  EXPECT_EQ(StatsFor(*endpoint, peer.address).errors, 0u);
}

// True when a frame (or anything else) arrives on `fd` within `timeout`.
bool ReadableWithin(int fd, absl::Duration timeout) {
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
}

ConstByteSpan Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string RecvString(Endpoint& endpoint, const std::string& peer, const Tag& tag, size_t size) {
  std::string text(size, '\0');
  const absl::Status status = endpoint.Recv(
      peer, tag, std::as_writable_bytes(std::span(text.data(), text.size())), Deadline());
  EXPECT_TRUE(status.ok()) << status;
  return text;
}

// A connection carries frames both ways: the peer answers on the connection we opened, and we
// answer on the one it opened, without connecting to it.
TEST(TcpTransportTest, FramesFlowBothWaysOnOneConnection) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/true);
  auto sent = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.seq = 1}, Bytes("ping"), Deadline());
  });
  FileDescriptor ours = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(ours.valid());
  EXPECT_EQ(AcceptHello(ours.get(), peer.address), endpoint->address());
  ASSERT_TRUE(sent.get().ok());
  EXPECT_EQ(ReadHeader(ours.get()).tag, Tag{.seq = 1});
  EXPECT_EQ(ReadString(ours.get(), 4), "ping");
  WriteFrame(ours.get(), FrameHeader{FrameType::kData, Tag{.seq = 2}, 4}, Bytes("pong"));
  EXPECT_EQ(RecvString(*endpoint, peer.address, Tag{.seq = 2}, 4), "pong");

  RawListener other = BindLoopback(/*listening=*/true);
  FileDescriptor theirs = RawConnect(endpoint->address());
  WriteHello(theirs.get(), other.address);
  WriteFrame(theirs.get(), FrameHeader{FrameType::kData, Tag{.seq = 3}, 2}, Bytes("hi"));
  EXPECT_EQ(RecvString(*endpoint, other.address, Tag{.seq = 3}, 2), "hi");
  ASSERT_TRUE(endpoint->Send(other.address, Tag{.seq = 4}, Bytes("back"), Deadline()).ok());
  EXPECT_EQ(ReadHeader(theirs.get()).tag, Tag{.seq = 4});
  EXPECT_EQ(ReadString(theirs.get(), 4), "back");
  EXPECT_FALSE(AcceptWithin(other.fd.get(), absl::Milliseconds(200)).valid());
}

// When both ends have connected to each other, both send on the connection opened by the end
// whose address sorts first, so that each one's acknowledgements ride on the other's data. The
// endpoint's advertised host puts its address before or after the peer's ("127.0.0.1:port").
class ConnectionChoiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The endpoint connects to the peer (`ours`), then the peer to the endpoint (`theirs`).
  void SetUp() override {
    TcpOptions options = Options("127.0.0.1:0", GetParam());
    // A waiting receiver spins far longer than any test takes, so a message that reaches it
    // another way has to end its spin.
    options.receive_spin = absl::Minutes(1);
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
    auto sent = std::async(std::launch::async, [&] {
      return endpoint_->Send(peer_.address, Tag{.seq = 1}, Bytes("a"), Deadline());
    });
    ours_ = AcceptWithin(peer_.fd.get(), absl::Seconds(10));
    ASSERT_TRUE(ours_.valid());
    AcceptHello(ours_.get(), peer_.address);
    ASSERT_TRUE(sent.get().ok());
    ReadHeader(ours_.get());
    ReadString(ours_.get(), 1);
    theirs_ = RawConnect(endpoint_->address());
    WriteHello(theirs_.get(), peer_.address, endpoint_->address());
    // Once this arrives the endpoint has read the hello and may send on `theirs`.
    WriteFrame(theirs_.get(), FrameHeader{FrameType::kData, Tag{.seq = 2}, 1}, Bytes("b"));
    EXPECT_EQ(RecvString(*endpoint_, peer_.address, Tag{.seq = 2}, 1), "b");
  }

  std::unique_ptr<Endpoint> endpoint_;
  RawListener peer_ = BindLoopback(/*listening=*/true);
  FileDescriptor ours_;
  FileDescriptor theirs_;
};

TEST_P(ConnectionChoiceTest, BothEndsUseTheConnectionOfTheLowerAddress) {
  for (uint64_t seq = 3; seq < 6; ++seq) {
    ASSERT_TRUE(endpoint_->Send(peer_.address, Tag{.seq = seq}, Bytes("c"), Deadline()).ok());
    const bool endpoint_first = endpoint_->address() < peer_.address;
    const int expected = endpoint_first ? ours_.get() : theirs_.get();
    const int unused = endpoint_first ? theirs_.get() : ours_.get();
    ASSERT_TRUE(ReadableWithin(expected, absl::Seconds(10))) << "the frame went elsewhere";
    EXPECT_EQ(ReadHeader(expected).tag, Tag{.seq = seq});
    EXPECT_EQ(ReadString(expected, 1), "c");
    EXPECT_FALSE(ReadableWithin(unused, absl::Milliseconds(50)));
  }
}

// An endpoint whose waiting threads spin for `spin`, and a raw peer connected and introduced to
// it: what the peer writes to `raw` arrives at the endpoint from `peer.address`.
struct EndpointWithRawPeer {
  std::unique_ptr<Endpoint> endpoint;
  RawListener peer;
  FileDescriptor raw;
};
EndpointWithRawPeer NewEndpointWithRawPeer(absl::Duration spin = TcpOptions().receive_spin) {
  TcpOptions options = Options("127.0.0.1:0");
  options.receive_spin = spin;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  if (!endpoint.ok()) return EndpointWithRawPeer{};
  EndpointWithRawPeer result{*std::move(endpoint), BindLoopback(/*listening=*/true), {}};
  result.raw = RawConnect(result.endpoint->address());
  WriteHello(result.raw.get(), result.peer.address);
  return result;
}

// A thread waiting for a small message reads the connection itself; whatever else it meets
// there reaches its own receiver, and a frame too large for it to read is left to the
// connection's reader thread, whichever of the two gets to it first.
TEST(TcpTransportTest, AWaitingReceiverReadsForItselfAndLeavesLargeFramesToTheReader) {
  auto [endpoint, peer, raw] = NewEndpointWithRawPeer();
  ASSERT_NE(endpoint, nullptr);
  WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, 1}, Bytes("x"));
  EXPECT_EQ(RecvString(*endpoint, peer.address, Tag{.seq = 1}, 1), "x");

  for (int round = 0; round < 20; ++round) {
    const uint64_t seq = 10 + 4 * round;
    std::string big(size_t{1} << 20, static_cast<char>('a' + round % 26));
    auto small = std::async(std::launch::async, [&] {
      return RecvString(*endpoint, peer.address, Tag{.seq = seq + 2}, 5);
    });
    auto medium = std::async(std::launch::async, [&] {
      return RecvString(*endpoint, peer.address, Tag{.seq = seq + 1}, 3);
    });
    WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = seq}, big.size()}, Bytes(big));
    WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = seq + 1}, 3}, Bytes("mid"));
    WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = seq + 2}, 5}, Bytes("small"));
    EXPECT_EQ(small.get(), "small");
    EXPECT_EQ(medium.get(), "mid");
    EXPECT_EQ(RecvString(*endpoint, peer.address, Tag{.seq = seq}, big.size()), big);
  }
}

// With two streams per peer, messages of 256 KiB and more take turns on two connections (the
// second opened by the second such message), and smaller ones keep to the first.
TEST(TcpTransportTest, LargeMessagesTakeTurnsOnTheStreamsOfAPeer) {
  TcpOptions options = Options("127.0.0.1:0");
  options.streams_per_peer = 2;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  RawListener peer = BindLoopback(/*listening=*/true);
  const std::string large(kStripeMinBytes, 'L');
  auto sends = std::async(std::launch::async, [&] {
    for (uint64_t seq = 1; seq <= 4; ++seq) {
      EXPECT_TRUE((*endpoint)->Send(peer.address, Tag{.seq = seq}, Bytes(large), Deadline()).ok());
    }
    EXPECT_TRUE((*endpoint)->Send(peer.address, Tag{.seq = 5}, Bytes("small"), Deadline()).ok());
  });
  // Each connection introduces itself, then carries its frames in order.
  auto read_frames = [&](int fd, size_t frames) {
    std::vector<uint64_t> seqs;
    EXPECT_EQ(AcceptHello(fd, peer.address), (*endpoint)->address());
    for (size_t i = 0; i < frames; ++i) {
      const FrameHeader header = ReadHeader(fd);
      seqs.push_back(header.tag.seq);
      ReadString(fd, header.payload_bytes);
    }
    return seqs;
  };
  FileDescriptor first = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(first.valid());
  auto on_first = std::async(std::launch::async, [&] { return read_frames(first.get(), 3); });
  FileDescriptor second = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(second.valid());
  EXPECT_EQ(read_frames(second.get(), 2), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(on_first.get(), (std::vector<uint64_t>{1, 3, 5}));
  sends.get();
  // No third connection.
  EXPECT_FALSE(AcceptWithin(peer.fd.get(), absl::Milliseconds(100)).valid());

  options.streams_per_peer = 0;
  EXPECT_EQ(NewTcpEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.streams_per_peer = 17;
  EXPECT_EQ(NewTcpEndpoint(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A consumed message is handed over in pieces of at most 256 KiB as it is read, not once it is
// all there: its first pieces come while the rest has not been sent yet.
TEST(TcpTransportTest, AConsumedMessageIsHandedOverAsItArrives) {
  auto [endpoint, peer, raw] = NewEndpointWithRawPeer();
  ASSERT_NE(endpoint, nullptr);
  constexpr size_t kSize = size_t{3} << 20;
  std::vector<std::byte> sent(kSize);
  for (size_t i = 0; i < kSize; ++i) sent[i] = static_cast<std::byte>(i * 7 % 251);
  std::vector<std::byte> received(kSize);
  std::atomic<size_t> consumed{0};
  std::atomic<size_t> largest{0};
  std::unique_ptr<PostedRecv> posted = endpoint->PostConsume(
      peer.address, Tag{.seq = 1}, kSize, Deadline(), [&](size_t offset, ConstByteSpan piece) {
        std::copy(piece.begin(), piece.end(), received.begin() + static_cast<ptrdiff_t>(offset));
        largest.store(std::max(largest.load(), piece.size()));
        consumed.fetch_add(piece.size());
      });
  std::array<std::byte, kFrameHeaderBytes> header;
  EncodeFrameHeader(FrameHeader{FrameType::kData, Tag{.seq = 1}, kSize}, header);
  WriteRaw(raw.get(), header);
  const size_t half = kSize / 2;
  WriteRaw(raw.get(), std::span(sent).first(half));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (consumed.load() < half / 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_GE(consumed.load(), half / 2) << "nothing handed over before the message was whole";
  EXPECT_FALSE(posted->Test());
  WriteRaw(raw.get(), std::span(sent).subspan(half));
  ASSERT_TRUE(posted->Wait().ok());
  EXPECT_EQ(consumed.load(), kSize);
  EXPECT_LE(largest.load(), size_t{256} << 10);
  EXPECT_TRUE(received == sent);
}

// With two connections to the same peer, a message that comes over the one the waiting thread
// is not reading still completes its receive, and at once, though that thread spins on the other:
// well within a tenth of the receive's deadline (and of the minute-long spin), which a receiver
// that noticed the message only once its spin or deadline ran out would wait out.
TEST_P(ConnectionChoiceTest, AReceiveCompletesOverEitherConnection) {
  constexpr absl::Duration kReceiveDeadline = absl::Seconds(30);
  for (uint64_t seq = 3; seq < 9; ++seq) {
    auto received = std::async(std::launch::async, [&] {
      std::string text(1, '\0');
      const absl::Status status =
          endpoint_->Recv(peer_.address, Tag{.seq = seq}, std::as_writable_bytes(std::span(text)),
                          absl::Now() + kReceiveDeadline);
      return std::pair(status, std::pair(text, absl::Now()));
    });
    absl::SleepFor(absl::Milliseconds(2));  // let the receiver start waiting; correct either way
    const absl::Time written = absl::Now();
    WriteFrame(seq % 2 == 0 ? ours_.get() : theirs_.get(),
               FrameHeader{FrameType::kData, Tag{.seq = seq}, 1}, Bytes("c"));
    const auto [status, text_and_end] = received.get();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(text_and_end.first, "c");
    EXPECT_LT(text_and_end.second - written, kReceiveDeadline / 10)
        << "the receiver spun on past its message";
  }
}

INSTANTIATE_TEST_SUITE_P(EndpointAddressSortsFirstOrLast, ConnectionChoiceTest,
                         ::testing::Values("0-sorts-first", "z-sorts-last"));

// A thread waiting for a small message spins on the connection for a while, then sleeps in
// poll(); the message arrives whether it comes during the spin, after it, or with no spin at all.
TEST(TcpTransportTest, AWaitingReceiverGetsItsMessageWhetherItSpinsOrSleeps) {
  for (const absl::Duration spin : {absl::ZeroDuration(), absl::Milliseconds(1)}) {
    EndpointWithRawPeer e = NewEndpointWithRawPeer(spin);
    ASSERT_NE(e.endpoint, nullptr);
    uint64_t seq = 1;
    for (const absl::Duration delay : {absl::ZeroDuration(), absl::Microseconds(200),
                                       absl::Milliseconds(5), absl::Microseconds(100)}) {
      auto received = std::async(std::launch::async, [&e, seq] {
        return RecvString(*e.endpoint, e.peer.address, Tag{.seq = seq}, 4);
      });
      absl::SleepFor(delay);
      WriteFrame(e.raw.get(), FrameHeader{FrameType::kData, Tag{.seq = seq}, 4}, Bytes("spin"));
      EXPECT_EQ(received.get(), "spin") << "spin " << spin << ", message after " << delay;
      ++seq;
    }
  }
}

TEST(TcpTransportTest, ANegativeReceiveSpinIsInvalid) {
  TcpOptions negative = Options("127.0.0.1:0");
  negative.receive_spin = -absl::Microseconds(1);
  EXPECT_EQ(NewTcpEndpoint(negative).status().code(), absl::StatusCode::kInvalidArgument);
}

std::vector<std::byte> Pattern(size_t size, int seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed * 7) % 251);
  return bytes;
}

// Two endpoints whose reader threads linger for 10 minutes (TcpOptions::reader_linger) after
// a small message each way, read by the waiting threads themselves (posted before it came).
struct LingeringPair {
  std::unique_ptr<Endpoint> a, b;
};
LingeringPair NewLingeringPair() {
  TcpOptions options = Options("127.0.0.1:0");
  options.reader_linger = absl::Minutes(10);
  options.max_unexpected_bytes_per_peer = uint64_t{256} << 20;
  absl::StatusOr<std::unique_ptr<Endpoint>> a = NewTcpEndpoint(options);
  absl::StatusOr<std::unique_ptr<Endpoint>> b = NewTcpEndpoint(options);
  if (!a.ok() || !b.ok()) {
    ADD_FAILURE() << a.status() << " " << b.status();
    return {};
  }
  LingeringPair pair{*std::move(a), *std::move(b)};
  Endpoint& ea = *pair.a;
  Endpoint& eb = *pair.b;
  EXPECT_TRUE(ea.Send(eb.address(), Tag{.seq = 1}, Bytes("hi"), Deadline()).ok());  // connects
  EXPECT_EQ(RecvString(eb, ea.address(), Tag{.seq = 1}, 2), "hi");
  for (const auto& [to, from, seq] : {std::tuple{&eb, &ea, 2}, std::tuple{&ea, &eb, 3}}) {
    auto received = std::async(std::launch::async, [to, from, seq] {
      return RecvString(*to, from->address(), Tag{.seq = static_cast<uint64_t>(seq)}, 5);
    });
    // Sent only once the receiver reads for it.
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (TcpReceivesReading(*to, from->address()) == 0 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(TcpReceivesReading(*to, from->address()), 1) << "nobody reads for the receive";
    EXPECT_TRUE(from->Send(to->address(), Tag{.seq = static_cast<uint64_t>(seq)}, Bytes("small"),
                           Deadline())
                    .ok());
    EXPECT_EQ(received.get(), "small");
  }
  return pair;
}

// Sends 48 MiB to `peer` (more than the sockets hold) and receives as much from it, posting the
// receive before the send or, with `post_after_send`, only once the send is done; checks that
// the peer's bytes arrived and, for a receive posted first, that this thread read them itself
// (while its send waited for room, then while it waited): none of them crossed a hand-off.
absl::Status ExchangeLarge(Endpoint& self, const std::string& peer, std::byte fill,
                           bool post_after_send) {
  // Eager: at most a quarter of the window (NewLingeringPair's), as a message sent before its
  // receive is posted must be, or both sends wait for the other's receive
  // (transport/flow_control.h).
  constexpr size_t kBytes = size_t{48} << 20;
  std::vector<std::byte> out(kBytes, fill);
  std::vector<std::byte> in(kBytes);
  const absl::Time deadline = Deadline(absl::Seconds(10));
  std::unique_ptr<PostedRecv> posted;
  std::thread::id delivered_by;
  if (!post_after_send) {
    posted = self.PostRecv(peer, Tag{.seq = 4}, std::span(in), deadline,
                           [&delivered_by] { delivered_by = std::this_thread::get_id(); });
  }
  BATON_RETURN_IF_ERROR(self.Send(peer, Tag{.seq = 4}, std::span(out), deadline));
  if (post_after_send)
    posted = self.PostRecv(peer, Tag{.seq = 4}, std::span(in), deadline, nullptr);
  BATON_RETURN_IF_ERROR(posted->Wait());
  for (std::byte x : in) {
    if (x == fill || x == std::byte{0}) return absl::DataLossError("wrong bytes received");
  }
  if (!post_after_send && delivered_by != std::this_thread::get_id()) {
    return absl::InternalError("the message was delivered by another thread");
  }
  return absl::OkStatus();
}

// Both endpoints of a lingering pair run ExchangeLarge with each other at once; both succeed.
void ExpectLingeringPairExchanges(bool post_after_send) {
  LingeringPair pair = NewLingeringPair();
  ASSERT_NE(pair.b, nullptr);
  auto from_a = std::async(std::launch::async, [&pair, post_after_send] {
    return ExchangeLarge(*pair.a, pair.b->address(), std::byte{1}, post_after_send);
  });
  const absl::Status from_b =
      ExchangeLarge(*pair.b, pair.a->address(), std::byte{2}, post_after_send);
  EXPECT_TRUE(from_b.ok()) << from_b;
  const absl::Status from_a_status = from_a.get();
  EXPECT_TRUE(from_a_status.ok()) << from_a_status;
}

// Both sides post their receive, then send: each send finishes only once the other side reads,
// and neither side's reader thread reads (they linger): each send reads what comes in while it
// waits for room, and the thread that waits reads the rest.
TEST(TcpTransportTest, AnExchangeOfLargeMessagesIsReadByTheThreadsThatSend) {
  ExpectLingeringPairExchanges(/*post_after_send=*/false);
}

// A receive of any size is read by the thread that waits for it (transport/progress.h): the
// message never crosses a hand-off from the connection's reader thread.
TEST(TcpTransportTest, ALargeReceiveIsReadByTheThreadThatWaitsForIt) {
  std::unique_ptr<Endpoint> receiver = NewLoopbackEndpoint();
  std::unique_ptr<Endpoint> sender = NewLoopbackEndpoint();
  ASSERT_NE(receiver, nullptr);
  ASSERT_NE(sender, nullptr);
  ASSERT_TRUE(sender->Send(receiver->address(), Tag{.seq = 1}, Bytes("hi"), Deadline()).ok());
  ASSERT_EQ(RecvString(*receiver, sender->address(), Tag{.seq = 1}, 2), "hi");
  const std::vector<std::byte> message = Pattern(size_t{4} << 20, 3);
  for (uint64_t seq = 2; seq < 5; ++seq) {
    std::vector<std::byte> into(message.size());
    std::thread::id delivered_by;
    std::unique_ptr<PostedRecv> posted =
        receiver->PostRecv(sender->address(), Tag{.seq = seq}, std::span(into), Deadline(),
                           [&delivered_by] { delivered_by = std::this_thread::get_id(); });
    std::thread::id waited_by;
    auto waited = std::async(std::launch::async, [&posted, &waited_by] {
      waited_by = std::this_thread::get_id();
      return posted->Wait();
    });
    // Sent once the receiver's thread reads for its receive.
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (TcpReceivesReading(*receiver, sender->address()) == 0 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_TRUE(sender->Send(receiver->address(), Tag{.seq = seq}, message, Deadline()).ok());
    ASSERT_TRUE(waited.get().ok());
    EXPECT_TRUE(into == message);
    EXPECT_EQ(delivered_by, waited_by) << "delivered by another thread, message " << seq;
  }
}

TEST(TcpTransportTest, ANegativeReaderLingerIsInvalid) {
  TcpOptions negative = Options("127.0.0.1:0");
  negative.reader_linger = -absl::Microseconds(1);
  EXPECT_EQ(NewTcpEndpoint(negative).status().code(), absl::StatusCode::kInvalidArgument);
  TcpOptions zero = Options("127.0.0.1:0");
  zero.reader_linger = absl::ZeroDuration();
  EXPECT_TRUE(NewTcpEndpoint(zero).ok()) << "no linger at all is valid";
}

// Both sides send before they post their receive (as a daemon stuck sending to a peer that is
// stuck sending to it, or around a cycle of them): a send that waits for room ends the linger of
// the sender's readers, which read what is coming in as unexpected messages.
TEST(TcpTransportTest, ASendThatWaitsForRoomEndsTheReadersLinger) {
  ExpectLingeringPairExchanges(/*post_after_send=*/true);
}

// WaitBriefly waits for a small message as long as the spin lasts: true if it came within it;
// false once the spin is over, and at once while the spin is off after a wait that outlasted it.
TEST(TcpTransportTest, WaitBrieflyWaitsAsLongAsTheSpin) {
  for (const absl::Duration spin : {absl::Seconds(30), absl::Seconds(1)}) {
    SCOPED_TRACE(absl::StrCat("spin ", absl::FormatDuration(spin)));
    EndpointWithRawPeer e = NewEndpointWithRawPeer(spin);
    ASSERT_NE(e.endpoint, nullptr);
    // Once this arrives the connection is known (a brief wait needs one to read).
    WriteFrame(e.raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 0}, 1}, Bytes("x"));
    EXPECT_EQ(RecvString(*e.endpoint, e.peer.address, Tag{.seq = 0}, 1), "x");
    std::string text(4, '\0');
    std::unique_ptr<PostedRecv> posted =
        e.endpoint->PostRecv(e.peer.address, Tag{.seq = 1}, std::as_writable_bytes(std::span(text)),
                             absl::Now() + absl::Minutes(2), nullptr);
    absl::Time start = absl::Now();
    if (spin == absl::Seconds(30)) {
      auto writer = std::async(std::launch::async, [&e] {
        absl::SleepFor(absl::Milliseconds(20));
        WriteFrame(e.raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, 4}, Bytes("soon"));
      });
      EXPECT_TRUE(posted->WaitBriefly());
      EXPECT_LT(absl::Now() - start, spin) << "the message ends the brief wait";
      EXPECT_EQ(text, "soon");
      continue;
    }
    EXPECT_FALSE(posted->WaitBriefly());
    EXPECT_GE(absl::Now() - start, spin - absl::Milliseconds(10));
    // That wait outlasted the spin, so the next one does not spin.
    start = absl::Now();
    EXPECT_FALSE(posted->WaitBriefly());
    EXPECT_LT(absl::Now() - start, spin / 2);
    WriteFrame(e.raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 1}, 4}, Bytes("late"));
    ASSERT_TRUE(posted->Wait().ok());
    EXPECT_EQ(text, "late");
  }
}

// RoundTrip: a ping frame that the peer's endpoint answers with a pong, also while bulk data
// flows both ways on the connection; neither counts as a message.
TEST(TcpTransportTest, RoundTripIsAnsweredByThePeersEndpoint) {
  auto a = NewLoopbackEndpoint();
  auto b = NewLoopbackEndpoint();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<absl::Duration> there = a->RoundTrip(b->address(), Deadline());
    ASSERT_TRUE(there.ok()) << there.status();
    EXPECT_GT(*there, absl::ZeroDuration());
    absl::StatusOr<absl::Duration> back = b->RoundTrip(a->address(), Deadline());
    ASSERT_TRUE(back.ok()) << back.status();
  }
  EXPECT_EQ(StatsFor(*a, b->address()).tx_messages, 0u);
  EXPECT_EQ(StatsFor(*b, a->address()).rx_messages, 0u);

  const std::string big(size_t{4} << 20, 'b');
  for (uint64_t seq = 1; seq <= 8; ++seq) {
    auto bulk = std::async(std::launch::async, [&] {
      return a->Send(b->address(), Tag{.comm = 7, .seq = seq}, Bytes(big), Deadline());
    });
    auto pings = std::async(std::launch::async, [&] {
      for (int i = 0; i < 5; ++i) {
        absl::StatusOr<absl::Duration> rtt = a->RoundTrip(b->address(), Deadline());
        if (!rtt.ok()) return rtt.status();
      }
      return absl::OkStatus();
    });
    std::string received(big.size(), '\0');
    ASSERT_TRUE(b->Recv(a->address(), Tag{.comm = 7, .seq = seq},
                        std::as_writable_bytes(std::span(received)), Deadline())
                    .ok());
    EXPECT_EQ(received, big);
    EXPECT_TRUE(bulk.get().ok());
    EXPECT_TRUE(pings.get().ok());
  }
  EXPECT_EQ(StatsFor(*a, b->address()).tx_messages, 8u);
}

// The wire: a ping carries 8 bytes that the pong returns; a peer that does not answer makes the
// round trip end at its deadline, and a pong nobody waits for is dropped without harm.
TEST(TcpTransportTest, RoundTripOnTheWire) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  RawListener peer = BindLoopback(/*listening=*/true);
  auto silent = std::async(std::launch::async, [&] {
    return endpoint->RoundTrip(peer.address, Deadline(absl::Milliseconds(300)));
  });
  FileDescriptor conn = AcceptWithin(peer.fd.get(), absl::Seconds(10));
  ASSERT_TRUE(conn.valid());
  ASSERT_EQ(AcceptHello(conn.get(), peer.address), endpoint->address());
  const FrameHeader ping = ReadHeader(conn.get());
  EXPECT_EQ(ping.type, FrameType::kPing);
  EXPECT_EQ(ping.tag, Tag{});
  ASSERT_EQ(ping.payload_bytes, kPingPayloadBytes);
  const std::string first_id = ReadString(conn.get(), kPingPayloadBytes);
  EXPECT_EQ(silent.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  // Its late pong is dropped, and the connection still carries data.
  WriteFrame(conn.get(), FrameHeader{FrameType::kPong, Tag{}, kPingPayloadBytes}, Bytes(first_id));

  auto answered =
      std::async(std::launch::async, [&] { return endpoint->RoundTrip(peer.address, Deadline()); });
  ASSERT_EQ(ReadHeader(conn.get()).type, FrameType::kPing);
  const std::string id = ReadString(conn.get(), kPingPayloadBytes);
  EXPECT_NE(id, first_id);
  WriteFrame(conn.get(), FrameHeader{FrameType::kPong, Tag{}, kPingPayloadBytes}, Bytes(id));
  absl::StatusOr<absl::Duration> rtt = answered.get();
  ASSERT_TRUE(rtt.ok()) << rtt.status();

  // The endpoint answers the peer's ping with the same 8 bytes.
  WriteFrame(conn.get(), FrameHeader{FrameType::kPing, Tag{}, kPingPayloadBytes},
             Bytes("12345678"));
  const FrameHeader pong = ReadHeader(conn.get());
  EXPECT_EQ(pong.type, FrameType::kPong);
  ASSERT_EQ(pong.payload_bytes, kPingPayloadBytes);
  EXPECT_EQ(ReadString(conn.get(), kPingPayloadBytes), "12345678");
  WriteFrame(conn.get(), FrameHeader{FrameType::kData, Tag{.seq = 3}, 4}, Bytes("data"));
  EXPECT_EQ(RecvString(*endpoint, peer.address, Tag{.seq = 3}, 4), "data");
}

TEST(TcpTransportTest, SendToAPeerThatDoesNotReadEndsAtTheDeadlineOrOnAbort) {
  auto endpoint = NewLoopbackEndpoint();
  ASSERT_NE(endpoint, nullptr);
  // Listening but never accepting: the kernel completes connections, nobody reads them.
  RawListener peer = BindLoopback(/*listening=*/true);
  const std::vector<std::byte> big(size_t{64} << 20);
  const absl::Time start = absl::Now();
  const absl::Status timed_out =
      endpoint->Send(peer.address, Tag{.seq = 1}, big, start + absl::Milliseconds(300));
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded) << timed_out;
  EXPECT_THAT(timed_out.message(), HasSubstr(peer.address));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  auto blocked = std::async(std::launch::async, [&] {
    return endpoint->Send(peer.address, Tag{.comm = 9, .seq = 2}, big, Deadline());
  });
  absl::SleepFor(absl::Milliseconds(100));  // correct whether or not the Send is blocked yet
  const absl::Time abort_time = absl::Now();
  endpoint->Abort(9, absl::AbortedError("job cancelled"));
  EXPECT_EQ(blocked.get(), absl::AbortedError("job cancelled"));
  EXPECT_LT(absl::Now() - abort_time, absl::Seconds(10));
}

// Handshake keys as a test wants them: what each endpoint presents to each peer and expects from
// each, and how often a key was fetched again.
class FakeKeys final : public HandshakeKeys {
 public:
  void Present(const std::string& peer, const HandshakeKey& key) {
    absl::MutexLock lock(&mu_);
    present_[peer] = key;
  }
  void Expect(const std::string& peer, const HandshakeKey& key) {
    absl::MutexLock lock(&mu_);
    expect_[peer] = key;
  }
  int refreshes() const {
    absl::MutexLock lock(&mu_);
    return refreshes_;
  }
  absl::StatusOr<HandshakeKey> ToConnect(const std::string& peer, bool refresh,
                                         absl::Time) override {
    absl::MutexLock lock(&mu_);
    refreshes_ += refresh ? 1 : 0;
    auto it = present_.find(peer);
    if (it == present_.end()) return absl::NotFoundError("no key for " + peer);
    return it->second;
  }
  absl::StatusOr<HandshakeKey> ToAccept(const std::string& peer) override {
    absl::MutexLock lock(&mu_);
    auto it = expect_.find(peer);
    if (it == expect_.end()) return absl::PermissionDeniedError("nobody issued a key for " + peer);
    return it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, HandshakeKey> present_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, HandshakeKey> expect_ ABSL_GUARDED_BY(mu_);
  int refreshes_ ABSL_GUARDED_BY(mu_) = 0;
};

HandshakeKey KeyOf(char fill) {
  HandshakeKey key;
  key.fill(static_cast<std::byte>(fill));
  return key;
}

std::unique_ptr<Endpoint> NewKeyedEndpoint(FakeKeys* keys,
                                           TcpOptions options = Options("127.0.0.1:0")) {
  options.handshake_keys = keys;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Endpoints that share a key talk; one that presents another key is refused after fetching it
// once more, and nothing it sent arrives.
TEST(TcpHandshakeTest, OnlyAConnectionThatProvesTheKeyOfItsAddressIsBelieved) {
  FakeKeys a_keys, b_keys, c_keys;
  auto a = NewKeyedEndpoint(&a_keys);
  auto b = NewKeyedEndpoint(&b_keys);
  auto c = NewKeyedEndpoint(&c_keys);
  ASSERT_TRUE(a && b && c);
  a_keys.Present(b->address(), KeyOf('k'));
  b_keys.Expect(a->address(), KeyOf('k'));
  c_keys.Present(b->address(), KeyOf('x'));  // not what b issued for c
  b_keys.Expect(c->address(), KeyOf('c'));
  ASSERT_TRUE(a->Send(b->address(), Tag{.seq = 1}, Bytes("from a"), Deadline()).ok());
  EXPECT_EQ(RecvString(*b, a->address(), Tag{.seq = 1}, 6), "from a");

  const absl::Status refused = c->Send(b->address(), Tag{.seq = 1}, Bytes("from c"), Deadline());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("could not prove it holds the handshake key"));
  EXPECT_EQ(c_keys.refreshes(), 1);
  std::string nothing(6, '\0');
  EXPECT_TRUE(absl::IsDeadlineExceeded(b->Recv(c->address(), Tag{.seq = 1},
                                               std::as_writable_bytes(std::span(nothing)),
                                               absl::Now() + absl::Milliseconds(200))));
  // Once c has the right key it is served.
  c_keys.Present(b->address(), KeyOf('c'));
  ASSERT_TRUE(c->Send(b->address(), Tag{.seq = 2}, Bytes("from c"), Deadline()).ok());
  EXPECT_EQ(RecvString(*b, c->address(), Tag{.seq = 2}, 6), "from c");
}

// A process that connects and claims to be a peer, without that peer's key, learns nothing and
// injects nothing: its connection is closed before any frame of it is read, and the endpoint
// still reaches the real peer on a connection of its own.
TEST(TcpHandshakeTest, ASpoofedHelloGetsNothingAndInjectsNothing) {
  FakeKeys a_keys, b_keys;
  auto a = NewKeyedEndpoint(&a_keys);
  auto b = NewKeyedEndpoint(&b_keys);
  ASSERT_TRUE(a && b);
  a_keys.Present(b->address(), KeyOf('k'));
  b_keys.Expect(a->address(), KeyOf('k'));
  b_keys.Present(a->address(), KeyOf('m'));
  a_keys.Expect(b->address(), KeyOf('m'));

  FileDescriptor raw = RawConnect(b->address());
  const absl::Status spoofed =
      tcp::Introduce(raw.get(), a->address(), b->address(), kNoHandshakeKey, /*seal=*/false,
                     Deadline(), [] { return false; })
          .status();
  // b's challenge proves nothing the attacker can check; it sends a proof anyway, then data.
  EXPECT_TRUE(absl::IsPermissionDenied(spoofed)) << spoofed;
  std::array<std::byte, kHandshakeProofBytes> proof{};
  WriteFrame(raw.get(), FrameHeader{FrameType::kProof, Tag{}, proof.size()}, proof);
  WriteFrame(raw.get(), FrameHeader{FrameType::kData, Tag{.seq = 7}, 6}, Bytes("forged"));
  EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10)));

  // b's message for a goes to a, on a connection b opens and a proves.
  ASSERT_TRUE(b->Send(a->address(), Tag{.seq = 7}, Bytes("for a!"), Deadline()).ok());
  EXPECT_EQ(RecvString(*a, b->address(), Tag{.seq = 7}, 6), "for a!");
  std::string nothing(6, '\0');
  EXPECT_TRUE(absl::IsDeadlineExceeded(b->Recv(a->address(), Tag{.seq = 7},
                                               std::as_writable_bytes(std::span(nothing)),
                                               absl::Now() + absl::Milliseconds(200))));
}

// Connections that never finish the handshake are closed after handshake_timeout, and no more
// than max_pending_handshakes wait at once (the rest are closed on arrival): a flood of them
// leaves no descriptor behind and does not keep real peers out.
TEST(TcpHandshakeTest, ConnectionsThatNeverIntroduceThemselvesAreClosedAndBounded) {
  TcpOptions options = Options("127.0.0.1:0");
  options.handshake_timeout = absl::Milliseconds(300);
  options.max_pending_handshakes = 8;
  absl::StatusOr<std::unique_ptr<Endpoint>> created = NewTcpEndpoint(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Endpoint> endpoint = *std::move(created);
  auto open_fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator());
  };
  const auto before = open_fds();
  {
    std::vector<FileDescriptor> silent;
    for (int i = 0; i < 200; ++i) silent.push_back(RawConnect(endpoint->address()));
    const absl::Time start = absl::Now();
    for (FileDescriptor& fd : silent) EXPECT_TRUE(ClosedWithin(fd.get(), absl::Seconds(10)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  auto peer = NewLoopbackEndpoint();
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->Send(endpoint->address(), Tag{.seq = 1}, Bytes("still"), Deadline()).ok());
  EXPECT_EQ(RecvString(*endpoint, peer->address(), Tag{.seq = 1}, 5), "still");
  // The peer's endpoint and its connection are the only descriptors left over.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (open_fds() > before + 8 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_LE(open_fds(), before + 8);
}

}  // namespace
}  // namespace baton::transport
