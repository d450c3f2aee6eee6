#include "collective/point_to_point.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/layout.h"
#include "tests/collective/collective_test_support.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

// D daemons (one PointToPoint and one in-memory endpoint each) host the ranks of one
// communicator as the placement says; every rank is a thread that calls its daemon's
// PointToPoint. Payloads are random bytes that differ for every (sender, receiver, message), so a
// message delivered to the wrong receive, out of order or cut short is caught element by element.

namespace baton::collective {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kComm = 0xC0FFEE;
// Small, so that a few hundred bytes take several pieces across daemons.
constexpr size_t kChunk = 64;

struct Placement {
  const char* name;
  std::vector<std::vector<int>> ranks_of;  // ranks of each daemon, ascending
};

void PrintTo(const Placement& placement, std::ostream* os) { *os << placement.name; }

const std::vector<Placement>& Placements() {
  static const auto* const placements = new std::vector<Placement>{
      {"one_daemon_x3", {{0, 1, 2}}},
      {"two_daemons_x2", {{0, 1}, {2, 3}}},
      {"three_daemons_x2", {{0, 1}, {2, 3}, {4, 5}}},
      {"four_daemons_x1", {{0}, {1}, {2}, {3}}},
      {"irregular", {{0, 3}, {1}, {2, 4, 5}}},
  };
  return *placements;
}

// Sizes: empty, one byte, odd, exactly one piece, several pieces with a short last one.
constexpr size_t kSizes[] = {0, 1, 7, kChunk, 3 * kChunk + 5};

std::vector<std::byte> Payload(int src, int dst, uint64_t message, size_t bytes) {
  return test::RandomBytes(bytes, src * 1000 + dst, message * 7919 + bytes);
}

std::string DaemonAddress(int d) { return absl::StrCat("daemon", d); }

LayoutDaemon Daemon(int d, std::vector<int> ranks) {
  LayoutDaemon daemon;
  daemon.address = DaemonAddress(d);
  daemon.ranks = std::move(ranks);
  return daemon;
}

class Cluster {
 public:
  // `chunk_bytes[d]` is daemon d's chunk size; kChunk for all when empty.
  explicit Cluster(std::vector<std::vector<int>> ranks_of, std::vector<size_t> chunk_bytes = {})
      : fabric_(transport::NewInMemoryFabric()) {
    Layout layout;
    for (size_t d = 0; d < ranks_of.size(); ++d) {
      layout.daemons.push_back(Daemon(static_cast<int>(d), ranks_of[d]));
      layout.world_size += static_cast<int>(ranks_of[d].size());
    }
    daemon_of_.assign(static_cast<size_t>(layout.world_size), -1);
    for (size_t d = 0; d < ranks_of.size(); ++d) {
      for (int rank : ranks_of[d]) daemon_of_[static_cast<size_t>(rank)] = static_cast<int>(d);
      auto endpoint = fabric_->CreateEndpoint(DaemonAddress(static_cast<int>(d)));
      EXPECT_TRUE(endpoint.ok()) << endpoint.status();
      endpoints_.push_back(std::move(endpoint).value());
    }
    for (size_t d = 0; d < ranks_of.size(); ++d) {
      layout.self = static_cast<int>(d);
      daemons_.push_back(std::make_unique<PointToPoint>(
          endpoints_[d].get(), kComm, layout, chunk_bytes.empty() ? kChunk : chunk_bytes[d]));
    }
  }
  ~Cluster() {
    daemons_.clear();
    endpoints_.clear();
  }

  int world() const { return static_cast<int>(daemon_of_.size()); }
  int DaemonOf(int rank) const { return daemon_of_[static_cast<size_t>(rank)]; }
  PointToPoint& daemon(int d) { return *daemons_[static_cast<size_t>(d)]; }
  // The PointToPoint of the daemon hosting `rank`.
  PointToPoint& of(int rank) { return daemon(DaemonOf(rank)); }
  transport::InMemoryFabric& fabric() { return *fabric_; }
  transport::Endpoint& endpoint(int d) { return *endpoints_[static_cast<size_t>(d)]; }

  // Runs `body(rank)` on a thread per rank at once and returns each one's status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int)>& body) {
    std::vector<absl::Status> statuses(static_cast<size_t>(world()));
    std::vector<std::thread> threads;
    for (int r = 0; r < world(); ++r) {
      threads.emplace_back([&, r] { statuses[static_cast<size_t>(r)] = body(r); });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

 private:
  std::unique_ptr<transport::InMemoryFabric> fabric_;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints_;
  std::vector<std::unique_ptr<PointToPoint>> daemons_;
  std::vector<int> daemon_of_;
};

absl::Time Deadline(absl::Duration timeout = absl::Seconds(30)) { return absl::Now() + timeout; }

// Sends message `message` of `bytes` from src to dst.
absl::Status SendPayload(Cluster& cluster, int src, int dst, uint64_t message, size_t bytes) {
  const std::vector<std::byte> payload = Payload(src, dst, message, bytes);
  return cluster.of(src).Send(src, dst, payload, Deadline());
}

// Receives at dst the next message from src and checks it is message `message` of `bytes`.
absl::Status RecvPayload(Cluster& cluster, int src, int dst, uint64_t message, size_t bytes) {
  std::vector<std::byte> buffer = test::RandomBytes(bytes, dst, 99);  // not the payload
  absl::Status status = cluster.of(dst).Recv(src, dst, buffer, Deadline());
  if (!status.ok()) return status;
  if (buffer != Payload(src, dst, message, bytes)) {
    return absl::InternalError(absl::StrCat("rank ", dst, " got wrong bytes for message ", message,
                                            " of ", bytes, " bytes from rank ", src));
  }
  return absl::OkStatus();
}

void ExpectAllOk(const std::vector<absl::Status>& statuses, const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << what << ", rank " << r << ": " << statuses[r];
  }
}

class PlacementTest : public ::testing::TestWithParam<Placement> {};

// Every rank sends to rank+1 before it receives from rank-1: a blocking Send would deadlock.
TEST_P(PlacementTest, RingSendThenRecv) {
  Cluster cluster(GetParam().ranks_of);
  const int n = cluster.world();
  uint64_t message = 0;
  for (size_t bytes : kSizes) {
    const auto statuses = cluster.Run([&](int r) -> absl::Status {
      if (absl::Status s = SendPayload(cluster, r, (r + 1) % n, message, bytes); !s.ok()) return s;
      return RecvPayload(cluster, (r + n - 1) % n, r, message, bytes);
    });
    ExpectAllOk(statuses, absl::StrCat(bytes, " bytes"));
    ++message;
  }
}

// Rank 0 sends first; every other rank receives from rank-1 before it sends to rank+1.
TEST_P(PlacementTest, RingRecvThenSend) {
  Cluster cluster(GetParam().ranks_of);
  const int n = cluster.world();
  uint64_t message = 0;
  for (size_t bytes : kSizes) {
    const auto statuses = cluster.Run([&](int r) -> absl::Status {
      const int next = (r + 1) % n;
      const int prev = (r + n - 1) % n;
      if (r == 0) {
        if (absl::Status s = SendPayload(cluster, r, next, message, bytes); !s.ok()) return s;
        return RecvPayload(cluster, prev, r, message, bytes);
      }
      if (absl::Status s = RecvPayload(cluster, prev, r, message, bytes); !s.ok()) return s;
      return SendPayload(cluster, r, next, message, bytes);
    });
    ExpectAllOk(statuses, absl::StrCat(bytes, " bytes"));
    ++message;
  }
}

// Every rank sends two messages of different sizes to every rank (itself included), then receives
// them all, starting from a different source on every rank.
TEST_P(PlacementTest, AllPairs) {
  Cluster cluster(GetParam().ranks_of);
  const int n = cluster.world();
  auto bytes_of = [](int src, int dst, uint64_t k) {
    return kSizes[(static_cast<size_t>(src * 3 + dst) + k) % std::size(kSizes)];
  };
  const auto statuses = cluster.Run([&](int r) -> absl::Status {
    for (uint64_t k = 0; k < 2; ++k) {
      for (int dst = 0; dst < n; ++dst) {
        if (absl::Status s = SendPayload(cluster, r, dst, k, bytes_of(r, dst, k)); !s.ok()) {
          return s;
        }
      }
    }
    for (uint64_t k = 0; k < 2; ++k) {
      for (int i = 0; i < n; ++i) {
        const int src = (r + i) % n;
        if (absl::Status s = RecvPayload(cluster, src, r, k, bytes_of(src, r, k)); !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  });
  ExpectAllOk(statuses, "all pairs");
}

// Rank 0 sends 64 messages of changing sizes to every other rank before any of them receives;
// then each receives them in order. Meanwhile the others stream to rank 0, which receives as
// they send, so queued and waiting receives are both exercised.
TEST_P(PlacementTest, ManyOutstandingArriveInOrder) {
  constexpr uint64_t kMessages = 64;
  Cluster cluster(GetParam().ranks_of);
  const int n = cluster.world();
  auto bytes_of = [](uint64_t k) { return (k * 37) % (4 * kChunk + 3); };
  absl::Notification all_sent;
  const auto statuses = cluster.Run([&](int r) -> absl::Status {
    if (r == 0) {
      for (int dst = 1; dst < n; ++dst) {
        for (uint64_t k = 0; k < kMessages; ++k) {
          if (absl::Status s = SendPayload(cluster, 0, dst, k, bytes_of(k)); !s.ok()) return s;
        }
      }
      all_sent.Notify();
      for (uint64_t k = 0; k < kMessages; ++k) {
        for (int src = 1; src < n; ++src) {
          if (absl::Status s = RecvPayload(cluster, src, 0, k, bytes_of(k)); !s.ok()) return s;
        }
      }
      return absl::OkStatus();
    }
    for (uint64_t k = 0; k < kMessages; ++k) {
      if (absl::Status s = SendPayload(cluster, r, 0, k, bytes_of(k)); !s.ok()) return s;
    }
    all_sent.WaitForNotification();
    for (uint64_t k = 0; k < kMessages; ++k) {
      if (absl::Status s = RecvPayload(cluster, 0, r, k, bytes_of(k)); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  ExpectAllOk(statuses, "outstanding messages");
}

INSTANTIATE_TEST_SUITE_P(Placements, PlacementTest, ::testing::ValuesIn(Placements()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PointToPointTest, SelfSendEveryStyle) {
  Cluster cluster({{0, 1}, {2}});
  for (int rank : {0, 2}) {
    for (uint64_t k = 0; k < std::size(kSizes); ++k) {
      ASSERT_TRUE(SendPayload(cluster, rank, rank, k, kSizes[k]).ok());
    }
    for (uint64_t k = 0; k < std::size(kSizes); ++k) {
      const absl::Status status = RecvPayload(cluster, rank, rank, k, kSizes[k]);
      EXPECT_TRUE(status.ok()) << "rank " << rank << ", message " << k << ": " << status;
    }
  }
}

// The messages to a rank of another daemon as the transport sees them: one header and then the
// pieces, tagged so that no collective's tag (seq below 2^63) can meet them.
class RecordingEndpoint final : public test::ForwardingEndpoint {
 public:
  using ForwardingEndpoint::ForwardingEndpoint;
  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      sent_.push_back({tag, data.size()});
    }
    return inner()->Send(peer, tag, data, deadline);
  }
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      for (const transport::OutMessage& message : messages) {
        sent_.push_back({message.tag, message.data.size()});
      }
    }
    return inner()->SendAll(peer, messages, deadline);
  }
  std::vector<std::pair<transport::Tag, size_t>> sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<transport::Tag, size_t>> sent_ ABSL_GUARDED_BY(mu_);
};

TEST(PointToPointTest, TagsAcrossDaemons) {
  auto fabric = transport::NewInMemoryFabric();
  auto e0 = fabric->CreateEndpoint(DaemonAddress(0));
  auto e1 = fabric->CreateEndpoint(DaemonAddress(1));
  ASSERT_TRUE(e0.ok() && e1.ok());
  RecordingEndpoint recording(e0->get());
  Layout layout;
  layout.world_size = 3;
  layout.daemons = {Daemon(0, {0, 2}), Daemon(1, {1})};
  PointToPoint sender(&recording, kComm, layout, kChunk);
  layout.self = 1;
  PointToPoint receiver(e1->get(), kComm, layout, kChunk);

  const std::vector<std::byte> empty, three_pieces = Payload(2, 1, 0, 2 * kChunk + 1);
  ASSERT_TRUE(sender.Send(2, 1, empty, Deadline()).ok());
  ASSERT_TRUE(sender.Send(2, 1, three_pieces, Deadline()).ok());
  ASSERT_TRUE(sender.Send(0, 0, three_pieces, Deadline()).ok());  // local: no transport

  const uint64_t seq = (uint64_t{1} << 63) | (uint64_t{2} << 32) | 1;
  const std::vector<std::pair<transport::Tag, size_t>> expected = {
      {{kComm, seq, 0, 0}, 16},  // header alone
      {{kComm, seq, 1, 0}, 16},
      {{kComm, seq, 1, 1}, kChunk},  // header, pieces
      {{kComm, seq, 1, 2}, kChunk},
      {{kComm, seq, 1, 3}, 1}};
  const auto sent = recording.sent();
  ASSERT_EQ(sent.size(), expected.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].first, expected[i].first) << i << ": " << TagToString(sent[i].first);
    EXPECT_EQ(sent[i].second, expected[i].second) << i;
  }
  std::vector<std::byte> none, buffer(three_pieces.size());
  EXPECT_TRUE(receiver.Recv(2, 1, none, Deadline()).ok());
  ASSERT_TRUE(receiver.Recv(2, 1, buffer, Deadline()).ok());
  EXPECT_EQ(buffer, three_pieces);
}

// (sent, received) sizes whose lengths differ, including ones whose pieces the receiver cannot
// have guessed: fewer, more, none.
struct Mismatch {
  size_t sent;
  size_t received;
};
constexpr Mismatch kMismatches[] = {
    {100, 50},           {50, 100},           {0, 5}, {5, 0}, {3 * kChunk + 5, 1},
    {1, 3 * kChunk + 5}, {kChunk, kChunk + 1}};

// After a length mismatch, the error (FailedPrecondition) names both sizes and ranks and the
// pair's next message is intact, whether the Recv came first or the Send, on one daemon or across
// two. The Send returns OK, or the same error when it found its Recv waiting on its daemon.
TEST(PointToPointTest, LengthMismatchDropsOnlyThatMessage) {
  for (const bool recv_first : {false, true}) {
    for (const auto& [src, dst] : {std::pair{0, 3}, std::pair{1, 3}}) {  // local, remote
      Cluster cluster({{0, 3}, {1}, {2}});
      uint64_t message = 0;
      for (const Mismatch& m : kMismatches) {
        SCOPED_TRACE(absl::StrCat(recv_first ? "recv first" : "send first", ", rank ", src, " -> ",
                                  dst, ", ", m.sent, " bytes into ", m.received));
        absl::Notification sent;
        absl::Status mismatch, next;
        std::thread receiver([&] {
          if (!recv_first) sent.WaitForNotification();
          std::vector<std::byte> buffer(m.received);
          mismatch = cluster.of(dst).Recv(src, dst, buffer, Deadline());
          next = RecvPayload(cluster, src, dst, message + 1, 2 * kChunk + 3);
        });
        // Gives the Recv the chance to wait first; nothing depends on it.
        if (recv_first) absl::SleepFor(absl::Milliseconds(2));
        const absl::Status send = SendPayload(cluster, src, dst, message, m.sent);
        sent.Notify();
        ASSERT_TRUE(SendPayload(cluster, src, dst, message + 1, 2 * kChunk + 3).ok());
        receiver.join();
        EXPECT_TRUE(absl::IsFailedPrecondition(mismatch)) << mismatch;
        if (!send.ok()) {
          EXPECT_EQ(cluster.DaemonOf(src), cluster.DaemonOf(dst)) << send;
          EXPECT_EQ(send, mismatch);
        }
        EXPECT_THAT(mismatch.message(),
                    AllOf(HasSubstr(absl::StrCat("rank ", src, " sent ", m.sent, " bytes")),
                          HasSubstr(absl::StrCat(m.received, " bytes")),
                          HasSubstr(absl::StrCat("rank ", dst))));
        EXPECT_TRUE(next.ok()) << next;
        if (cluster.DaemonOf(src) != cluster.DaemonOf(dst)) {
          // Nothing of the dropped message is left with the receiving daemon's transport: a
          // receive for any of its parts finds no message.
          const uint64_t seq =
              (uint64_t{1} << 63) | (static_cast<uint64_t>(src) << 32) | static_cast<uint32_t>(dst);
          for (uint32_t part = 0; part <= 2 + (m.sent + kChunk - 1) / kChunk; ++part) {
            const transport::Tag tag{kComm, seq, static_cast<uint32_t>(message), part};
            const absl::Status left =
                cluster.endpoint(cluster.DaemonOf(dst))
                    .Recv(DaemonAddress(cluster.DaemonOf(src)), tag, {}, absl::Now());
            EXPECT_TRUE(absl::IsDeadlineExceeded(left)) << TagToString(tag) << ": " << left;
          }
        }
        message += 2;
      }
    }
  }
}

// A Send that finds its Recv waiting on the same daemon with another length fails too, with the
// Recv's error: both ranks learn of the mismatch at once. Lengths are named in elements when the
// element size divides them.
TEST(PointToPointTest, ASendThatFindsItsRecvWaitingWithAnotherLengthFailsToo) {
  Cluster cluster({{0, 1}});
  for (uint64_t message = 0; message < 2; ++message) {
    std::vector<std::byte> buffer(5 * 4);
    absl::Status received;
    std::thread receiver(
        [&] { received = cluster.of(1).Recv(0, 1, buffer, Deadline(), /*element_bytes=*/4); });
    const absl::Time until = Deadline(absl::Seconds(20));
    while (cluster.of(0).WaitingLocalRecvs(0, 1) == 0 && absl::Now() < until) {
      std::this_thread::yield();
    }
    ASSERT_EQ(cluster.of(0).WaitingLocalRecvs(0, 1), 1u);
    const std::vector<std::byte> payload = Payload(0, 1, message, 4 * 4);
    const absl::Status sent = cluster.of(0).Send(0, 1, payload, Deadline(), /*element_bytes=*/4);
    receiver.join();
    EXPECT_TRUE(absl::IsFailedPrecondition(received)) << received;
    EXPECT_EQ(sent, received);
    EXPECT_THAT(received.message(), AllOf(HasSubstr("rank 0 sent 4 elements (16 bytes) to rank 1"),
                                          HasSubstr("whose receive is of 5 elements (20 bytes)")));
    EXPECT_EQ(cluster.of(0).WaitingLocalRecvs(0, 1), 0u);
  }
  // The pair goes on.
  std::thread receiver([&] { EXPECT_TRUE(RecvPayload(cluster, 0, 1, 2, 100).ok()); });
  EXPECT_TRUE(SendPayload(cluster, 0, 1, 2, 100).ok());
  receiver.join();
}

// Daemons that cut messages differently (a misconfiguration the plan prevents) fail a message
// that takes several pieces with FailedPrecondition naming both chunk sizes, and still take all of
// its pieces: the next message, one piece on either side, arrives intact.
TEST(PointToPointTest, DaemonsDisagreeingOnChunkSize) {
  for (const size_t receiver_chunk : {kChunk / 2, 2 * kChunk}) {
    Cluster cluster({{0}, {1}}, {kChunk, receiver_chunk});
    ASSERT_TRUE(SendPayload(cluster, 0, 1, 0, 3 * kChunk + 5).ok());
    ASSERT_TRUE(SendPayload(cluster, 0, 1, 1, 7).ok());
    std::vector<std::byte> buffer(3 * kChunk + 5);
    const absl::Status status = cluster.of(1).Recv(0, 1, buffer, Deadline());
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(absl::StrCat("pieces of ", kChunk, " bytes")),
                                        HasSubstr(absl::StrCat("pieces of ", receiver_chunk))));
    const absl::Status next = RecvPayload(cluster, 0, 1, 1, 7);
    EXPECT_TRUE(next.ok()) << "receiver chunk " << receiver_chunk << ": " << next;
  }
}

// A Recv nobody sends to fails at its deadline naming both ranks; it counted as the pair's
// receive, so the message that comes late is dropped and the next one meets the next Recv.
TEST(PointToPointTest, DeadlineNamesThePair) {
  for (const auto& [src, dst] : {std::pair{0, 2}, std::pair{1, 2}}) {
    Cluster cluster({{0, 2}, {1}});
    std::vector<std::byte> buffer(10);
    const absl::Time start = absl::Now();
    const absl::Status status =
        cluster.of(dst).Recv(src, dst, buffer, absl::Now() + absl::Milliseconds(100));
    const absl::Duration waited = absl::Now() - start;
    EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(absl::StrCat("rank ", dst)),
                                        HasSubstr(absl::StrCat("from rank ", src))));
    EXPECT_GE(waited, absl::Milliseconds(100));
    EXPECT_LT(waited, absl::Seconds(5));
    ASSERT_TRUE(SendPayload(cluster, src, dst, 0, 10).ok());  // the timed-out Recv's
    ASSERT_TRUE(SendPayload(cluster, src, dst, 1, 10).ok());
    const absl::Status next = RecvPayload(cluster, src, dst, 1, 10);
    EXPECT_TRUE(next.ok()) << "rank " << src << " -> " << dst << ": " << next;
  }
}

// Abort wakes a waiting Recv at once (its deadline is far away), and fails every later call.
TEST(PointToPointTest, AbortWakesWaitingRecv) {
  for (const auto& [src, dst] : {std::pair{0, 2}, std::pair{1, 2}}) {
    Cluster cluster({{0, 2}, {1}});
    const absl::Status reason = absl::AbortedError("communicator aborted by test");
    absl::Status status;
    absl::Time returned;
    std::thread receiver([&] {
      std::vector<std::byte> buffer(3 * kChunk);
      status = cluster.of(dst).Recv(src, dst, buffer, Deadline(absl::Seconds(60)));
      returned = absl::Now();
    });
    absl::SleepFor(absl::Milliseconds(50));  // lets the Recv wait; nothing depends on it
    const absl::Time aborted = absl::Now();
    cluster.daemon(cluster.DaemonOf(dst)).Abort(reason);
    receiver.join();
    const absl::Duration took = returned - aborted;
    std::printf("rank %d -> %d: Recv returned %s after Abort\n", src, dst,
                absl::FormatDuration(took).c_str());
    EXPECT_EQ(status, reason);
    EXPECT_LT(took, absl::Seconds(2));
    std::vector<std::byte> buffer(4);
    EXPECT_EQ(cluster.of(dst).Recv(src, dst, buffer, Deadline()), reason);
    EXPECT_EQ(cluster.of(dst).Send(dst, src, buffer, Deadline()), reason);
    EXPECT_EQ(cluster.of(dst).Send(dst, dst, buffer, Deadline()), reason);
  }
}

// Messages queued for a local receiver are dropped at Abort: its Recv fails with the reason.
TEST(PointToPointTest, AbortFailsQueuedMessages) {
  Cluster cluster({{0, 1}});
  ASSERT_TRUE(SendPayload(cluster, 0, 1, 0, 8).ok());
  cluster.daemon(0).Abort(absl::CancelledError("gone"));
  std::vector<std::byte> buffer(8);
  const absl::Status status = cluster.of(1).Recv(0, 1, buffer, Deadline());
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("gone"));
}

// A rank that leaves (its handle destroyed) after sending one message to each of two ranks, one on
// its daemon and one on another: every daemon is told what it sent (SentBy, SourceLeft). The
// message it sent is still received intact on both; a Recv already waiting for its next message
// fails at once, and so does a later one, naming both ranks and the reason; other pairs go on.
TEST(PointToPointTest, RecvsFromARankThatLeftFailOnlyForMessagesItNeverSent) {
  Cluster cluster({{0, 1}, {2}});
  ASSERT_TRUE(SendPayload(cluster, 0, 1, 0, 10).ok());
  ASSERT_TRUE(SendPayload(cluster, 0, 2, 0, 3 * kChunk + 5).ok());
  absl::Status waiting;
  absl::Time returned;
  std::thread receiver([&] {
    ASSERT_TRUE(RecvPayload(cluster, 0, 2, 0, 3 * kChunk + 5).ok());
    std::vector<std::byte> buffer(8);
    waiting = cluster.of(2).Recv(0, 2, buffer, Deadline(absl::Seconds(60)));
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(50));  // lets the second Recv wait; nothing depends on it
  const Departure departure = cluster.of(0).SentBy(0);
  EXPECT_EQ(departure.rank, 0);
  EXPECT_EQ(departure.sent, (std::vector<std::pair<int, uint64_t>>{{1, 1}, {2, 1}}));
  const absl::Status reason = absl::FailedPreconditionError("rank 0 destroyed its handle");
  const absl::Time told = absl::Now();
  for (int d = 0; d < 2; ++d) cluster.daemon(d).SourceLeft(departure, reason);
  receiver.join();
  EXPECT_LT(returned - told, absl::Seconds(2));
  EXPECT_TRUE(absl::IsFailedPrecondition(waiting)) << waiting;
  EXPECT_THAT(waiting.message(),
              AllOf(HasSubstr("rank 0 left"), HasSubstr("to rank 2"),
                    HasSubstr("after sending 1 message"), HasSubstr("destroyed its handle")));

  EXPECT_TRUE(RecvPayload(cluster, 0, 1, 0, 10).ok()) << "sent before it left";
  std::vector<std::byte> buffer(4);
  const absl::Status later = cluster.of(1).Recv(0, 1, buffer, Deadline(absl::Seconds(60)));
  EXPECT_TRUE(absl::IsFailedPrecondition(later)) << later;
  EXPECT_THAT(later.message(), HasSubstr("message 1 from rank 0 to rank 1 will never come"));
  // A rank it never sent to fails at once as well; pairs without it are untouched.
  ASSERT_TRUE(SendPayload(cluster, 2, 1, 0, 6).ok());
  EXPECT_TRUE(RecvPayload(cluster, 2, 1, 0, 6).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(cluster.of(0).Recv(0, 0, buffer, Deadline())));
}

// A lost peer daemon fails a waiting Recv from it with Unavailable long before its deadline, and
// a Send to it too.
TEST(PointToPointTest, LostPeerDaemon) {
  Cluster cluster({{0, 1}, {2}});
  absl::Status status;
  absl::Duration took;
  std::thread receiver([&] {
    std::vector<std::byte> buffer(5);
    const absl::Time start = absl::Now();
    status = cluster.of(0).Recv(2, 0, buffer, Deadline(absl::Seconds(60)));
    took = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(20));  // lets the Recv wait; nothing depends on it
  cluster.fabric().Kill(DaemonAddress(1));
  receiver.join();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("rank 0"), HasSubstr("from rank 2")));
  EXPECT_LT(took, absl::Seconds(5));
  const std::vector<std::byte> payload(5);
  const absl::Status send = cluster.of(1).Send(1, 2, payload, Deadline(absl::Seconds(60)));
  EXPECT_TRUE(absl::IsUnavailable(send)) << send;
  EXPECT_THAT(send.message(), HasSubstr("rank 2"));
}

TEST(PointToPointTest, RejectsRanksNotOnThisDaemonOrOutOfRange) {
  Cluster cluster({{0, 3}, {1}, {2}});
  std::vector<std::byte> buffer(4);
  PointToPoint& daemon0 = cluster.daemon(0);
  struct Case {
    std::function<absl::Status()> call;
    const char* expected;
  };
  const Case cases[] = {
      {[&] { return daemon0.Send(1, 0, buffer, Deadline()); }, "rank 1 is on daemon 1"},
      {[&] { return daemon0.Send(0, 4, buffer, Deadline()); }, "rank 4 is out of range"},
      {[&] { return daemon0.Send(0, -1, buffer, Deadline()); }, "rank -1 is out of range"},
      {[&] { return daemon0.Recv(0, 2, buffer, Deadline()); }, "rank 2 is on daemon 2"},
      {[&] { return daemon0.Recv(7, 3, buffer, Deadline()); }, "rank 7 is out of range"},
  };
  for (const Case& c : cases) {
    const absl::Status status = c.call();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr(c.expected));
  }
  // Rejected calls do not count: the pair (0, 3) starts at message 0.
  ASSERT_TRUE(SendPayload(cluster, 0, 3, 0, 4).ok());
  EXPECT_TRUE(RecvPayload(cluster, 0, 3, 0, 4).ok());
}

}  // namespace
}  // namespace baton::collective
