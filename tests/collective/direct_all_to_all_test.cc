#include "collective/direct_all_to_all.h"

#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace
}  // namespace baton::collective
