// The conformance suite every transport passes: the contract of transport/transport.h, run against
// each implementation with several endpoints in one process.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/flow_control.h"
#include "transport/forwarding_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

#define ASSERT_OK(expr)                   \
  do {                                    \
    const absl::Status status_ = (expr);  \
    ASSERT_TRUE(status_.ok()) << status_; \
  } while (0)
#define EXPECT_OK(expr)                   \
  do {                                    \
    const absl::Status status_ = (expr);  \
    EXPECT_TRUE(status_.ok()) << status_; \
  } while (0)

constexpr absl::Duration kLongDeadline = absl::Seconds(30);
// How much sooner than its deadline a receive must fail when it is failed on purpose.
constexpr absl::Duration kPrompt = absl::Seconds(10);

absl::Time Deadline(absl::Duration timeout = kLongDeadline) { return absl::Now() + timeout; }

std::vector<std::byte> Pattern(size_t size, uint64_t seed) {
  std::vector<std::byte> data(size);
  for (size_t i = 0; i < size; ++i)
    data[i] = static_cast<std::byte>((i * 131 + seed * 7 + 1) & 0xff);
  return data;
}

// Gives a concurrent receive time to get posted. The tests are correct whether or not it was.
void LetReceiverPost() { absl::SleepFor(absl::Milliseconds(20)); }

// Waits (bounded) until `done()` holds; for conditions that only counters can show.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

LinkStats StatsFor(const Endpoint& endpoint, const std::string& peer) {
  for (const LinkStats& link : endpoint.Stats()) {
    if (link.peer == peer) return link;
  }
  return LinkStats{};
}

// A transport under test.
class TransportHarness {
 public:
  virtual ~TransportHarness() = default;
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> NewEndpoint(int index) = 0;
  // Makes endpoints[index] lost to its peers, as if its process died; may destroy it.
  virtual void KillEndpoint(std::vector<std::unique_ptr<Endpoint>>& endpoints, int index) = 0;
  // What the transport counts in LinkStats per message beyond its payload (its framing).
  virtual uint64_t message_overhead_bytes() const = 0;
};

class InMemoryHarness final : public TransportHarness {
 public:
  // `connection_data`: links carry nothing until the endpoints exchanged connection data
  // (InMemoryFabricOptions::require_connection_data), which MakeEndpoints does. `window`:
  // InMemoryFabricOptions::max_unexpected_bytes_per_peer (0: no flow control).
  explicit InMemoryHarness(bool connection_data = false, uint64_t window = 0)
      : fabric_(NewInMemoryFabric({.require_connection_data = connection_data,
                                   .max_unexpected_bytes_per_peer = window})) {}
  absl::StatusOr<std::unique_ptr<Endpoint>> NewEndpoint(int index) override {
    return fabric_->CreateEndpoint(absl::StrCat("mem-", index));
  }
  void KillEndpoint(std::vector<std::unique_ptr<Endpoint>>& endpoints, int index) override {
    fabric_->Kill(endpoints[index]->address());
  }
  uint64_t message_overhead_bytes() const override { return 0; }

 private:
  std::unique_ptr<InMemoryFabric> fabric_;
};

class TcpHarness final : public TransportHarness {
 public:
  // `window`: TcpOptions::max_unexpected_bytes_per_peer; 0 keeps the default.
  explicit TcpHarness(int streams_per_peer = 1, bool checksum = false, bool seal = false,
                      uint64_t window = 0)
      : streams_per_peer_(streams_per_peer), checksum_(checksum), seal_(seal), window_(window) {}
  absl::StatusOr<std::unique_ptr<Endpoint>> NewEndpoint(int index) override {
    TcpOptions options;
    options.listen_address = "127.0.0.1:0";  // loopback and port 0 only, in every test
    options.streams_per_peer = streams_per_peer_;
    options.checksum = checksum_;
    options.seal = seal_;
    if (window_ > 0) options.max_unexpected_bytes_per_peer = window_;
    return NewTcpEndpoint(options);
  }
  void KillEndpoint(std::vector<std::unique_ptr<Endpoint>>& endpoints, int index) override {
    endpoints[index].reset();
  }
  uint64_t message_overhead_bytes() const override { return kFrameHeaderBytes; }

 private:
  const int streams_per_peer_;
  const bool checksum_;
  const bool seal_;
  const uint64_t window_;
};

// An endpoint that forwards everything but PostConsume, so that the interface's own PostConsume
// (a receive into a buffer, handed over whole) is what runs.
class DefaultConsumeEndpoint final : public ForwardingEndpoint {
 public:
  explicit DefaultConsumeEndpoint(std::unique_ptr<Endpoint> inner)
      : ForwardingEndpoint(inner.get()), owned_(std::move(inner)) {}
  std::unique_ptr<PostedRecv> PostConsume(const std::string& peer, const Tag& tag, size_t length,
                                          absl::Time deadline, PieceConsumer consume) override {
    return Endpoint::PostConsume(peer, tag, length, deadline, std::move(consume));
  }

 private:
  const std::unique_ptr<Endpoint> owned_;
};

class DefaultConsumeHarness final : public TransportHarness {
 public:
  absl::StatusOr<std::unique_ptr<Endpoint>> NewEndpoint(int index) override {
    absl::StatusOr<std::unique_ptr<Endpoint>> inner = inner_.NewEndpoint(index);
    if (!inner.ok()) return inner.status();
    return std::make_unique<DefaultConsumeEndpoint>(*std::move(inner));
  }
  void KillEndpoint(std::vector<std::unique_ptr<Endpoint>>& endpoints, int index) override {
    inner_.KillEndpoint(endpoints, index);
  }
  uint64_t message_overhead_bytes() const override { return inner_.message_overhead_bytes(); }

 private:
  InMemoryHarness inner_;
};

struct TransportParam {
  std::string name;
  std::function<std::unique_ptr<TransportHarness>()> make;
};

class TransportConformanceTest : public ::testing::TestWithParam<TransportParam> {
 protected:
  void SetUp() override { harness_ = GetParam().make(); }
  void TearDown() override {
    endpoints_.clear();  // before the harness, which may own their fabric
    harness_.reset();
  }

  void MakeEndpoints(int count) {
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = harness_->NewEndpoint(i);
      ASSERT_TRUE(endpoint.ok()) << endpoint.status();
      addresses_.push_back((*endpoint)->address());
      endpoints_.push_back(*std::move(endpoint));
    }
    ConnectAll();
  }
  // What the daemons do when a communicator forms: every pair of endpoints exchanges its
  // connection data (nothing, for a transport that has none).
  void ConnectAll() {
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      for (size_t j = 0; j < endpoints_.size(); ++j) {
        if (i == j) continue;
        absl::StatusOr<std::string> data = endpoints_[j]->ConnectionData(addresses_[i]);
        ASSERT_TRUE(data.ok()) << data.status();
        ASSERT_OK(endpoints_[i]->Connect(addresses_[j], *data));
      }
    }
  }
  Endpoint& ep(int i) { return *endpoints_[i]; }
  const std::string& addr(int i) const { return addresses_[i]; }

  std::unique_ptr<TransportHarness> harness_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::string> addresses_;
};

TEST_P(TransportConformanceTest, SmallMessage) {
  MakeEndpoints(2);
  const Tag tag{.comm = 7, .seq = 1, .step = 2, .part = 3};
  const std::vector<std::byte> sent = Pattern(100, 1);
  ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
  std::vector<std::byte> received(100);
  ASSERT_OK(ep(1).Recv(addr(0), tag, received, Deadline()));
  EXPECT_EQ(received, sent);
}

// SendAll hands several messages over at once; each arrives as if sent alone, the receives
// posted before and after.
TEST_P(TransportConformanceTest, SendAllDeliversEveryMessage) {
  MakeEndpoints(2);
  const std::vector<std::byte> small = Pattern(32, 1), large = Pattern(size_t{3} << 20, 2);
  const Tag a{.comm = 5, .seq = 1, .step = 0xFFFFFFFFu}, b{.comm = 5, .seq = 1, .step = 0},
      c{.comm = 5, .seq = 1, .step = 1};
  std::vector<std::byte> got_small(small.size()), got_large(large.size());
  std::unique_ptr<PostedRecv> posted = ep(1).PostRecv(addr(0), b, got_large, Deadline(), nullptr);
  const OutMessage messages[] = {{a, small}, {b, large}, {c, {}}};
  ASSERT_OK(ep(0).SendAll(addr(1), messages, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), a, got_small, Deadline()));
  ASSERT_OK(posted->Wait());
  ASSERT_OK(ep(1).Recv(addr(0), c, {}, Deadline()));
  EXPECT_EQ(got_small, small);
  EXPECT_EQ(got_large, large);
  EXPECT_TRUE(WaitUntil([&] { return StatsFor(ep(0), addr(1)).tx_messages == 3; }));
  EXPECT_OK(ep(0).SendAll(addr(1), {}, Deadline()));
}

// More messages than one system call takes pieces (IOV_MAX, 1024 here; two per message) still go
// in one SendAll.
TEST_P(TransportConformanceTest, SendAllOfMoreMessagesThanOneWriteTakes) {
  MakeEndpoints(2);
  constexpr size_t kMessages = 1500;
  std::vector<std::vector<std::byte>> sent, received;
  std::vector<OutMessage> messages;
  std::vector<std::unique_ptr<PostedRecv>> posted;
  for (size_t i = 0; i < kMessages; ++i) {
    sent.push_back(Pattern(1 + i % 97, static_cast<int>(i)));
    received.emplace_back(sent.back().size());
  }
  for (size_t i = 0; i < kMessages; ++i) {
    const Tag tag{.comm = 5, .seq = 2, .step = 1, .part = static_cast<uint32_t>(i)};
    messages.push_back({tag, sent[i]});
    posted.push_back(ep(1).PostRecv(addr(0), tag, received[i], Deadline(), nullptr));
  }
  ASSERT_OK(ep(0).SendAll(addr(1), messages, Deadline()));
  for (size_t i = 0; i < kMessages; ++i) {
    const absl::Status status = posted[i]->Wait();
    ASSERT_TRUE(status.ok()) << "message " << i << ": " << status;
    EXPECT_EQ(received[i], sent[i]) << "message " << i;
  }
}

TEST_P(TransportConformanceTest, SendAllOfTwoCommunicatorsIsRefusedBeforeAnythingIsSent) {
  MakeEndpoints(2);
  const std::vector<std::byte> data = Pattern(8, 3);
  const Tag first{.comm = 5, .seq = 1}, other{.comm = 6, .seq = 1};
  const OutMessage messages[] = {{first, data}, {other, data}};
  const absl::Status status = ep(0).SendAll(addr(1), messages, Deadline());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  std::vector<std::byte> received(data.size());
  EXPECT_EQ(ep(1).Recv(addr(0), first, received, Deadline(absl::Milliseconds(200))).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(TransportConformanceTest, LargeMessagesPostedBeforeAndAfterArrival) {
  MakeEndpoints(2);
  constexpr size_t kSize = size_t{64} << 20;
  const std::vector<std::byte> sent = Pattern(kSize, 2);
  {
    // Posted first (the transport may write straight into this buffer).
    std::vector<std::byte> received(kSize);
    auto recv = std::async(std::launch::async, [&] {
      return ep(1).Recv(addr(0), Tag{.comm = 1, .seq = 1}, received, Deadline());
    });
    LetReceiverPost();
    ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 1, .seq = 1}, sent, Deadline()));
    ASSERT_OK(recv.get());
    EXPECT_TRUE(received == sent) << "64 MiB payload differs (posted receive)";
  }
  {
    // Sent first (buffered as an unexpected message, or still in flight: with flow control a
    // message this large waits for its receive, so the send runs beside it).
    auto send = std::async(std::launch::async, [&] {
      return ep(0).Send(addr(1), Tag{.comm = 1, .seq = 2}, sent, Deadline());
    });
    std::vector<std::byte> received(kSize);
    ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 1, .seq = 2}, received, Deadline()));
    ASSERT_OK(send.get());
    EXPECT_TRUE(received == sent) << "64 MiB payload differs (unexpected message)";
  }
}

TEST_P(TransportConformanceTest, PostedReceivesCompleteInAnyOrder) {
  MakeEndpoints(2);
  constexpr int kMessages = 8;
  constexpr size_t kSize = size_t{1} << 20;
  std::vector<std::vector<std::byte>> received(kMessages, std::vector<std::byte>(kSize));
  std::vector<std::unique_ptr<PostedRecv>> posted;
  for (int i = 0; i < kMessages; ++i) {
    posted.push_back(ep(1).PostRecv(addr(0), Tag{.comm = 2, .seq = 1, .part = uint32_t(i)},
                                    received[i], Deadline(), nullptr));
  }
  // A second receive for a posted tag is refused; the first one is unaffected.
  std::vector<std::byte> twice(kSize);
  EXPECT_EQ(ep(1).Recv(addr(0), Tag{.comm = 2, .seq = 1, .part = 3}, twice, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
  // Sent in reverse order, waited for in order.
  for (int i = kMessages - 1; i >= 0; --i) {
    ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 2, .seq = 1, .part = uint32_t(i)},
                         Pattern(kSize, 100 + i), Deadline()));
  }
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_OK(posted[i]->Wait());
    EXPECT_OK(posted[i]->Wait());  // the same result again
    EXPECT_TRUE(received[i] == Pattern(kSize, 100 + i)) << "message " << i;
  }
}

TEST_P(TransportConformanceTest, DestroyedPostedReceiveIsWithdrawn) {
  MakeEndpoints(2);
  const Tag tag{.comm = 3, .seq = 1};
  {
    std::vector<std::byte> abandoned(64, std::byte{0x5A});
    std::unique_ptr<PostedRecv> posted =
        ep(1).PostRecv(addr(0), tag, abandoned, Deadline(), nullptr);
    posted.reset();
    EXPECT_EQ(abandoned, std::vector<std::byte>(64, std::byte{0x5A}));
  }
  // The message now finds no receive and waits for the next one with its tag.
  const std::vector<std::byte> sent = Pattern(64, 3);
  ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
  std::vector<std::byte> received(64);
  ASSERT_OK(ep(1).Recv(addr(0), tag, received, Deadline()));
  EXPECT_EQ(received, sent);
}

TEST_P(TransportConformanceTest, PostedReceiveFailsWithTheAbortReasonAndAtItsDeadline) {
  MakeEndpoints(2);
  std::vector<std::byte> buffer(16);
  const absl::Time start = absl::Now();
  std::unique_ptr<PostedRecv> timed = ep(1).PostRecv(addr(0), Tag{.comm = 4, .seq = 1}, buffer,
                                                     Deadline(absl::Milliseconds(50)), nullptr);
  std::unique_ptr<PostedRecv> aborted =
      ep(1).PostRecv(addr(0), Tag{.comm = 5, .seq = 1}, buffer, Deadline(), nullptr);
  const absl::Status reason = absl::AbortedError("rank 2 failed");
  ep(1).Abort(5, reason);
  EXPECT_EQ(aborted->Wait(), reason);
  const absl::Status timeout = timed->Wait();
  EXPECT_EQ(timeout.code(), absl::StatusCode::kDeadlineExceeded) << timeout;
  EXPECT_THAT(timeout.message(), HasSubstr(addr(0)));
  EXPECT_LT(absl::Now() - start, kPrompt);
}

// Test() says whether Wait would block, and never blocks itself.
TEST_P(TransportConformanceTest, TestTellsWhetherWaitWouldBlock) {
  MakeEndpoints(2);
  std::vector<std::byte> buffer(32);
  std::unique_ptr<PostedRecv> posted =
      ep(1).PostRecv(addr(0), Tag{.comm = 6, .seq = 1}, buffer, Deadline(), nullptr);
  EXPECT_FALSE(posted->Test());
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 6, .seq = 1}, Pattern(32, 6), Deadline()));
  const absl::Time give_up = Deadline(kPrompt);
  while (!posted->Test() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(posted->Test());
  ASSERT_OK(posted->Wait());
  EXPECT_EQ(buffer, Pattern(32, 6));
  std::unique_ptr<PostedRecv> aborted =
      ep(1).PostRecv(addr(0), Tag{.comm = 7, .seq = 1}, buffer, Deadline(), nullptr);
  EXPECT_FALSE(aborted->Test());
  ep(1).Abort(7, absl::AbortedError("stop"));
  EXPECT_TRUE(aborted->Test());
  EXPECT_EQ(aborted->Wait(), absl::AbortedError("stop"));
}

// Once the peers have talked, a receive that is already being waited for (and that a transport
// may be reading for in the waiting thread) still ends promptly on Abort and at its deadline.
TEST_P(TransportConformanceTest, WaitedReceiveEndsOnAbortAndAtItsDeadlineOnAnActiveLink) {
  MakeEndpoints(2);
  std::vector<std::byte> buffer(8);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 8, .seq = 1}, Pattern(8, 1), Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 8, .seq = 1}, buffer, Deadline()));
  ASSERT_OK(ep(1).Send(addr(0), Tag{.comm = 8, .seq = 2}, Pattern(8, 2), Deadline()));
  ASSERT_OK(ep(0).Recv(addr(1), Tag{.comm = 8, .seq = 2}, buffer, Deadline()));
  for (int round = 0; round < 3; ++round) {
    auto waited = std::async(std::launch::async, [&] {
      std::vector<std::byte> mine(8);
      return ep(1).Recv(addr(0), Tag{.comm = 9, .seq = uint64_t(round)}, mine, Deadline());
    });
    absl::SleepFor(absl::Milliseconds(30));  // let it wait; correct either way
    const absl::Time abort_time = absl::Now();
    ep(1).Abort(9, absl::AbortedError("job cancelled"));
    EXPECT_EQ(waited.get(), absl::AbortedError("job cancelled"));
    EXPECT_LT(absl::Now() - abort_time, kPrompt);
    ep(1).Forget(9);
  }
  const absl::Time start = absl::Now();
  std::vector<std::byte> late(8);
  const absl::Status timeout =
      ep(1).Recv(addr(0), Tag{.comm = 8, .seq = 3}, late, Deadline(absl::Milliseconds(100)));
  EXPECT_EQ(timeout.code(), absl::StatusCode::kDeadlineExceeded) << timeout;
  EXPECT_LT(absl::Now() - start, kPrompt);
  // The link still works afterwards.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 8, .seq = 4}, Pattern(8, 4), Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 8, .seq = 4}, buffer, Deadline()));
  EXPECT_EQ(buffer, Pattern(8, 4));
}

TEST_P(TransportConformanceTest, ArrivalCallbackRunsOnceTheMessageIsInTheBuffer) {
  MakeEndpoints(2);
  const std::vector<std::byte> sent = Pattern(4096, 9);
  // Posted before the message arrives, and after (the message already waiting).
  for (bool early : {true, false}) {
    SCOPED_TRACE(early ? "posted before arrival" : "posted after arrival");
    const Tag tag{.comm = 9, .seq = early ? 1u : 2u};
    if (!early) {
      ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
      LetReceiverPost();  // lets the message arrive first (either order is correct)
    }
    std::vector<std::byte> received(sent.size());
    std::atomic<int> calls{0};
    std::vector<std::byte> seen;
    std::unique_ptr<PostedRecv> posted = ep(1).PostRecv(addr(0), tag, received, Deadline(), [&] {
      seen = received;  // the whole message is there already
      ++calls;
    });
    if (early) ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
    ASSERT_OK(posted->Wait());
    EXPECT_EQ(calls.load(), 1);
    EXPECT_TRUE(seen == sent);
  }
  // A receive that fails never calls it; one that calls Abort from it stops the communicator.
  std::vector<std::byte> buffer(16);
  std::atomic<int> calls{0};
  std::unique_ptr<PostedRecv> timed_out = ep(1).PostRecv(
      addr(0), Tag{.comm = 10}, buffer, Deadline(absl::Milliseconds(20)), [&] { ++calls; });
  EXPECT_EQ(timed_out->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(calls.load(), 0);
  const absl::Status reason = absl::FailedPreconditionError("they disagree");
  std::unique_ptr<PostedRecv> signal = ep(1).PostRecv(addr(0), Tag{.comm = 11, .seq = 1}, buffer,
                                                      Deadline(), [&] { ep(1).Abort(11, reason); });
  std::unique_ptr<PostedRecv> stopped =
      ep(1).PostRecv(addr(0), Tag{.comm = 11, .seq = 2}, buffer, Deadline(), nullptr);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 11, .seq = 1}, Pattern(16, 1), Deadline()));
  EXPECT_EQ(stopped->Wait(), reason);
}

// What a consumer of Endpoint::PostConsume was handed, checked against the contract as it runs.
class Consumed {
 public:
  explicit Consumed(size_t length) : bytes_(length) {}
  Endpoint::PieceConsumer Consumer() {
    return [this](size_t offset, ConstByteSpan piece) {
      // In order, back to back, within the message, never empty; aligned unless the last.
      EXPECT_EQ(offset, next_);
      EXPECT_FALSE(piece.empty());
      EXPECT_LE(offset + piece.size(), bytes_.size());
      if (offset + piece.size() < bytes_.size()) {
        EXPECT_EQ(piece.size() % Endpoint::kPieceAlignment, 0u) << "piece at " << offset;
      }
      if (offset + piece.size() <= bytes_.size()) {
        std::copy(piece.begin(), piece.end(), bytes_.begin() + static_cast<ptrdiff_t>(offset));
      }
      next_ = offset + piece.size();
      pieces_.fetch_add(1);
    };
  }
  // Read after the receive completed (which orders them after the consumer's calls).
  const std::vector<std::byte>& bytes() const { return bytes_; }
  size_t consumed() const { return next_; }
  int pieces() const { return pieces_.load(); }

 private:
  std::vector<std::byte> bytes_;
  size_t next_ = 0;
  std::atomic<int> pieces_{0};
};

TEST_P(TransportConformanceTest, ConsumedMessagesArriveWholeInOrderedPieces) {
  MakeEndpoints(2);
  // Below and above the size a TCP receive is read by its waiting thread, and an odd length.
  for (size_t size : {size_t{1000}, size_t{3} * 1024 * 1024 + 5}) {
    const std::vector<std::byte> sent = Pattern(size, size);
    for (bool early : {true, false}) {
      SCOPED_TRACE(absl::StrCat(size, " bytes, ", early ? "posted first" : "sent first"));
      const Tag tag{.comm = 30, .seq = size, .part = early ? 1u : 2u};
      if (!early) {
        ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
        LetReceiverPost();  // lets the message arrive first (either order is correct)
      }
      Consumed consumed(size);
      std::unique_ptr<PostedRecv> posted =
          ep(1).PostConsume(addr(0), tag, size, Deadline(), consumed.Consumer());
      if (early) ASSERT_OK(ep(0).Send(addr(1), tag, sent, Deadline()));
      ASSERT_OK(posted->Wait());
      EXPECT_EQ(consumed.consumed(), size);
      EXPECT_TRUE(consumed.bytes() == sent);
    }
  }
  // An empty message completes without a piece.
  Consumed none(0);
  std::unique_ptr<PostedRecv> empty =
      ep(1).PostConsume(addr(0), Tag{.comm = 31}, 0, Deadline(), none.Consumer());
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 31}, {}, Deadline()));
  ASSERT_OK(empty->Wait());
  EXPECT_EQ(none.pieces(), 0);
}

TEST_P(TransportConformanceTest, ConsumedReceiveFailsAsAReceiveIntoABufferWould) {
  MakeEndpoints(2);
  // The wrong length, whether the message was waiting or not: nothing handed over, both lengths
  // named, and the link still fine.
  const std::vector<std::byte> ten = Pattern(10, 3);
  for (bool early : {true, false}) {
    const Tag tag{.comm = 32, .seq = early ? 1u : 2u};
    if (!early) {
      ASSERT_OK(ep(0).Send(addr(1), tag, ten, Deadline()));
      LetReceiverPost();
    }
    Consumed consumed(8);
    std::unique_ptr<PostedRecv> posted =
        ep(1).PostConsume(addr(0), tag, 8, Deadline(), consumed.Consumer());
    if (early) ASSERT_OK(ep(0).Send(addr(1), tag, ten, Deadline()));
    const absl::Status status = posted->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), HasSubstr("10 bytes"));
    EXPECT_THAT(status.message(), HasSubstr("8 bytes"));
    EXPECT_EQ(consumed.pieces(), 0);
  }
  std::vector<std::byte> received(10);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 32, .seq = 3}, ten, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 32, .seq = 3}, received, Deadline()));
  EXPECT_EQ(received, ten);

  // The abort reason, and the deadline, promptly.
  const absl::Time start = absl::Now();
  Consumed never(16);
  std::unique_ptr<PostedRecv> timed = ep(1).PostConsume(
      addr(0), Tag{.comm = 33}, 16, Deadline(absl::Milliseconds(50)), never.Consumer());
  std::unique_ptr<PostedRecv> aborted =
      ep(1).PostConsume(addr(0), Tag{.comm = 34}, 16, Deadline(), never.Consumer());
  const absl::Status reason = absl::AbortedError("rank 2 failed");
  ep(1).Abort(34, reason);
  EXPECT_EQ(aborted->Wait(), reason);
  EXPECT_EQ(timed->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, kPrompt);
  EXPECT_EQ(never.pieces(), 0);
}

TEST_P(TransportConformanceTest, ZeroLengthMessages) {
  MakeEndpoints(2);
  auto recv = std::async(std::launch::async,
                         [&] { return ep(1).Recv(addr(0), Tag{.seq = 1}, {}, Deadline()); });
  LetReceiverPost();
  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 1}, {}, Deadline()));
  EXPECT_OK(recv.get());

  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 2}, {}, Deadline()));
  EXPECT_OK(ep(1).Recv(addr(0), Tag{.seq = 2}, {}, Deadline()));
  // A zero-length message still has to match in length.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 3}, {}, Deadline()));
  std::vector<std::byte> one(1);
  EXPECT_EQ(ep(1).Recv(addr(0), Tag{.seq = 3}, one, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(TransportConformanceTest, ManyTagsReceivedOutOfOrder) {
  MakeEndpoints(2);
  constexpr int kTags = 64;
  constexpr int kReceivers = 8;
  auto size_of = [](int i) { return static_cast<size_t>(1 + i * 397); };
  // Each receiver takes every kReceivers-th tag, newest first, so most receives are posted before
  // their message arrives and most messages arrive before their receive is posted.
  std::vector<std::future<std::string>> receivers;
  for (int r = 0; r < kReceivers; ++r) {
    receivers.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      std::string failures;
      for (int i = kTags - kReceivers + r; i >= 0; i -= kReceivers) {
        std::vector<std::byte> received(size_of(i));
        const absl::Status status = ep(1).Recv(
            addr(0), Tag{.comm = 3, .seq = 9, .part = uint32_t(i)}, received, Deadline());
        if (!status.ok()) {
          absl::StrAppend(&failures, "tag ", i, ": ", status.ToString(), "; ");
        } else if (received != Pattern(size_of(i), i)) {
          absl::StrAppend(&failures, "tag ", i, ": wrong payload; ");
        }
      }
      return failures;
    }));
  }
  for (int i = 0; i < kTags; ++i) {
    ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 3, .seq = 9, .part = uint32_t(i)},
                         Pattern(size_of(i), i), Deadline()));
  }
  for (auto& receiver : receivers) EXPECT_EQ(receiver.get(), "");
}

TEST_P(TransportConformanceTest, ConcurrentSendersAndReceivers) {
  constexpr int kEndpoints = 4;
  constexpr int kMessages = 20;
  MakeEndpoints(kEndpoints);
  auto size_of = [](int src, int m) { return static_cast<size_t>((m * 997 + src * 13) % 20000); };
  auto tag_of = [](int src, int dst, int m) {
    return Tag{.comm = 11, .seq = uint64_t(m), .step = uint32_t(src), .part = uint32_t(dst)};
  };
  std::vector<std::future<std::string>> tasks;
  for (int src = 0; src < kEndpoints; ++src) {
    for (int dst = 0; dst < kEndpoints; ++dst) {
      if (src == dst) continue;
      tasks.push_back(std::async(std::launch::async, [&, src, dst]() -> std::string {
        for (int m = 0; m < kMessages; ++m) {
          const absl::Status status =
              ep(src).Send(addr(dst), tag_of(src, dst, m), Pattern(size_of(src, m), m), Deadline());
          if (!status.ok()) return absl::StrCat("send ", src, "->", dst, ": ", status.ToString());
        }
        return "";
      }));
      tasks.push_back(std::async(std::launch::async, [&, src, dst]() -> std::string {
        for (int m = 0; m < kMessages; ++m) {
          std::vector<std::byte> received(size_of(src, m));
          const absl::Status status =
              ep(dst).Recv(addr(src), tag_of(src, dst, m), received, Deadline());
          if (!status.ok()) return absl::StrCat("recv ", src, "->", dst, ": ", status.ToString());
          if (received != Pattern(size_of(src, m), m)) {
            return absl::StrCat("recv ", src, "->", dst, " message ", m, ": wrong payload");
          }
        }
        return "";
      }));
    }
  }
  for (auto& task : tasks) EXPECT_EQ(task.get(), "");
}

TEST_P(TransportConformanceTest, LengthMismatchNamesBothLengthsAndThePeer) {
  MakeEndpoints(2);
  const std::vector<std::byte> ten = Pattern(10, 3);
  std::vector<std::byte> eight(8);
  auto posted = std::async(std::launch::async,
                           [&] { return ep(1).Recv(addr(0), Tag{.seq = 1}, eight, Deadline()); });
  LetReceiverPost();
  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 1}, ten, Deadline()));
  const absl::Status first = posted.get();
  EXPECT_EQ(first.code(), absl::StatusCode::kFailedPrecondition) << first;
  EXPECT_THAT(first.message(), HasSubstr("10 bytes"));
  EXPECT_THAT(first.message(), HasSubstr("8 bytes"));
  EXPECT_THAT(first.message(), HasSubstr(addr(0)));

  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 2}, ten, Deadline()));
  std::vector<std::byte> twelve(12);
  const absl::Status second = ep(1).Recv(addr(0), Tag{.seq = 2}, twelve, Deadline());
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_THAT(second.message(), HasSubstr("10 bytes"));
  EXPECT_THAT(second.message(), HasSubstr("12 bytes"));
  EXPECT_THAT(second.message(), HasSubstr(addr(0)));

  // The link is still fine.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = 3}, ten, Deadline()));
  std::vector<std::byte> received(10);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.seq = 3}, received, Deadline()));
  EXPECT_EQ(received, ten);
}

TEST_P(TransportConformanceTest, RecvDeadlineNamesPeerAndTag) {
  MakeEndpoints(2);
  const Tag tag{.comm = 0xabc, .seq = 4, .step = 5, .part = 6};
  std::vector<std::byte> buffer(4);
  const absl::Time start = absl::Now();
  const absl::Status status = ep(1).Recv(addr(0), tag, buffer, start + absl::Milliseconds(100));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr(addr(0)));
  EXPECT_THAT(status.message(), HasSubstr(TagToString(tag)));
  EXPECT_GE(waited, absl::Milliseconds(95));
  EXPECT_LT(waited, kPrompt);
}

TEST_P(TransportConformanceTest, AbortFailsPendingAndLaterOperationsUntilForget) {
  MakeEndpoints(2);
  const absl::Status reason = absl::AbortedError("rank 3 failed");
  std::vector<std::byte> buffer(16);
  const absl::Time start = absl::Now();
  auto pending = std::async(std::launch::async, [&] {
    return ep(1).Recv(addr(0), Tag{.comm = 5, .seq = 1}, buffer, Deadline());
  });
  LetReceiverPost();
  ep(1).Abort(5, reason);
  EXPECT_EQ(pending.get(), reason);
  EXPECT_LT(absl::Now() - start, kPrompt);

  std::vector<std::byte> other(16);
  EXPECT_EQ(ep(1).Recv(addr(0), Tag{.comm = 5, .seq = 2}, other, Deadline()), reason);
  EXPECT_EQ(ep(1).Send(addr(0), Tag{.comm = 5, .seq = 2}, other, Deadline()), reason);

  // Other communicators are unaffected.
  const std::vector<std::byte> sent = Pattern(16, 5);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 6, .seq = 1}, sent, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 6, .seq = 1}, other, Deadline()));
  EXPECT_EQ(other, sent);

  ep(1).Forget(5);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 5, .seq = 3}, sent, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 5, .seq = 3}, buffer, Deadline()));
  EXPECT_EQ(buffer, sent);
  ASSERT_OK(ep(1).Send(addr(0), Tag{.comm = 5, .seq = 4}, sent, Deadline()));
}

TEST_P(TransportConformanceTest, AbortAndForgetDropUnexpectedMessages) {
  MakeEndpoints(2);
  const std::vector<std::byte> sent = Pattern(8, 6);
  std::vector<std::byte> buffer(8);
  for (const bool abort_first : {true, false}) {
    SCOPED_TRACE(abort_first ? "Abort + Forget" : "Forget");
    const uint64_t before = StatsFor(ep(1), addr(0)).rx_messages;
    ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 8, .seq = 1}, sent, Deadline()));
    // Only the counters can tell that the message has been buffered as unexpected.
    ASSERT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).rx_messages > before; }));
    if (abort_first) ep(1).Abort(8, absl::CancelledError("gone"));
    ep(1).Forget(8);
    const absl::Status dropped =
        ep(1).Recv(addr(0), Tag{.comm = 8, .seq = 1}, buffer, Deadline(absl::Milliseconds(100)));
    EXPECT_EQ(dropped.code(), absl::StatusCode::kDeadlineExceeded) << dropped;
    // The communicator works again.
    ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 8, .seq = 1}, sent, Deadline()));
    ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 8, .seq = 1}, buffer, Deadline()));
    EXPECT_EQ(buffer, sent);
  }
}

TEST_P(TransportConformanceTest, RestrictRefusesMessagesFromEndpointsOutsideTheCommunicator) {
  MakeEndpoints(3);
  const std::vector<std::byte> sent = Pattern(8, 9);
  std::vector<std::byte> buffer(8);
  // Kept before the communicator is restricted: one from a member, one from an outsider.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 11, .seq = 1}, sent, Deadline()));
  ASSERT_OK(ep(2).Send(addr(1), Tag{.comm = 11, .seq = 1}, sent, Deadline()));
  ASSERT_TRUE(WaitUntil([&] {
    return StatsFor(ep(1), addr(0)).rx_messages == 1 && StatsFor(ep(1), addr(2)).rx_messages == 1;
  }));
  const std::vector<std::string> members = {addr(0), addr(1)};
  ep(1).Restrict(11, members);
  EXPECT_EQ(StatsFor(ep(1), addr(2)).Counter("refused_messages"), 1u);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 11, .seq = 1}, buffer, Deadline()));
  EXPECT_EQ(buffer, sent);
  // What was kept from the outsider is gone, and what it sends now is dropped as it arrives,
  // even into a receive posted for it.
  EXPECT_EQ(ep(1)
                .Recv(addr(2), Tag{.comm = 11, .seq = 1}, buffer, Deadline(absl::Milliseconds(50)))
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  auto posted = ep(1).PostRecv(addr(2), Tag{.comm = 11, .seq = 2}, buffer,
                               Deadline(absl::Milliseconds(300)), nullptr);
  ASSERT_OK(ep(2).Send(addr(1), Tag{.comm = 11, .seq = 2}, sent, Deadline()));
  ASSERT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(2)).Counter("refused_messages") == 2; }));
  EXPECT_EQ(posted->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  // The outsider's other communicators, and the members, are unaffected.
  ASSERT_OK(ep(2).Send(addr(1), Tag{.comm = 12, .seq = 1}, sent, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(2), Tag{.comm = 12, .seq = 1}, buffer, Deadline()));
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 11, .seq = 2}, sent, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 11, .seq = 2}, buffer, Deadline()));
  EXPECT_EQ(StatsFor(ep(1), addr(0)).Counter("refused_messages"), 0u);
  // Forget lifts the restriction with the rest of the communicator's state.
  ep(1).Forget(11);
  ASSERT_OK(ep(2).Send(addr(1), Tag{.comm = 11, .seq = 3}, sent, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(2), Tag{.comm = 11, .seq = 3}, buffer, Deadline()));
}

TEST_P(TransportConformanceTest, LostPeerFailsPendingAndLaterReceivesPromptly) {
  MakeEndpoints(2);
  const std::vector<std::byte> sent = Pattern(32, 7);
  std::vector<std::byte> buffer(32);
  // Traffic first, so that every transport knows the link.
  ASSERT_OK(ep(1).Send(addr(0), Tag{.seq = 1}, sent, Deadline()));
  ASSERT_OK(ep(0).Recv(addr(1), Tag{.seq = 1}, buffer, Deadline()));
  ASSERT_OK(ep(1).Send(addr(0), Tag{.seq = 2}, sent, Deadline()));
  ASSERT_TRUE(WaitUntil([&] { return StatsFor(ep(0), addr(1)).rx_messages == 2; }));
  EXPECT_TRUE(StatsFor(ep(0), addr(1)).up);

  const absl::Time start = absl::Now();
  auto pending = std::async(std::launch::async, [&] {
    std::vector<std::byte> never(32);
    return ep(0).Recv(addr(1), Tag{.seq = 3}, never, Deadline());
  });
  LetReceiverPost();
  harness_->KillEndpoint(endpoints_, 1);
  const absl::Status lost = pending.get();
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_THAT(lost.message(), HasSubstr(addr(1)));
  EXPECT_LT(absl::Now() - start, kPrompt);

  // What arrived before the loss is still there; anything else fails at once.
  ASSERT_OK(ep(0).Recv(addr(1), Tag{.seq = 2}, buffer, Deadline()));
  EXPECT_EQ(buffer, sent);
  const absl::Time later = absl::Now();
  const absl::Status again = ep(0).Recv(addr(1), Tag{.seq = 4}, buffer, Deadline());
  EXPECT_EQ(again.code(), absl::StatusCode::kUnavailable) << again;
  EXPECT_THAT(again.message(), HasSubstr(addr(1)));
  EXPECT_LT(absl::Now() - later, kPrompt);
  EXPECT_FALSE(StatsFor(ep(0), addr(1)).up);

  const absl::Status send = ep(0).Send(addr(1), Tag{.seq = 5}, sent, Deadline(absl::Seconds(1)));
  EXPECT_EQ(send.code(), absl::StatusCode::kUnavailable) << send;
  EXPECT_THAT(send.message(), HasSubstr(addr(1)));
}

TEST_P(TransportConformanceTest, SendToMissingPeerFailsAtDeadline) {
  MakeEndpoints(2);
  const std::string gone = addr(1);
  endpoints_[1].reset();
  const absl::Time start = absl::Now();
  const absl::Status status =
      ep(0).Send(gone, Tag{.seq = 1}, Pattern(4, 8), start + absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(gone));
  EXPECT_LT(absl::Now() - start, kPrompt);
  EXPECT_EQ(StatsFor(ep(0), gone).errors, 1u);
}

TEST_P(TransportConformanceTest, SendToSelf) {
  MakeEndpoints(1);
  const std::vector<std::byte> sent = Pattern(1000, 9);
  ASSERT_OK(ep(0).Send(addr(0), Tag{.seq = 1}, sent, Deadline()));
  std::vector<std::byte> received(1000);
  ASSERT_OK(ep(0).Recv(addr(0), Tag{.seq = 1}, received, Deadline()));
  EXPECT_EQ(received, sent);
}

TEST_P(TransportConformanceTest, StatsCountPayloadPlusTheTransportsOwnOverhead) {
  MakeEndpoints(2);
  const uint64_t overhead = harness_->message_overhead_bytes();
  const std::vector<size_t> sizes = {0, 1, 1000, size_t{1} << 20};
  uint64_t expected_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_OK(ep(0).Send(addr(1), Tag{.seq = i}, Pattern(sizes[i], i), Deadline()));
    expected_bytes += sizes[i] + overhead;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::byte> received(sizes[i]);
    ASSERT_OK(ep(1).Recv(addr(0), Tag{.seq = i}, received, Deadline()));
  }
  ASSERT_OK(ep(1).Send(addr(0), Tag{.seq = 100}, Pattern(3, 0), Deadline()));

  const LinkStats sender = StatsFor(ep(0), addr(1));
  EXPECT_EQ(sender.peer, addr(1));
  EXPECT_EQ(sender.tx_bytes, expected_bytes);
  EXPECT_EQ(sender.tx_messages, sizes.size());
  EXPECT_EQ(sender.errors, 0u);
  const LinkStats receiver = StatsFor(ep(1), addr(0));
  EXPECT_EQ(receiver.rx_bytes, expected_bytes);
  EXPECT_EQ(receiver.rx_messages, sizes.size());
  EXPECT_EQ(receiver.tx_bytes, 3 + overhead);
  EXPECT_EQ(receiver.tx_messages, 1u);
  EXPECT_TRUE(receiver.up);
  EXPECT_EQ(receiver.errors, 0u);
}

TEST_P(TransportConformanceTest, RegionSendsAndReceivesStayInsideTheRegion) {
  MakeEndpoints(2);
  std::vector<std::byte> send_memory = Pattern(4096, 5);
  std::vector<std::byte> recv_memory(4096);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);

  std::unique_ptr<PostedRecv> recv = ep(1).PostRecvRegion(
      addr(0), Tag{.seq = 1}, RegionSlice{recv_region.get(), 1000, 96}, Deadline(), nullptr);
  ASSERT_OK(ep(0).SendRegion(addr(1), Tag{.seq = 1}, RegionSlice{send_region.get(), 2000, 96},
                             Deadline()));
  ASSERT_OK(recv->Wait());
  EXPECT_TRUE(std::equal(recv_memory.begin() + 1000, recv_memory.begin() + 1096,
                         send_memory.begin() + 2000));
  EXPECT_EQ(recv_memory[999], std::byte{0});
  EXPECT_EQ(recv_memory[1096], std::byte{0});

  // Past the end, or an offset beyond it: nothing is sent or posted.
  const uint64_t sent_before = StatsFor(ep(0), addr(1)).tx_messages;
  EXPECT_EQ(
      ep(0)
          .SendRegion(addr(1), Tag{.seq = 2}, RegionSlice{send_region.get(), 4000, 97}, Deadline())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ep(0)
          .SendRegion(addr(1), Tag{.seq = 2}, RegionSlice{send_region.get(), 5000, 0}, Deadline())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ep(0).SendRegion(addr(1), Tag{.seq = 2}, RegionSlice{nullptr, 0, 1}, Deadline()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatsFor(ep(0), addr(1)).tx_messages, sent_before);
  std::unique_ptr<PostedRecv> outside = ep(1).PostRecvRegion(
      addr(0), Tag{.seq = 3}, RegionSlice{recv_region.get(), 4090, 7}, Deadline(), nullptr);
  EXPECT_TRUE(outside->Test());
  EXPECT_EQ(outside->Wait().code(), absl::StatusCode::kInvalidArgument);
  // Device memory is not this transport's to move.
  const MemoryRegion device(send_memory, MemoryKind::kDevice);
  EXPECT_EQ(ep(0).SendRegion(addr(1), Tag{.seq = 4}, RegionSlice{&device, 0, 8}, Deadline()).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Posted sends, one-sided writes, connection data -------------------------------------------

TEST_P(TransportConformanceTest, PostedSendCompletesAndItsBufferIsReusableAfterWait) {
  MakeEndpoints(2);
  std::vector<std::byte> send_memory = Pattern(size_t{1} << 20, 9);
  const std::vector<std::byte> sent = send_memory;
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(send_memory);
  std::unique_ptr<PostedSend> send = ep(0).PostSend(
      addr(1), Tag{.comm = 3, .seq = 1}, RegionSlice{region.get(), 0, sent.size()}, Deadline());
  ASSERT_NE(send, nullptr);
  ASSERT_OK(send->Wait());
  EXPECT_TRUE(send->Test());
  EXPECT_OK(send->Wait());  // the same result again
  // The buffer is the caller's again: what it writes now does not travel.
  std::fill(send_memory.begin(), send_memory.end(), std::byte{0xee});
  std::vector<std::byte> received(sent.size());
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 3, .seq = 1}, received, Deadline()));
  EXPECT_EQ(received, sent);
  // A slice outside its region fails, and so does SendRegion (PostSend and Wait).
  std::unique_ptr<PostedSend> outside = ep(0).PostSend(
      addr(1), Tag{.comm = 3, .seq = 2}, RegionSlice{region.get(), sent.size(), 1}, Deadline());
  EXPECT_TRUE(outside->Test());
  EXPECT_EQ(outside->Wait().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(TransportConformanceTest, RemoteRegionDescriptorRoundTripsAndRejectsBadInput) {
  const RemoteRegion region{.address = 0x1000, .length = 4096, .key = 0x0123456789abcdefULL};
  const RemoteRegion::Encoded encoded = region.Encode();
  absl::StatusOr<RemoteRegion> decoded = RemoteRegion::Decode(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, region);
  EXPECT_EQ(RemoteRegion::Decode(ConstByteSpan(encoded).first(31)).status().code(),
            absl::StatusCode::kInvalidArgument);
  RemoteRegion::Encoded bad = encoded;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(RemoteRegion::Decode(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = encoded;
  bad[6] = std::byte{1};
  EXPECT_EQ(RemoteRegion::Decode(bad).status().code(), absl::StatusCode::kInvalidArgument);
  const RemoteRegion wraps{.address = ~uint64_t{0}, .length = 2, .key = 1};
  EXPECT_EQ(RemoteRegion::Decode(wraps.Encode()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The receiver exposes part of a region; the writer fills it with several writes at offsets, the
// last of them (posted last, written in the middle) notifying.
TEST_P(TransportConformanceTest, ExposedRegionTakesWritesAtOffsetsAndTheLastNotifies) {
  MakeEndpoints(2);
  constexpr uint64_t kComm = 0x77;
  constexpr size_t kAt = 100;
  constexpr size_t kLength = size_t{3} << 20;  // three writes of 1 MiB
  std::vector<std::byte> recv_memory(kAt + kLength + 100);
  std::vector<std::byte> send_memory = Pattern(kLength, 4);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  std::unique_ptr<ExposedRegion> exposed =
      ep(1).ExposeRegion(addr(0), kComm, RegionSlice{recv_region.get(), kAt, kLength}, Deadline());
  ASSERT_NE(exposed, nullptr);
  EXPECT_FALSE(exposed->Test());
  EXPECT_EQ(exposed->descriptor().length, kLength);
  EXPECT_NE(exposed->descriptor().key, 0u);
  // What the writer gets travels as bytes, in a message of its own.
  absl::StatusOr<RemoteRegion> target = RemoteRegion::Decode(exposed->descriptor().Encode());
  ASSERT_TRUE(target.ok()) << target.status();

  constexpr size_t kPart = size_t{1} << 20;
  std::unique_ptr<PostedSend> first =
      ep(0).PostWrite(addr(1), kComm, RegionSlice{send_region.get(), 0, kPart}, *target, 0,
                      std::nullopt, Deadline());
  std::unique_ptr<PostedSend> third =
      ep(0).PostWrite(addr(1), kComm, RegionSlice{send_region.get(), 2 * kPart, kPart}, *target,
                      2 * kPart, std::nullopt, Deadline());
  std::unique_ptr<PostedSend> last =
      ep(0).PostWrite(addr(1), kComm, RegionSlice{send_region.get(), kPart, kPart}, *target, kPart,
                      0xC0FFEEu, Deadline());
  ASSERT_OK(first->Wait());
  ASSERT_OK(third->Wait());
  ASSERT_OK(last->Wait());
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(notice->immediate, 0xC0FFEEu);
  EXPECT_EQ(notice->bytes, kLength);
  EXPECT_TRUE(exposed->Test());
  EXPECT_TRUE(std::equal(send_memory.begin(), send_memory.end(), recv_memory.begin() + kAt));
  EXPECT_TRUE(std::all_of(recv_memory.begin(), recv_memory.begin() + kAt,
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::all_of(recv_memory.begin() + kAt + kLength, recv_memory.end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(StatsFor(ep(1), addr(0)).Counter("refused_writes"), 0u);

  // One-shot: the notified region is revoked, so a write after it is refused.
  const absl::Status again = ep(0)
                                 .PostWrite(addr(1), kComm, RegionSlice{send_region.get(), 0, 8},
                                            *target, 0, 1u, Deadline())
                                 ->Wait();
  EXPECT_EQ(again.code(), absl::StatusCode::kPermissionDenied) << again;
  EXPECT_THAT(again.message(), HasSubstr(addr(1)));
  EXPECT_EQ(recv_memory[kAt], send_memory[0]);
  EXPECT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).Counter("refused_writes") == 1; }));
}

TEST_P(TransportConformanceTest, WriteToARevokedRegionIsRefused) {
  MakeEndpoints(2);
  std::vector<std::byte> recv_memory(4096);
  std::vector<std::byte> send_memory = Pattern(4096, 2);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  std::unique_ptr<ExposedRegion> exposed =
      ep(1).ExposeRegion(addr(0), 5, RegionSlice{recv_region.get(), 0, 4096}, Deadline());
  const RemoteRegion target = exposed->descriptor();
  exposed.reset();  // revoked
  const absl::Status refused =
      ep(0)
          .PostWrite(addr(1), 5, RegionSlice{send_region.get(), 0, 4096}, target, 0, 7u, Deadline())
          ->Wait();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_THAT(refused.message(), HasSubstr(addr(1)));
  EXPECT_TRUE(std::all_of(recv_memory.begin(), recv_memory.end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).Counter("refused_writes") == 1; }));
  // The link is still good for messages.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 5, .seq = 1}, Pattern(10, 1), Deadline()));
  std::vector<std::byte> got(10);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 5, .seq = 1}, got, Deadline()));
}

TEST_P(TransportConformanceTest, WriteOutOfBoundsIsRefusedAndTheRegionStaysOpen) {
  MakeEndpoints(2);
  std::vector<std::byte> recv_memory(8192);
  std::vector<std::byte> send_memory = Pattern(8192, 3);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  std::unique_ptr<ExposedRegion> exposed =
      ep(1).ExposeRegion(addr(0), 9, RegionSlice{recv_region.get(), 1000, 1000}, Deadline());
  // Past the end of the region as described: refused before anything is sent.
  EXPECT_EQ(ep(0)
                .PostWrite(addr(1), 9, RegionSlice{send_region.get(), 0, 10}, exposed->descriptor(),
                           995, std::nullopt, Deadline())
                ->Wait()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A descriptor that claims more than was exposed: the receiver refuses, and writes nothing.
  RemoteRegion forged = exposed->descriptor();
  forged.length = 8192;
  const absl::Status refused = ep(0)
                                   .PostWrite(addr(1), 9, RegionSlice{send_region.get(), 0, 2000},
                                              forged, 500, 1u, Deadline())
                                   ->Wait();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr(addr(1)));
  EXPECT_TRUE(std::all_of(recv_memory.begin(), recv_memory.end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).Counter("refused_writes") == 1; }));
  EXPECT_FALSE(exposed->Test());
  // A write that fits still completes it.
  ASSERT_OK(ep(0)
                .PostWrite(addr(1), 9, RegionSlice{send_region.get(), 0, 1000},
                           exposed->descriptor(), 0, 2u, Deadline())
                ->Wait());
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(*notice, (WriteNotice{2u, 1000}));
  EXPECT_TRUE(
      std::equal(recv_memory.begin() + 1000, recv_memory.begin() + 2000, send_memory.begin()));
}

TEST_P(TransportConformanceTest, WriteFromAnotherPeerOrCommunicatorIsRefused) {
  MakeEndpoints(3);
  std::vector<std::byte> recv_memory(4096);
  std::vector<std::byte> send_memory = Pattern(4096, 6);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  // Exposed to endpoint 0, for communicator 1.
  std::unique_ptr<ExposedRegion> exposed =
      ep(2).ExposeRegion(addr(0), 1, RegionSlice{recv_region.get(), 0, 4096}, Deadline());
  const RemoteRegion target = exposed->descriptor();
  const absl::Status other_peer =
      ep(1)
          .PostWrite(addr(2), 1, RegionSlice{send_region.get(), 0, 4096}, target, 0, 1u, Deadline())
          ->Wait();
  EXPECT_EQ(other_peer.code(), absl::StatusCode::kPermissionDenied) << other_peer;
  EXPECT_THAT(other_peer.message(), HasSubstr(addr(2)));
  const absl::Status other_comm =
      ep(0)
          .PostWrite(addr(2), 2, RegionSlice{send_region.get(), 0, 4096}, target, 0, 1u, Deadline())
          ->Wait();
  EXPECT_EQ(other_comm.code(), absl::StatusCode::kPermissionDenied) << other_comm;
  EXPECT_TRUE(std::all_of(recv_memory.begin(), recv_memory.end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(WaitUntil([&] {
    return StatsFor(ep(2), addr(1)).Counter("refused_writes") == 1 &&
           StatsFor(ep(2), addr(0)).Counter("refused_writes") == 1;
  }));
  EXPECT_FALSE(exposed->Test());
  // The peer and communicator it was exposed to write it.
  ASSERT_OK(
      ep(0)
          .PostWrite(addr(2), 1, RegionSlice{send_region.get(), 0, 4096}, target, 0, 3u, Deadline())
          ->Wait());
  ASSERT_TRUE(exposed->Wait().ok());
  EXPECT_EQ(recv_memory, send_memory);
}

// Destroying an exposure while a large write into it is under way: once the destructor returns,
// nothing writes into the memory any more (it may be freed), and the write either landed before
// or fails on the writer's side.
TEST_P(TransportConformanceTest, DestroyingAnExposureStopsWritesIntoIt) {
  MakeEndpoints(2);
  constexpr size_t kBytes = size_t{32} << 20;
  std::vector<std::byte> recv_memory(kBytes);
  const std::vector<std::byte> send_memory = Pattern(kBytes, 5);
  std::vector<std::byte> source = send_memory;
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(source);
  std::unique_ptr<ExposedRegion> exposed =
      ep(1).ExposeRegion(addr(0), 13, RegionSlice{recv_region.get(), 0, kBytes}, Deadline());
  const RemoteRegion target = exposed->descriptor();
  auto written = std::async(std::launch::async, [&] {
    return ep(0)
        .PostWrite(addr(1), 13, RegionSlice{send_region.get(), 0, kBytes}, target, 0, 1u,
                   Deadline())
        ->Wait();
  });
  LetReceiverPost();  // the write is likely under way; the test is correct either way
  exposed.reset();
  const std::vector<std::byte> after = recv_memory;
  const absl::Status status = written.get();
  EXPECT_TRUE(status.ok() || absl::IsPermissionDenied(status)) << status;
  EXPECT_TRUE(recv_memory == after) << "written into after the exposure was destroyed";
  // The link goes on.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 13, .seq = 1}, Pattern(10, 1), Deadline()));
  std::vector<std::byte> got(10);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 13, .seq = 1}, got, Deadline()));
}

TEST_P(TransportConformanceTest, AbortFailsAWaitingExposureAndRevokesIt) {
  MakeEndpoints(2);
  std::vector<std::byte> recv_memory(4096);
  std::vector<std::byte> send_memory = Pattern(4096, 8);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  const std::unique_ptr<MemoryRegion> send_region = HostMemoryRegion(send_memory);
  std::unique_ptr<ExposedRegion> exposed = ep(1).ExposeRegion(
      addr(0), 11, RegionSlice{recv_region.get(), 0, 4096}, absl::Now() + absl::Hours(1));
  const RemoteRegion target = exposed->descriptor();
  std::thread aborter([&] {
    LetReceiverPost();
    ep(1).Abort(11, absl::AbortedError("the operation failed elsewhere"));
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  aborter.join();
  EXPECT_LT(absl::Now() - start, kPrompt);
  EXPECT_EQ(notice.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(notice.status().message(), HasSubstr("failed elsewhere"));
  // Revoked: a write to it is refused; a new exposure for the communicator fails at once.
  EXPECT_EQ(
      ep(0)
          .PostWrite(addr(1), 11, RegionSlice{send_region.get(), 0, 8}, target, 0, 1u, Deadline())
          ->Wait()
          .code(),
      absl::StatusCode::kPermissionDenied);
  std::unique_ptr<ExposedRegion> later =
      ep(1).ExposeRegion(addr(0), 11, RegionSlice{recv_region.get(), 0, 8}, Deadline());
  EXPECT_TRUE(later->Test());
  EXPECT_EQ(later->Wait().status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(recv_memory[0], std::byte{0});
  // The writer's side of an aborted communicator fails its writes too.
  ep(0).Abort(11, absl::AbortedError("aborted here"));
  EXPECT_EQ(
      ep(0)
          .PostWrite(addr(1), 11, RegionSlice{send_region.get(), 0, 8}, target, 0, 1u, Deadline())
          ->Wait()
          .code(),
      absl::StatusCode::kAborted);
}

TEST_P(TransportConformanceTest, ExposureFailsAtItsDeadlineNamingThePeer) {
  MakeEndpoints(2);
  std::vector<std::byte> recv_memory(64);
  const std::unique_ptr<MemoryRegion> recv_region = HostMemoryRegion(recv_memory);
  std::unique_ptr<ExposedRegion> exposed = ep(1).ExposeRegion(
      addr(0), 12, RegionSlice{recv_region.get(), 0, 64}, absl::Now() + absl::Milliseconds(50));
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  EXPECT_EQ(notice.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(notice.status().message(), HasSubstr(addr(0)));
  // Device memory is not this transport's to expose.
  const MemoryRegion device(recv_memory, MemoryKind::kDevice);
  EXPECT_EQ(ep(1)
                .ExposeRegion(addr(0), 12, RegionSlice{&device, 0, 8}, Deadline())
                ->Wait()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Every pair exchanged its connection data when the endpoints were made (MakeEndpoints, as the
// daemons do when a communicator forms); doing it again changes nothing, and data that the peer
// did not make is refused.
TEST_P(TransportConformanceTest, ConnectionDataRoundTrip) {
  MakeEndpoints(2);
  absl::StatusOr<std::string> data = ep(1).ConnectionData(addr(0));
  ASSERT_TRUE(data.ok()) << data.status();
  absl::StatusOr<std::string> again = ep(1).ConnectionData(addr(0));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *data);  // stable while the endpoint lives
  ASSERT_OK(ep(0).Connect(addr(1), *data));
  EXPECT_EQ(ep(0).Connect(addr(1), std::string(*data) + "junk").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 1, .seq = 1}, Pattern(16, 1), Deadline()));
  ASSERT_OK(ep(1).Send(addr(0), Tag{.comm = 1, .seq = 2}, Pattern(16, 2), Deadline()));
  std::vector<std::byte> got(16);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 1, .seq = 1}, got, Deadline()));
  EXPECT_EQ(got, Pattern(16, 1));
  ASSERT_OK(ep(0).Recv(addr(1), Tag{.comm = 1, .seq = 2}, got, Deadline()));
  EXPECT_EQ(got, Pattern(16, 2));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportConformanceTest,
    ::testing::Values(
        TransportParam{"InMemory", [] { return std::make_unique<InMemoryHarness>(); }},
        // Links that carry nothing until connection data is exchanged (as verbs' queue pairs).
        TransportParam{"InMemoryConnectionData",
                       [] { return std::make_unique<InMemoryHarness>(/*connection_data=*/true); }},
        TransportParam{"Tcp", [] { return std::make_unique<TcpHarness>(); }},
        TransportParam{"TcpThreeStreams", [] { return std::make_unique<TcpHarness>(3); }},
        // Checksums change nothing the contract says (not even the bytes LinkStats count).
        TransportParam{"TcpChecksum",
                       [] { return std::make_unique<TcpHarness>(1, /*checksum=*/true); }},
        // Nor does sealing, over striped connections.
        TransportParam{"TcpSealedThreeStreams",
                       [] {
                         return std::make_unique<TcpHarness>(3, /*checksum=*/false,
                                                             /*seal=*/true);
                       }},
        TransportParam{"InMemoryDefaultConsume",
                       [] { return std::make_unique<DefaultConsumeHarness>(); }}),
    [](const ::testing::TestParamInfo<TransportParam>& info) { return info.param.name; });

// Flow control (transport/flow_control.h), for every transport that has it: run with a window
// of kWindow, so that eager messages are at most 960 bytes and larger ones go by rendezvous.
constexpr uint64_t kWindow = 4096;
class FlowControlConformanceTest : public TransportConformanceTest {};

// A sender that runs ahead of a receiver that has posted nothing is held back once its window is
// used, loses nothing, and completes as the receives are posted.
TEST_P(FlowControlConformanceTest, ASmallWindowHoldsASenderBackUntilReceivesArePosted) {
  MakeEndpoints(2);
  constexpr uint64_t kMessages = 40;
  constexpr size_t kSize = 500;  // a charge of 564: 7 fit in the window
  auto sender = std::async(std::launch::async, [&]() -> absl::Status {
    for (uint64_t seq = 0; seq < kMessages; ++seq) {
      BATON_RETURN_IF_ERROR(
          ep(0).Send(addr(1), Tag{.comm = 1, .seq = seq}, Pattern(kSize, seq), Deadline()));
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).rx_messages >= 1; }));
  // Held back: the sender has not finished, and the receiver holds no more than the window.
  EXPECT_EQ(sender.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_LE(StatsFor(ep(1), addr(0)).rx_messages, kWindow / CreditCharge(kSize));
  for (uint64_t seq = 0; seq < kMessages; ++seq) {
    std::vector<std::byte> received(kSize);
    ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 1, .seq = seq}, received, Deadline()));
    EXPECT_TRUE(received == Pattern(kSize, seq)) << "message " << seq;
  }
  ASSERT_OK(sender.get());
  EXPECT_EQ(StatsFor(ep(1), addr(0)).rx_messages, kMessages);
  EXPECT_EQ(StatsFor(ep(1), addr(0)).Counter(kCreditViolationsCounter), 0u);
}

// A message larger than the window goes by rendezvous: nothing of it arrives before its receive
// is posted, and it arrives whole after.
TEST_P(FlowControlConformanceTest, AMessageLargerThanTheWindowWaitsForItsReceive) {
  MakeEndpoints(2);
  constexpr size_t kSize = size_t{64} << 10;
  const std::vector<std::byte> sent = Pattern(kSize, 3);
  // The link is up (a first message), so that only the rendezvous holds the large one back.
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 1, .seq = 1}, {}, Deadline()));
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 1, .seq = 1}, {}, Deadline()));
  auto sender = std::async(std::launch::async, [&] {
    return ep(0).Send(addr(1), Tag{.comm = 1, .seq = 2}, sent, Deadline());
  });
  EXPECT_EQ(sender.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(StatsFor(ep(1), addr(0)).rx_messages, 1u) << "it came before its receive";
  std::vector<std::byte> received(kSize);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 1, .seq = 2}, received, Deadline()));
  ASSERT_OK(sender.get());
  EXPECT_TRUE(received == sent);
}

// Every endpoint of a ring posts its receives from prev, then sends to next, while pairs exchange
// both ways at once: with windows far smaller than the messages, everything completes.
TEST_P(FlowControlConformanceTest, LargeMessagesBothWaysAtOnceDoNotDeadlock) {
  constexpr int kEndpoints = 3;
  constexpr uint32_t kParts = 6;
  MakeEndpoints(kEndpoints);
  // Rendezvous, eager and empty messages, mixed.
  auto size_of = [](uint32_t part) -> size_t {
    return part % 3 == 0 ? (size_t{96} << 10) + part : part % 3 == 1 ? 700 : 0;
  };
  auto run = [&](int self) -> absl::Status {
    const int next = (self + 1) % kEndpoints;
    const int prev = (self + kEndpoints - 1) % kEndpoints;
    std::vector<std::vector<std::byte>> in(2 * kParts);
    std::vector<std::unique_ptr<PostedRecv>> posted;
    for (uint32_t part = 0; part < kParts; ++part) {
      in[part].resize(size_of(part));
      posted.push_back(ep(self).PostRecv(addr(prev), Tag{.comm = 5, .seq = 1, .part = part},
                                         in[part], Deadline(), nullptr));
      // The exchange of step 2 with both neighbours.
      in[kParts + part].resize(size_of(part));
      posted.push_back(ep(self).PostRecv(addr(next), Tag{.comm = 5, .seq = 2, .part = part},
                                         in[kParts + part], Deadline(), nullptr));
    }
    for (uint32_t part = 0; part < kParts; ++part) {
      const std::vector<std::byte> out = Pattern(size_of(part), self * 100 + part);
      BATON_RETURN_IF_ERROR(
          ep(self).Send(addr(next), Tag{.comm = 5, .seq = 1, .part = part}, out, Deadline()));
      BATON_RETURN_IF_ERROR(
          ep(self).Send(addr(prev), Tag{.comm = 5, .seq = 2, .part = part}, out, Deadline()));
    }
    for (uint32_t part = 0; part < kParts; ++part) {
      BATON_RETURN_IF_ERROR(posted[2 * part]->Wait());
      BATON_RETURN_IF_ERROR(posted[2 * part + 1]->Wait());
      if (in[part] != Pattern(size_of(part), prev * 100 + part) ||
          in[kParts + part] != Pattern(size_of(part), next * 100 + part)) {
        return absl::DataLossError(absl::StrCat("wrong bytes in part ", part));
      }
    }
    return absl::OkStatus();
  };
  std::vector<std::future<absl::Status>> runs;
  for (int self = 0; self < kEndpoints; ++self) {
    runs.push_back(std::async(std::launch::async, run, self));
  }
  for (int self = 0; self < kEndpoints; ++self) EXPECT_OK(runs[self].get());
}

// Abort fails a send that waits for credit, or for its clear-to-send, at once with the abort
// reason; the deadline fails one naming the peer and the tag.
TEST_P(FlowControlConformanceTest, AbortFailsASendWaitingForCreditAtOnce) {
  MakeEndpoints(2);
  auto fill = std::async(std::launch::async, [&]() -> absl::Status {
    for (uint64_t seq = 0; seq < 100; ++seq) {
      BATON_RETURN_IF_ERROR(
          ep(0).Send(addr(1), Tag{.comm = 1, .seq = seq}, Pattern(500, seq), Deadline()));
    }
    return absl::OkStatus();
  });
  auto rendezvous = std::async(std::launch::async, [&] {
    return ep(0).Send(addr(1), Tag{.comm = 2, .seq = 1}, Pattern(size_t{64} << 10, 1), Deadline());
  });
  ASSERT_TRUE(WaitUntil([&] { return StatsFor(ep(1), addr(0)).rx_messages >= 1; }));
  EXPECT_EQ(fill.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  const absl::Time aborted = absl::Now();
  ep(0).Abort(1, absl::AbortedError("rank 2 gave up"));
  ep(0).Abort(2, absl::AbortedError("rank 3 gave up"));
  ASSERT_EQ(fill.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(rendezvous.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(absl::Now() - aborted, kPrompt);
  EXPECT_EQ(fill.get().message(), "rank 2 gave up");
  EXPECT_EQ(rendezvous.get().message(), "rank 3 gave up");
  // Another communicator's send waits for the receiver to take what comm 1 holds, up to its
  // deadline, and names the peer and tag then.
  const absl::Status late = ep(0).Send(addr(1), Tag{.comm = 3, .seq = 9}, Pattern(900, 9),
                                       absl::Now() + absl::Milliseconds(200));
  if (!late.ok()) {
    EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
    EXPECT_THAT(late.message(), HasSubstr(addr(1)));
    EXPECT_THAT(late.message(), HasSubstr("op 9"));
  }
  // Forgetting comm 1 at the receiver returns its credit: comm 3 goes through.
  ep(1).Forget(1);
  ASSERT_OK(ep(0).Send(addr(1), Tag{.comm = 3, .seq = 10}, Pattern(900, 10), Deadline()));
  std::vector<std::byte> received(900);
  ASSERT_OK(ep(1).Recv(addr(0), Tag{.comm = 3, .seq = 10}, received, Deadline()));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, FlowControlConformanceTest,
    ::testing::Values(
        TransportParam{
            "InMemory",
            [] { return std::make_unique<InMemoryHarness>(/*connection_data=*/false, kWindow); }},
        TransportParam{"Tcp",
                       [] { return std::make_unique<TcpHarness>(1, false, false, kWindow); }},
        TransportParam{"TcpThreeStreams",
                       [] { return std::make_unique<TcpHarness>(3, false, false, kWindow); }},
        TransportParam{"TcpSealed",
                       [] { return std::make_unique<TcpHarness>(1, false, true, kWindow); }}),
    [](const ::testing::TestParamInfo<TransportParam>& info) { return info.param.name; });

}  // namespace
}  // namespace baton::transport
