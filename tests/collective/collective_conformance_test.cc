// What every (collective, algorithm) pair that IsSupported() lists must do, checked through one
// dispatcher: exactly the traffic its header's formula states, no hang when a participant dies
// or never comes, and no interference between operations that follow each other or run on two
// communicators at once. Each algorithm's own test checks its results against a serial
// reference.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "collective/direct_all_to_all.h"
#include "collective/dissemination_barrier.h"
#include "collective/double_binary_tree.h"
#include "collective/doubling_all_reduce.h"
#include "collective/halving_doubling_all_reduce.h"
#include "collective/ring_all_gather.h"
#include "collective/ring_all_reduce.h"
#include "collective/ring_broadcast.h"
#include "collective/ring_reduce.h"
#include "collective/ring_reduce_scatter.h"
#include "collective/segments.h"
#include "collective/tree_all_reduce.h"
#include "tests/collective/collective_test_support.h"
#include "transport/tcp/frame.h"

namespace baton::collective {
namespace {

using test::Group;
using ::testing::HasSubstr;

struct Op {
  Collective collective;
  Algorithm algorithm;

  std::string Name() const {
    return absl::StrCat(CollectiveName(collective), "_", AlgorithmName(algorithm));
  }
};

std::vector<Op> SupportedOps() {
  std::vector<Op> ops;
  for (int c = 0; c <= static_cast<int>(Collective::kBarrier); ++c) {
    for (int a = 0; a <= static_cast<int>(Algorithm::kHalvingDoubling); ++a) {
      const Op op{static_cast<Collective>(c), static_cast<Algorithm>(a)};
      if (IsSupported(op.collective, op.algorithm)) ops.push_back(op);
    }
  }
  return ops;
}

// One participant's call. `count` is per block for all-to-all; `data` holds the operation's
// buffer (all-to-all: the send buffer) and `recv` all-to-all's receive buffer.
struct Call {
  Op op;
  size_t count = 0;
  DataType type = DataType::kInt32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;

  // Elements in `data`.
  size_t Elements(int size) const {
    return op.collective == Collective::kAllToAll ? count * static_cast<size_t>(size) : count;
  }
};

absl::Status RunCall(const Call& call, const OpContext& ctx, int rank, int size,
                     std::vector<std::byte>& data, std::vector<std::byte>& recv) {
  const Ring ring = test::RingOf(rank, size);
  const Participants participants = test::ParticipantsOf(rank, size);
  switch (call.op.collective) {
    case Collective::kAllReduce:
      if (call.op.algorithm == Algorithm::kTree) {
        return TreeAllReduce(ctx, participants, data.data(), call.count, call.type, call.reduce);
      }
      if (call.op.algorithm == Algorithm::kDoubling) {
        return DoublingAllReduce(ctx, participants, data.data(), call.count, call.type,
                                 call.reduce);
      }
      if (call.op.algorithm == Algorithm::kHalvingDoubling) {
        return HalvingDoublingAllReduce(ctx, participants, data.data(), call.count, call.type,
                                        call.reduce);
      }
      return RingAllReduce(ctx, ring, data.data(), call.count, call.type, call.reduce);
    case Collective::kReduceScatter:
      return RingReduceScatter(ctx, ring, data.data(), call.count, call.type, call.reduce);
    case Collective::kAllGather:
      return RingAllGather(ctx, ring, data.data(), call.count, call.type);
    case Collective::kBroadcast:
      return RingBroadcast(ctx, ring, call.root, data.data(), call.count, call.type);
    case Collective::kReduce:
      return RingReduce(ctx, ring, call.root, data.data(), call.count, call.type, call.reduce);
    case Collective::kAllToAll:
      return DirectAllToAll(ctx, participants, data.data(), recv.data(), call.count, call.type);
    case Collective::kBarrier:
      return DisseminationBarrier(ctx, participants);
    default:  // the operations this single-level test does not cover
      break;
  }
  return absl::InternalError("unknown collective");
}

// ---- Traffic ----

// What a participant transmits to one peer: payload bytes and messages. The in-memory transport
// these tests run on counts no framing (a transport's framing is its own; TCP's 40-byte header is
// counted by TCP alone), so the bytes are the payload, and the messages show the chunking.
struct Traffic {
  uint64_t bytes = 0;
  uint64_t messages = 0;

  Traffic& operator+=(const Traffic& other) {
    bytes += other.bytes;
    messages += other.messages;
    return *this;
  }
  Traffic operator+(const Traffic& other) const { return Traffic(*this) += other; }
  Traffic operator*(uint64_t times) const { return {bytes * times, messages * times}; }
  bool operator==(const Traffic&) const = default;
  friend std::ostream& operator<<(std::ostream& out, const Traffic& t) {
    return out << t.bytes << " B in " << t.messages << " messages";
  }
};

// The traffic participant `rank` transmits to each peer, by the formulas in the headers.
std::map<int, Traffic> ExpectedTx(const Call& call, int rank, int size, size_t chunk_bytes) {
  const size_t element = DataTypeSize(call.type);
  const size_t chunk = ChunkElements(chunk_bytes, call.type);
  auto cost = [&](size_t length) { return Traffic{length * element, ChunkCount(length, chunk)}; };
  auto segment_cost = [&](int j) { return cost(SegmentOf(call.count, size, j).length); };
  auto chain_cost = [&](size_t length) {
    return Traffic{length * element,
                   ChunkCount(length, ChainChunkElements(chunk_bytes, length, call.type))};
  };
  auto mod = [&](int i) { return (i % size + size) % size; };
  std::map<int, Traffic> tx;
  if (size == 1) return tx;
  const int next = mod(rank + 1);
  switch (call.op.collective) {
    case Collective::kAllReduce:
      if (call.op.algorithm == Algorithm::kTree) {
        const auto trees = DoubleBinaryTree(size, rank);
        for (int t = 0; t < 2; ++t) {
          const Traffic half = cost(SegmentOf(call.count, 2, t).length);
          if (trees[t].parent != -1) tx[trees[t].parent] += half;
          for (int child : trees[t].children) tx[child] += half;
        }
        break;
      }
      if (call.op.algorithm == Algorithm::kDoubling ||
          call.op.algorithm == Algorithm::kHalvingDoubling) {
        // Paired participants hand the whole buffer over and back.
        const Traffic whole = cost(call.count);
        const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(size)));
        const int extra = size - p;
        if (rank < 2 * extra && rank % 2 == 0) {
          tx[rank + 1] += whole;
          break;
        }
        if (rank < 2 * extra) tx[rank - 1] += whole;
        const int index = rank < 2 * extra ? rank / 2 : rank - extra;
        auto participant = [extra](int i) { return i < extra ? 2 * i + 1 : i + extra; };
        if (call.op.algorithm == Algorithm::kDoubling) {
          // The whole buffer to each partner.
          for (int bit = 1; bit < p; bit <<= 1) tx[participant(index ^ bit)] += whole;
          break;
        }
        // Halving sends the half this participant gives away, doubling the block it holds: the
        // same ranges, in reverse.
        size_t length = call.count;
        for (int mask = p / 2; mask >= 1; mask /= 2) {
          const size_t first = (length + 1) / 2;
          const size_t kept = (index & mask) == 0 ? first : length - first;
          tx[participant(index ^ mask)] += cost(length - kept) + cost(kept);
          length = kept;
        }
        break;
      }
      for (int j = 0; j < size; ++j) {
        if (j != mod(rank + 1)) tx[next] += segment_cost(j);
        if (j != mod(rank + 2)) tx[next] += segment_cost(j);
      }
      break;
    case Collective::kReduceScatter:
      for (int j = 0; j < size; ++j) {
        if (j != rank) tx[next] += segment_cost(j);
      }
      break;
    case Collective::kAllGather:
      for (int j = 0; j < size; ++j) {
        if (j != mod(rank + 1)) tx[next] += segment_cost(j);
      }
      break;
    case Collective::kBroadcast:
      if (rank != mod(call.root - 1)) tx[next] += chain_cost(call.count);
      break;
    case Collective::kReduce:
      if (rank != call.root) tx[next] += chain_cost(call.count);
      break;
    case Collective::kAllToAll:
      for (int peer = 0; peer < size; ++peer) {
        if (peer != rank) tx[peer] += cost(call.count);
      }
      break;
    case Collective::kBarrier:
      for (int distance = 1; distance < size; distance *= 2) {
        tx[mod(rank + distance)] += Traffic{0, 1};
      }
      break;
    default:
      break;
  }
  for (auto it = tx.begin(); it != tx.end();) {
    it = it->second == Traffic{} ? tx.erase(it) : std::next(it);
  }
  return tx;
}

// Runs `call` on a fresh group and returns what each participant transmitted to each peer.
std::vector<std::map<int, Traffic>> MeasureTx(const Call& call, int size, size_t chunk_bytes) {
  Group group(size);
  std::vector<std::vector<std::byte>> data, recv;
  for (int r = 0; r < size; ++r) {
    data.push_back(test::RandomBytes(call.Elements(size) * DataTypeSize(call.type), r, 6));
    recv.push_back(data.back());
  }
  OpContext ctx = test::TestContext(1, absl::Seconds(30));
  ctx.chunk_bytes = chunk_bytes;
  const auto statuses = group.Run(ctx, [&](int r, const OpContext& own) {
    return RunCall(call, own, r, size, data[r], recv[r]);
  });
  std::vector<std::map<int, Traffic>> tx(size);
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    for (const transport::LinkStats& link : group.endpoint(r)->Stats()) {
      if (link.tx_bytes == 0 && link.tx_messages == 0) continue;
      int peer = -1;
      for (int p = 0; p < size; ++p) {
        if (test::Address(p) == link.peer) peer = p;
      }
      EXPECT_NE(peer, -1) << link.peer;
      tx[r][peer] = {link.tx_bytes, link.tx_messages};
    }
  }
  return tx;
}

class ConformanceTest : public ::testing::TestWithParam<Op> {};

TEST_P(ConformanceTest, TransmitsExactlyTheHeadersFormula) {
  const Op op = GetParam();
  // Element counts that split unevenly (1001) and evenly (4200 is a multiple of 2, 3, 4, 7, 8),
  // chunks of 25 float32 elements, a small and a large one.
  for (int size : {2, 3, 4, 7, 8}) {
    for (size_t count : {size_t{1001}, size_t{4200}}) {
      for (size_t chunk_bytes : {size_t{100}, size_t{1} << 20}) {
        for (int root : test::RootsOf(size)) {
          const Call call{op, count, DataType::kFloat32, ReduceOp::kSum, root};
          SCOPED_TRACE(::testing::Message() << "size " << size << " count " << count
                                            << " chunk_bytes " << chunk_bytes << " root " << root);
          const auto tx = MeasureTx(call, size, chunk_bytes);
          for (int r = 0; r < size; ++r) {
            EXPECT_EQ(tx[r], ExpectedTx(call, r, size, chunk_bytes)) << "rank " << r;
          }
          const bool rooted =
              op.collective == Collective::kBroadcast || op.collective == Collective::kReduce;
          if (!rooted) break;
        }
      }
    }
  }
}

// The closed forms the headers state, where they are simple: ring all-reduce transmits
// 2(N-1)/N * D bytes in 2(N-1) steps of a segment's chunks; the tree all-reduce 2(N-1) * D in
// all, each half in its chunks; the ring broadcast and reduce (N-1) * D in all, in the chain's
// chunks.
TEST(CollectiveTrafficTest, ClosedForms) {
  constexpr size_t kCount = 4200;
  constexpr size_t kChunkBytes = 100;  // 25 float32 elements
  const uint64_t d = kCount * sizeof(float);
  auto total = [](const std::vector<std::map<int, Traffic>>& tx) {
    Traffic sum;
    for (const auto& links : tx) {
      for (const auto& [peer, traffic] : links) sum += traffic;
    }
    return sum;
  };
  for (int size : {2, 3, 4, 7, 8}) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    const uint64_t n = static_cast<uint64_t>(size);
    const uint64_t segment_messages = ChunkCount(kCount / n, 25);
    const auto ring =
        MeasureTx({{Collective::kAllReduce, Algorithm::kRing}, kCount}, size, kChunkBytes);
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(ring[r].at((r + 1) % size),
                (Traffic{2 * (n - 1) * d / n, 2 * (n - 1) * segment_messages}));
    }
    const uint64_t half_messages = ChunkCount(kCount / 2, 25);
    EXPECT_EQ(
        total(MeasureTx({{Collective::kAllReduce, Algorithm::kTree}, kCount}, size, kChunkBytes)),
        (Traffic{d, 2 * half_messages} * (2 * (n - 1))));
    const uint64_t chain_messages =
        ChunkCount(kCount, ChainChunkElements(kChunkBytes, kCount, DataType::kFloat32));
    EXPECT_EQ(
        total(MeasureTx({{Collective::kBroadcast, Algorithm::kRing}, kCount}, size, kChunkBytes)),
        (Traffic{d, chain_messages} * (n - 1)));
    EXPECT_EQ(
        total(MeasureTx({{Collective::kReduce, Algorithm::kRing}, kCount}, size, kChunkBytes)),
        (Traffic{d, chain_messages} * (n - 1)));
  }
}

// With the default 1 MiB chunks a ring all-reduce of D = 16 MiB on 4 participants sends each
// participant's 2(N-1)/N * D in 6 steps of one 4 MiB segment in 1 MiB chunks: 24 messages, so a
// transport's per-message framing (TCP's 40 bytes) costs it far less than 1 %.
TEST(CollectiveTrafficTest, RingAllReduceSendsWholeChunksOfTheDefaultSize) {
  constexpr size_t kCount = size_t{4} << 20;  // 16 MiB of float32
  constexpr int kSize = 4;
  const uint64_t d = kCount * sizeof(float);
  const auto tx = MeasureTx({{Collective::kAllReduce, Algorithm::kRing}, kCount}, kSize,
                            OpContext().chunk_bytes);
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(tx[r].at((r + 1) % kSize), (Traffic{2 * (kSize - 1) * d / kSize, 24}))
        << "rank " << r;
  }
}

// ---- Failures ----

// A participant's endpoint dies before the operation or after its first send. Every participant
// must return by the deadline plus a second; a killed victim with an error, the others either
// done or with Unavailable / DeadlineExceeded naming the peer they were sending to or receiving
// from. When the victim tried to send anything after its death, somebody missed that message and
// must fail. The cases run at once, each on its own fabric.
TEST_P(ConformanceTest, KilledPeerNeverHangsAnyone) {
  const Op op = GetParam();
  const absl::Duration kTimeout = absl::Milliseconds(500);
  struct Case {
    int size, victim, kill_after, root;
  };
  std::vector<Case> cases;
  for (int size : {2, 4, 7}) {
    for (int victim : test::RootsOf(size)) {
      for (int kill_after : {0, 1}) cases.push_back({size, victim, kill_after, size / 2});
    }
  }
  std::vector<std::string> failures(cases.size());
  std::vector<std::thread> runs;
  const absl::Time deadline = absl::Now() + kTimeout;
  for (size_t i = 0; i < cases.size(); ++i) {
    runs.emplace_back([&, i] {
      const Case c = cases[i];
      const Call call{op, 4000, DataType::kFloat32, ReduceOp::kSum, c.root};
      Group group(c.size);
      test::DyingEndpoint victim(group.endpoint(c.victim), &group.fabric(), c.kill_after);
      std::vector<transport::Endpoint*> endpoints;
      for (int r = 0; r < c.size; ++r) {
        endpoints.push_back(r == c.victim ? &victim : group.endpoint(r));
      }
      std::vector<std::vector<std::byte>> data(
          c.size, std::vector<std::byte>(call.Elements(c.size) * sizeof(float)));
      std::vector<std::vector<std::byte>> recv = data;
      OpContext ctx = test::TestContext(1, kTimeout);
      ctx.deadline = deadline;
      ctx.chunk_bytes = 64;
      std::vector<absl::Time> returned(c.size);
      const auto statuses = group.Run(
          ctx,
          [&](int r, const OpContext& own) {
            absl::Status status = RunCall(call, own, r, c.size, data[r], recv[r]);
            returned[r] = absl::Now();
            return status;
          },
          endpoints);
      std::string& failure = failures[i];
      const std::string where =
          absl::StrCat("size ", c.size, " victim ", c.victim, " kill_after ", c.kill_after, ": ");
      int others_failed = 0;
      for (int r = 0; r < c.size; ++r) {
        if (returned[r] > deadline + absl::Seconds(1)) {
          absl::StrAppend(&failure, where, "rank ", r, " returned ",
                          absl::FormatDuration(returned[r] - deadline), " after the deadline\n");
        }
        if (r == c.victim) {
          if (victim.killed() && statuses[r].ok()) {
            absl::StrAppend(&failure, where, "the killed victim succeeded\n");
          }
          continue;
        }
        if (statuses[r].ok()) continue;
        ++others_failed;
        const bool expected_code =
            absl::IsUnavailable(statuses[r]) || absl::IsDeadlineExceeded(statuses[r]);
        const bool names_peer =
            statuses[r].message().find("from rank") != absl::string_view::npos ||
            statuses[r].message().find("to rank") != absl::string_view::npos;
        if (!expected_code || !names_peer) {
          absl::StrAppend(&failure, where, "rank ", r, ": ", statuses[r].ToString(), "\n");
        }
      }
      if (victim.sends_after_death() > 0 && others_failed == 0) {
        absl::StrAppend(&failure, where, "nobody noticed the victim's death\n");
      }
    });
  }
  for (std::thread& t : runs) t.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
}

// Participant size-1 never calls: the others fail with DeadlineExceeded, or Unavailable, by the
// deadline plus a second, naming whom they waited for.
TEST_P(ConformanceTest, MissingParticipantTimesOut) {
  const Op op = GetParam();
  constexpr int kSize = 4;
  const Call call{op, 1000, DataType::kFloat32, ReduceOp::kSum, 1};
  Group group(kSize);
  std::vector<std::vector<std::byte>> data(
      kSize, std::vector<std::byte>(call.Elements(kSize) * sizeof(float)));
  std::vector<std::vector<std::byte>> recv = data;
  OpContext ctx = test::TestContext(1, absl::Milliseconds(300));
  ctx.chunk_bytes = 256;
  std::vector<absl::Status> statuses(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize - 1; ++r) {
    threads.emplace_back([&, r] {
      OpContext own = ctx;
      own.endpoint = group.endpoint(r);
      statuses[r] = RunCall(call, own, r, kSize, data[r], recv[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now(), ctx.deadline + absl::Seconds(1));
  int failed = 0;
  for (int r = 0; r < kSize - 1; ++r) {
    if (statuses[r].ok()) continue;
    ++failed;
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_THAT(statuses[r].message(), HasSubstr("receiving from rank")) << statuses[r];
  }
  EXPECT_GE(failed, 1);
}

// ---- Operations back to back and on two communicators ----

// Every supported operation runs in turn (sequence numbers 1, 2, ...) with no synchronisation
// between them, on two communicators at once over the same endpoints; a fast participant thus
// sends for the next operation while a slow one still finishes the last. Every result must be
// right.
TEST(CollectiveSequenceTest, OperationsBackToBackOnTwoCommunicators) {
  constexpr int kSize = 5;
  constexpr size_t kCount = 333;
  const std::vector<Op> ops = SupportedOps();
  Group group(kSize);
  std::vector<std::string> failures(2 * kSize);
  std::vector<std::thread> threads;
  for (int comm = 0; comm < 2; ++comm) {
    for (int r = 0; r < kSize; ++r) {
      threads.emplace_back([&, comm, r] {
        std::string& failure = failures[comm * kSize + r];
        const int32_t base = comm == 0 ? 1 : 1000;
        OpContext ctx = test::TestContext(0, absl::Seconds(30));
        ctx.endpoint = group.endpoint(r);
        ctx.comm = 100 + comm;
        ctx.chunk_bytes = 128;
        for (const Op& op : ops) {
          ++ctx.seq;
          const Call call{op, kCount, DataType::kInt32, ReduceOp::kSum, 2};
          // Rank r contributes base * (r + 1) everywhere: sums are base * 15, every other
          // result identifies its source.
          std::vector<int32_t> input(call.Elements(kSize), base * (r + 1));
          std::vector<std::byte> data = test::AsBytes(input);
          std::vector<std::byte> recv(data.size());
          const absl::Status status = RunCall(call, ctx, r, kSize, data, recv);
          if (!status.ok()) {
            absl::StrAppend(&failure, op.Name(), ": ", status.ToString(), "\n");
            continue;
          }
          const std::vector<int32_t> got = test::FromBytes<int32_t>(data);
          const std::vector<int32_t> received = test::FromBytes<int32_t>(recv);
          auto check = [&](size_t i, int32_t value, int32_t expected) {
            if (value != expected) {
              absl::StrAppend(&failure, op.Name(), " element ", i, ": ", value, " != ", expected,
                              "\n");
            }
          };
          const int32_t sum = base * 15;
          for (size_t i = 0; i < kCount; ++i) {
            const auto owner = [&] {
              for (int j = 0; j < kSize; ++j) {
                const ElementRange s = SegmentOf(kCount, kSize, j);
                if (i >= s.begin && i < s.begin + s.length) return j;
              }
              return -1;
            }();
            switch (op.collective) {
              case Collective::kAllReduce:
                check(i, got[i], sum);
                break;
              case Collective::kReduceScatter:
                if (owner == r) check(i, got[i], sum);
                break;
              case Collective::kAllGather:
                check(i, got[i], base * (owner + 1));
                break;
              case Collective::kBroadcast:
                check(i, got[i], base * (call.root + 1));
                break;
              case Collective::kReduce:
                check(i, got[i], r == call.root ? sum : base * (r + 1));
                break;
              case Collective::kAllToAll:
                for (int j = 0; j < kSize; ++j) check(i, received[j * kCount + i], base * (j + 1));
                break;
              case Collective::kBarrier:
              default:
                break;
            }
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 2 * kSize; ++i)
    EXPECT_EQ(failures[i], "") << "comm " << i / kSize << " rank " << i % kSize;
}

INSTANTIATE_TEST_SUITE_P(EverySupportedOp, ConformanceTest, ::testing::ValuesIn(SupportedOps()),
                         [](const auto& info) { return info.param.Name(); });

}  // namespace
}  // namespace baton::collective
