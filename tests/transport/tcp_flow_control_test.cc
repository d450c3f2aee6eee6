// Flow control on TCP (transport/flow_control.h): a peer that ignores the credit it was granted
// is refused without the endpoint keeping more than its window, and without harm to other peers;
// SendAll takes credit a message at a time when its messages do not fit at once.

#include <sys/socket.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/flow_control.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Endpoint> NewEndpoint(uint64_t window) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_unexpected_bytes_per_peer = window;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// A raw peer floods the endpoint with eager messages, ignoring its credit: the messages within
// the credit are kept, the first beyond it is dropped and counted, the peer's connection is
// closed and its receives fail with DataLoss naming it at once; another peer exchanging messages
// with the endpoint meanwhile notices nothing.
TEST(TcpFlowControlTest, ARawPeerThatIgnoresItsCreditIsRefusedAndOthersAreNot) {
  constexpr uint64_t kWindow = 8192;
  constexpr size_t kSize = 1000;  // a charge of 1064: seven fit in the window
  constexpr uint64_t kKept = kWindow / CreditCharge(kSize);
  constexpr uint64_t kFlood = 200;
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(kWindow);
  ASSERT_NE(endpoint, nullptr);
  std::unique_ptr<Endpoint> honest = NewEndpoint(kWindow);
  ASSERT_NE(honest, nullptr);
  const std::string flooder = "flooder:1";
  FileDescriptor raw = RawConnect(endpoint->address());
  WriteHello(raw.get(), flooder);  // reads the endpoint's credit, and ignores it from here on

  auto flood = std::async(std::launch::async, [&] {
    const std::vector<std::byte> payload = Pattern(kSize, 1);
    for (uint64_t seq = 0; seq < kFlood; ++seq) {
      std::array<std::byte, kFrameHeaderBytes> header;
      EncodeFrameHeader(FrameHeader{FrameType::kData, Tag{.comm = 1, .seq = seq}, kSize}, header);
      std::array<iovec, 2> iov{iovec{header.data(), header.size()},
                               iovec{const_cast<std::byte*>(payload.data()), payload.size()}};
      size_t written = 0;
      // Fails once the endpoint has closed the connection: that is the point.
      if (!WriteFull(raw.get(), iov, Deadline(absl::Seconds(10)), &written).ok()) return seq;
    }
    return kFlood;
  });
  auto exchange = std::async(std::launch::async, [&]() -> absl::Status {
    for (uint64_t seq = 0; seq < 50; ++seq) {
      const std::vector<std::byte> sent = Pattern(kSize, seq);
      BATON_RETURN_IF_ERROR(
          honest->Send(endpoint->address(), Tag{.comm = 2, .seq = seq}, sent, Deadline()));
      std::vector<std::byte> received(kSize);
      BATON_RETURN_IF_ERROR(
          endpoint->Recv(honest->address(), Tag{.comm = 2, .seq = seq}, received, Deadline()));
      if (received != sent) return absl::DataLossError("the honest peer's bytes differ");
      BATON_RETURN_IF_ERROR(
          endpoint->Send(honest->address(), Tag{.comm = 2, .seq = seq}, received, Deadline()));
      BATON_RETURN_IF_ERROR(
          honest->Recv(endpoint->address(), Tag{.comm = 2, .seq = seq}, received, Deadline()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(ClosedWithin(raw.get(), absl::Seconds(10))) << "the flooder is still connected";
  flood.get();  // (how much of the flood the kernel took before the close depends on its buffers)
  const absl::Status honest_status = exchange.get();
  EXPECT_TRUE(honest_status.ok()) << honest_status;

  // What came within the credit stays receivable.
  for (uint64_t seq = 0; seq < kKept; ++seq) {
    std::vector<std::byte> received(kSize);
    ASSERT_TRUE(endpoint->Recv(flooder, Tag{.comm = 1, .seq = seq}, received, Deadline()).ok());
  }
  // Nothing beyond it was kept: its receives fail at once, naming the peer.
  for (const uint64_t seq : {kKept, kFlood - 1}) {
    std::vector<std::byte> received(kSize);
    const absl::Time start = absl::Now();
    const absl::Status refused = endpoint->Recv(flooder, Tag{.comm = 1, .seq = seq}, received,
                                                absl::Now() + absl::Seconds(60));
    EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
    EXPECT_THAT(refused.message(), HasSubstr(flooder));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  }
  EXPECT_EQ(StatsFor(*endpoint, flooder).Counter(kCreditViolationsCounter), 1u);
  EXPECT_EQ(StatsFor(*endpoint, flooder).rx_messages, kKept);
  EXPECT_EQ(StatsFor(*endpoint, honest->address()).Counter(kCreditViolationsCounter), 0u);
}

// SendAll whose messages together are more than an eager message may be sends them one at a
// time, each with its own credit, and completes as the receiver takes them.
TEST(TcpFlowControlTest, SendAllBeyondTheWindowGoesAMessageAtATime) {
  constexpr uint64_t kWindow = 4096;
  std::unique_ptr<Endpoint> sender = NewEndpoint(kWindow);
  std::unique_ptr<Endpoint> receiver = NewEndpoint(kWindow);
  ASSERT_NE(sender, nullptr);
  ASSERT_NE(receiver, nullptr);
  std::vector<std::vector<std::byte>> payloads;
  std::vector<OutMessage> messages;
  for (uint64_t seq = 0; seq < 20; ++seq) payloads.push_back(Pattern(300 + seq, seq));
  for (uint64_t seq = 0; seq < 20; ++seq)
    messages.push_back({Tag{.comm = 1, .seq = seq}, payloads[seq]});
  // One of rendezvous size among them.
  const std::vector<std::byte> large = Pattern(20000, 99);
  messages.push_back({Tag{.comm = 1, .seq = 20}, large});
  auto sent = std::async(std::launch::async, [&] {
    return sender->SendAll(receiver->address(), messages, Deadline());
  });
  for (uint64_t seq = 0; seq <= 20; ++seq) {
    std::vector<std::byte> received(messages[seq].data.size());
    ASSERT_TRUE(
        receiver->Recv(sender->address(), Tag{.comm = 1, .seq = seq}, received, Deadline()).ok());
    EXPECT_TRUE(std::equal(received.begin(), received.end(), messages[seq].data.begin()));
  }
  const absl::Status status = sent.get();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(StatsFor(*receiver, sender->address()).Counter(kCreditViolationsCounter), 0u);
}

}  // namespace
}  // namespace baton::transport
