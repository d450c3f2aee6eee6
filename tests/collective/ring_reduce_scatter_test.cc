#include "collective/ring_reduce_scatter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/segments.h"
#include "tests/collective/collective_test_support.h"

// Every participant's own segment must equal that segment of the serial reference, bit for bit
// (see collective_test_support.h for why the inputs make that valid in every type).

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

class RingReduceScatterSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingReduceScatterSweep, OwnSegmentMatchesSerialReference) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  const size_t element = DataTypeSize(c.type);
  const std::vector<std::vector<std::byte>> inputs =
      test::ReduceInputs(c.type, c.op, c.size, count);
  const std::vector<std::byte> expected = test::SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return RingReduceScatter(ctx, test::RingOf(r, c.size), buffers[r].data(), count, c.type, c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const ElementRange own = SegmentOf(count, c.size, r);
    const std::vector<std::byte> got(buffers[r].begin() + own.begin * element,
                                     buffers[r].begin() + (own.begin + own.length) * element);
    const std::vector<std::byte> want(expected.begin() + own.begin * element,
                                      expected.begin() + (own.begin + own.length) * element);
    const int64_t diff = test::FirstDifference(got, want, element);
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element "
                        << own.begin + diff;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, RingReduceScatterSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/true, /*rooted=*/false,
                             {DataType::kFloat32, DataType::kBfloat16})),
                         [](const auto& info) { return info.param.Name(true, false); });

// Four ranks of four elements, [1,2,3,4] * 10^r: rank r ends with exactly element r of the sum.
TEST(RingReduceScatterTest, RankREndsWithElementROfTheSum) {
  Group group(4);
  std::vector<std::vector<std::byte>> buffers = {
      test::AsBytes<float>({1, 2, 3, 4}), test::AsBytes<float>({10, 20, 30, 40}),
      test::AsBytes<float>({100, 200, 300, 400}), test::AsBytes<float>({1000, 2000, 3000, 4000})};
  const auto statuses =
      group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& ctx) {
        return RingReduceScatter(ctx, test::RingOf(r, 4), buffers[r].data(), 4, DataType::kFloat32,
                                 ReduceOp::kSum);
      });
  const float expected[] = {1111, 2222, 3333, 4444};
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(SegmentOf(4, 4, r), (ElementRange{static_cast<size_t>(r), 1}));
    EXPECT_EQ(test::FromBytes<float>(buffers[r])[r], expected[r]) << "rank " << r;
  }
}

TEST(RingReduceScatterTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  auto code = [&](const Ring& ring, void* buffer, size_t count, DataType type, ReduceOp op) {
    return RingReduceScatter(ctx, ring, buffer, count, type, op).code();
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(Ring{2, 2, "a", "b"}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 0, "", ""}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 2, "a", "b"}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 1, "", ""}, data, 4, static_cast<DataType>(77), ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 1, "", ""}, data, 4, DataType::kInt32, static_cast<ReduceOp>(9)),
            kInvalid);
  EXPECT_EQ(code(Ring{0, 1, "", ""}, data, SIZE_MAX / 2, DataType::kInt32, ReduceOp::kSum),
            kInvalid);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(code(test::RingOf(0, 2), nullptr, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  EXPECT_EQ(code(Ring{0, 2, "", "rank1"}, data, 4, DataType::kInt32, ReduceOp::kSum), kInvalid);
  // Nothing to do: no transport needed.
  EXPECT_TRUE(
      RingReduceScatter(OpContext{}, Ring{}, data, 4, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_TRUE(
      RingReduceScatter(ctx, test::RingOf(0, 2), data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace baton::collective
