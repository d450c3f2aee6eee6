#include "collective/ring_reduce.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "tests/collective/collective_test_support.h"

// The root's buffer must equal the serial reference bit for bit (see collective_test_support.h
// for why the inputs make that valid whatever the order of combination), and every other
// participant's buffer must be unchanged.

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

class RingReduceSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingReduceSweep, RootMatchesSerialReferenceOthersUnchanged) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  const size_t element = DataTypeSize(c.type);
  const std::vector<std::vector<std::byte>> inputs =
      test::ReduceInputs(c.type, c.op, c.size, count);
  const std::vector<std::byte> expected = test::SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return RingReduce(ctx, test::RingOf(r, c.size), c.root, buffers[r].data(), count, c.type, c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff =
        test::FirstDifference(buffers[r], r == c.root ? expected : inputs[r], element);
    EXPECT_EQ(diff, -1) << "rank " << r << (r == c.root ? " (root)" : "") << " differs at element "
                        << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOpsRoots, RingReduceSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/true, /*rooted=*/true,
                             {DataType::kFloat32, DataType::kBfloat16})),
                         [](const auto& info) { return info.param.Name(true, true); });

// Four ranks of four elements, [1,2,3,4] * 10^r, reduced to each root in turn: the root gets the
// sum.
TEST(RingReduceTest, EachRootInTurnGetsTheSumOfFourDistinctInputs) {
  for (int root = 0; root < 4; ++root) {
    Group group(4);
    std::vector<std::vector<std::byte>> buffers = {
        test::AsBytes<float>({1, 2, 3, 4}), test::AsBytes<float>({10, 20, 30, 40}),
        test::AsBytes<float>({100, 200, 300, 400}), test::AsBytes<float>({1000, 2000, 3000, 4000})};
    const auto statuses =
        group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& ctx) {
          return RingReduce(ctx, test::RingOf(r, 4), root, buffers[r].data(), 4, DataType::kFloat32,
                            ReduceOp::kSum);
        });
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(test::FromBytes<float>(buffers[root]), (std::vector<float>{1111, 2222, 3333, 4444}))
        << "root " << root;
  }
}

TEST(RingReduceTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  auto code = [&](const Ring& ring, int root, void* buffer, size_t count, DataType type,
                  ReduceOp op) {
    return RingReduce(ctx, ring, root, buffer, count, type, op).code();
  };
  EXPECT_EQ(code(Ring{2, 2, "a", "b"}, 0, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{}, 1, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{}, 0, data, 4, static_cast<DataType>(77), ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{}, 0, data, 4, DataType::kInt32, static_cast<ReduceOp>(9)), kInvalid);
  EXPECT_EQ(code(Ring{}, 0, data, SIZE_MAX / 2, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 2, "a", "b"}, 0, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(code(test::RingOf(0, 2), 0, nullptr, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_TRUE(RingReduce(OpContext{}, Ring{}, 0, data, 4, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_TRUE(
      RingReduce(ctx, test::RingOf(0, 2), 1, data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace baton::collective
