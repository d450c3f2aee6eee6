#include "collective/direct_all_to_all.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "tests/collective/collective_test_support.h"

// Send buffers hold random bits, receive buffers other random bits; afterwards block i of
// participant j's receive buffer must be block j of participant i's send buffer, and the send
// buffers unchanged. The sweep's counts are per block (the large one is 2^15 + 3 elements per
// peer, so up to 8 * 2^15 elements per participant).

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

constexpr size_t kLargeBlock = (size_t{1} << 15) + 3;

class DirectAllToAllSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(DirectAllToAllSweep, EveryBlockReachesItsPeer) {
  const SweepCase& c = GetParam();
  const size_t count = c.count(kLargeBlock);
  const size_t block = count * DataTypeSize(c.type);
  const size_t total = block * static_cast<size_t>(c.size);
  std::vector<std::vector<std::byte>> send, recv;
  for (int r = 0; r < c.size; ++r) {
    send.push_back(test::RandomBytes(total, r, 4));
    recv.push_back(test::RandomBytes(total, r, 5));
  }
  const std::vector<std::vector<std::byte>> inputs = send;

  Group group(c.size);
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return DirectAllToAll(ctx, test::ParticipantsOf(r, c.size), send[r].data(), recv[r].data(),
                          count, c.type);
  });
  for (int j = 0; j < c.size; ++j) {
    ASSERT_TRUE(statuses[j].ok()) << "rank " << j << ": " << statuses[j];
    EXPECT_EQ(send[j], inputs[j]) << "rank " << j << " changed its send buffer";
    std::vector<std::byte> expected(total);
    for (int i = 0; i < c.size; ++i) {
      std::copy_n(inputs[i].begin() + j * block, block, expected.begin() + i * block);
    }
    const int64_t diff = test::FirstDifference(recv[j], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << j << " differs at element " << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypes, DirectAllToAllSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/false, /*rooted=*/false,
                             {DataType::kFloat32, DataType::kUint8})),
                         [](const auto& info) { return info.param.Name(false, false); });

TEST(DirectAllToAllTest, Transpose) {
  Group group(3);
  std::vector<std::vector<std::byte>> send, recv(3, test::AsBytes(std::vector<int32_t>(6, -1)));
  for (int r = 0; r < 3; ++r) {
    send.push_back(test::AsBytes<int32_t>(
        {10 * r, 10 * r + 1, 10 * r + 2, 10 * r + 3, 10 * r + 4, 10 * r + 5}));
  }
  const auto statuses =
      group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& ctx) {
        return DirectAllToAll(ctx, test::ParticipantsOf(r, 3), send[r].data(), recv[r].data(), 2,
                              DataType::kInt32);
      });
  const std::vector<int32_t> expected[] = {
      {0, 1, 10, 11, 20, 21}, {2, 3, 12, 13, 22, 23}, {4, 5, 14, 15, 24, 25}};
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(test::FromBytes<int32_t>(recv[r]), expected[r]) << "rank " << r;
  }
}

TEST(DirectAllToAllTest, RejectsBadArguments) {
  int32_t send[8] = {};
  int32_t recv[8] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Participants two = test::ParticipantsOf(0, 2);
  EXPECT_EQ(
      DirectAllToAll(ctx, Participants{2, {"a", "b"}}, send, recv, 4, DataType::kInt32).code(),
      kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, Participants{0, {}}, send, recv, 4, DataType::kInt32).code(),
            kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, two, send, recv, 4, static_cast<DataType>(77)).code(), kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, two, send, recv, SIZE_MAX / 6, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, two, nullptr, recv, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, two, send, nullptr, 4, DataType::kInt32).code(), kInvalid);
  // In place and partly overlapping.
  EXPECT_EQ(DirectAllToAll(ctx, two, send, send, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(DirectAllToAll(ctx, two, send, send + 7, 4, DataType::kInt32).code(), kInvalid);
  // No endpoint, or a missing address.
  EXPECT_EQ(DirectAllToAll(ctx, two, send, recv, 4, DataType::kInt32).code(), kInvalid);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(
      DirectAllToAll(ctx, Participants{0, {"rank0", ""}}, send, recv, 4, DataType::kInt32).code(),
      kInvalid);
  // Alone: a local copy, no transport needed.
  EXPECT_TRUE(
      DirectAllToAll(OpContext{}, Participants{0, {"x"}}, send, recv, 8, DataType::kInt32).ok());
  EXPECT_TRUE(DirectAllToAll(ctx, two, send, recv, 0, DataType::kInt32).ok());
}

// DirectAllToAllOfRanks: participants (daemons) standing for several ranks each, placed in any
// order, some for none; every block must land in its rank's buffer, through several chunks.
struct RanksCase {
  std::vector<std::vector<int>> ranks_of;
  size_t block_bytes;
  size_t chunk_bytes;
};

class DirectAllToAllOfRanksTest : public ::testing::TestWithParam<RanksCase> {};

TEST_P(DirectAllToAllOfRanksTest, EveryBlockReachesItsRank) {
  const RanksCase& c = GetParam();
  const int daemons = static_cast<int>(c.ranks_of.size());
  size_t world = 0;
  for (const auto& ranks : c.ranks_of) world += ranks.size();
  const size_t total = c.block_bytes * world;
  // Buffers by global rank.
  std::vector<std::vector<std::byte>> send, recv;
  for (size_t g = 0; g < world; ++g) {
    send.push_back(test::RandomBytes(total, static_cast<int>(g), 6));
    recv.push_back(test::RandomBytes(total, static_cast<int>(g), 7));
  }
  const std::vector<std::vector<std::byte>> inputs = send;
  OpContext context = test::TestContext(3, absl::Seconds(60));
  context.chunk_bytes = c.chunk_bytes;
  Group group(daemons);
  const auto statuses = group.Run(context, [&](int d, const OpContext& ctx) {
    std::vector<const std::byte*> sends;
    std::vector<std::byte*> recvs;
    for (int g : c.ranks_of[d]) {
      sends.push_back(send[g].data());
      recvs.push_back(recv[g].data());
    }
    return DirectAllToAllOfRanks(ctx, test::ParticipantsOf(d, daemons), c.ranks_of, sends, recvs,
                                 c.block_bytes);
  });
  for (int d = 0; d < daemons; ++d)
    ASSERT_TRUE(statuses[d].ok()) << "daemon " << d << ": " << statuses[d];
  for (size_t g = 0; g < world; ++g) {
    EXPECT_EQ(send[g], inputs[g]) << "rank " << g << "'s send buffer changed";
    std::vector<std::byte> expected(total);
    for (size_t a = 0; a < world; ++a) {
      std::copy_n(inputs[a].begin() + g * c.block_bytes, c.block_bytes,
                  expected.begin() + a * c.block_bytes);
    }
    EXPECT_EQ(test::FirstDifference(recv[g], expected, 1), -1) << "rank " << g;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DirectAllToAllOfRanksTest,
    ::testing::Values(
        // One daemon: local copies only.
        RanksCase{{{1, 0, 2}}, 40, 16},
        // Blocks of ranks, as launchers place them; one chunk and several.
        RanksCase{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 1000, 1 << 20},
        RanksCase{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 1000, 64},
        // Scattered and uneven placement, a daemon with no rank, a last chunk that is short.
        RanksCase{{{3, 0}, {5}, {}, {1, 4, 2}}, 257, 100},
        RanksCase{{{0}, {1}, {2}}, (size_t{1} << 17) + 5, size_t{1} << 15}));

TEST(DirectAllToAllOfRanksArguments, RejectsBadArguments) {
  std::vector<std::byte> a(64), b(64), c(64), d(64);
  const std::vector<std::vector<int>> two_daemons = {{0, 1}, {2, 3}};
  const std::vector<const std::byte*> sends = {a.data(), b.data()};
  const std::vector<std::byte*> recvs = {c.data(), d.data()};
  Group group(2);
  OpContext ctx = test::TestContext(1, absl::Seconds(5));
  ctx.endpoint = group.endpoint(0);
  const Participants me = test::ParticipantsOf(0, 2);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  auto call = [&](const std::vector<std::vector<int>>& ranks_of, std::vector<const std::byte*> s,
                  std::vector<std::byte*> r, size_t block) {
    return DirectAllToAllOfRanks(ctx, me, ranks_of, s, r, block).code();
  };
  EXPECT_EQ(call({{0, 1}}, sends, recvs, 16), kInvalid);                   // lists for 1 of 2
  EXPECT_EQ(call({{0, 1}, {1, 3}}, sends, recvs, 16), kInvalid);           // rank 1 twice
  EXPECT_EQ(call({{0, 1}, {2, 4}}, sends, recvs, 16), kInvalid);           // rank 4 of 4
  EXPECT_EQ(call({{0, 1}, {2, -1}}, sends, recvs, 16), kInvalid);          // negative
  EXPECT_EQ(call({{0}, {1, 2, 3}}, sends, recvs, 16), kInvalid);           // 2 buffers, 1 rank
  EXPECT_EQ(call(two_daemons, {a.data(), nullptr}, recvs, 16), kInvalid);  // missing buffer
  EXPECT_EQ(call(two_daemons, sends, recvs, SIZE_MAX / 2), kInvalid);      // overflows
  // A send overlapping any local receive buffer, its own or another rank's.
  EXPECT_EQ(call(two_daemons, sends, {c.data(), a.data() + 8}, 4), kInvalid);
  EXPECT_EQ(call(two_daemons, {a.data(), b.data()}, {b.data(), c.data()}, 4), kInvalid);
  // Nothing to move, or a missing address.
  EXPECT_TRUE(DirectAllToAllOfRanks(ctx, me, two_daemons, sends, recvs, 0).ok());
  EXPECT_EQ(DirectAllToAllOfRanks(ctx, Participants{0, {"rank0", ""}}, two_daemons, sends, recvs, 4)
                .code(),
            kInvalid);
}

// Neither exchange sends a block once the operation cannot succeed: with a participant lost
// before the call, or the deadline already past, the survivors fail without transmitting a byte,
// naming the lost peer or the peer they were about to send to. (Sending everything first and
// only then waiting kept a rank of a starved machine sending to its live peers long after the
// deadline.)
enum class Doom { kPeerLost, kDeadlinePassed };

class DirectAllToAllDoomedTest : public ::testing::TestWithParam<std::tuple<bool, Doom>> {};

TEST_P(DirectAllToAllDoomedTest, SendsNothingAndNamesThePeer) {
  const auto [of_ranks, doom] = GetParam();
  constexpr int kSize = 4;
  constexpr int kVictim = 2;
  constexpr size_t kBlockBytes = 4096;
  std::vector<std::vector<std::byte>> send(kSize, std::vector<std::byte>(kBlockBytes * kSize));
  std::vector<std::vector<std::byte>> recv = send;
  Group group(kSize);
  OpContext context = test::TestContext(1, absl::Seconds(60));
  context.chunk_bytes = 64;
  if (doom == Doom::kPeerLost) {
    group.fabric().Kill(group.endpoint(kVictim)->address());
  } else {
    context.deadline = absl::Now() - absl::Seconds(1);
  }
  const std::vector<std::vector<int>> ranks_of = {{0}, {1}, {2}, {3}};
  const auto statuses = group.Run(context, [&](int r, const OpContext& ctx) {
    const Participants participants = test::ParticipantsOf(r, kSize);
    if (!of_ranks) {
      return DirectAllToAll(ctx, participants, send[r].data(), recv[r].data(),
                            kBlockBytes / sizeof(int32_t), DataType::kInt32);
    }
    const std::vector<const std::byte*> sends = {send[r].data()};
    const std::vector<std::byte*> recvs = {recv[r].data()};
    return DirectAllToAllOfRanks(ctx, participants, ranks_of, sends, recvs, kBlockBytes);
  });
  for (int r = 0; r < kSize; ++r) {
    if (doom == Doom::kPeerLost && r == kVictim) continue;
    const absl::Status& status = statuses[r];
    if (doom == Doom::kPeerLost) {
      EXPECT_TRUE(absl::IsUnavailable(status)) << "rank " << r << ": " << status;
      EXPECT_THAT(std::string(status.message()),
                  ::testing::HasSubstr("receiving from " + test::Address(kVictim)))
          << "rank " << r;
    } else {
      EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << "rank " << r << ": " << status;
      EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("sending to "))
          << "rank " << r;
    }
    EXPECT_EQ(group.TxBytes(r), 0u) << "rank " << r << ": " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(
    BothExchanges, DirectAllToAllDoomedTest,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(Doom::kPeerLost, Doom::kDeadlinePassed)),
    [](const ::testing::TestParamInfo<std::tuple<bool, Doom>>& info) {
      return std::string(std::get<0>(info.param) ? "of_ranks_" : "one_block_") +
             (std::get<1>(info.param) == Doom::kPeerLost ? "peer_lost" : "deadline_passed");
    });

}  // namespace
}  // namespace baton::collective
