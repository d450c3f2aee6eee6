#include "collective/halving_doubling_all_reduce.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "tests/collective/collective_test_support.h"

// Every participant's buffer must equal the serial reference bit for bit (the exact inputs of
// collective_test_support.h make the combining order irrelevant), and, with inputs whose sums do
// round, every participant must still end with the same bits as every other.

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

void ExpectMatchesSerialReference(const SweepCase& c) {
  const size_t count = c.count();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.size; ++r) {
    inputs.push_back(test::ReduceInput(c.type, c.op, c.size, r, count));
  }
  const std::vector<std::byte> expected = test::SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return HalvingDoublingAllReduce(ctx, test::ParticipantsOf(r, c.size), buffers[r].data(), count,
                                    c.type, c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = test::FirstDifference(buffers[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
  }
}

class HalvingDoublingAllReduceSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(HalvingDoublingAllReduceSweep, MatchesSerialReference) {
  ExpectMatchesSerialReference(GetParam());
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, HalvingDoublingAllReduceSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/true, /*rooted=*/false,
                             {DataType::kFloat32, DataType::kBfloat16})),
                         [](const auto& info) { return info.param.Name(true, false); });

// Sizes around powers of two (pairs in and out, several levels of halving), every op.
std::vector<SweepCase> MoreSizes() {
  std::vector<SweepCase> cases;
  for (int size : {5, 6, 7, 8, 9, 12, 16}) {
    for (DataType type : {DataType::kInt32, DataType::kFloat16}) {
      for (ReduceOp op : test::kAllOps) cases.push_back({size, test::CountKind::kOdd, type, op});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(MoreSizes, HalvingDoublingAllReduceSweep, ::testing::ValuesIn(MoreSizes()),
                         [](const auto& info) { return info.param.Name(true, false); });

TEST(HalvingDoublingAllReduceTest, EveryParticipantEndsWithTheSameBitsWhenSumsRound) {
  for (int size : {2, 3, 4, 5, 6, 7, 8}) {
    constexpr size_t kCount = 4099;
    Group group(size);
    std::vector<std::vector<std::byte>> buffers;
    for (int r = 0; r < size; ++r) {
      std::vector<float> values(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        values[i] = static_cast<float>((i * 2654435761u + r * 40503u) % 100003) / 7.0f - 5000.0f;
      }
      buffers.push_back(test::AsBytes<float>(values));
    }
    OpContext ctx = test::TestContext(1, absl::Seconds(30));
    ctx.chunk_bytes = 1000;  // several chunks per exchange
    const auto statuses = group.Run(ctx, [&](int r, const OpContext& own) {
      return HalvingDoublingAllReduce(own, test::ParticipantsOf(r, size), buffers[r].data(), kCount,
                                      DataType::kFloat32, ReduceOp::kSum);
    });
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << "size " << size << " rank " << r << ": " << statuses[r];
      EXPECT_TRUE(buffers[r] == buffers[0]) << "size " << size << ": rank " << r << " differs";
    }
  }
}

TEST(HalvingDoublingAllReduceTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Participants two = test::ParticipantsOf(0, 2);
  auto code = [&](const Participants& p, void* buffer, size_t count, DataType type, ReduceOp op) {
    return HalvingDoublingAllReduce(ctx, p, buffer, count, type, op).code();
  };
  EXPECT_EQ(code(Participants{2, {"a", "b"}}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Participants{0, {}}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(two, data, 4, static_cast<DataType>(77), ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(two, data, 4, DataType::kInt32, static_cast<ReduceOp>(9)), kInvalid);
  EXPECT_EQ(code(two, data, SIZE_MAX / 2, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(two, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);  // no endpoint
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(code(two, nullptr, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Participants{0, {"rank0", ""}}, data, 4, DataType::kInt32, ReduceOp::kSum),
            kInvalid);
  EXPECT_TRUE(HalvingDoublingAllReduce(OpContext{}, Participants{0, {"x"}}, data, 4,
                                       DataType::kInt32, ReduceOp::kSum)
                  .ok());
  EXPECT_TRUE(HalvingDoublingAllReduce(ctx, two, data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace baton::collective
