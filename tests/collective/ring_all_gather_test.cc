#include "collective/ring_all_gather.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/segments.h"
#include "tests/collective/collective_test_support.h"

// Each participant's segment holds random bits and the rest of its buffer different random bits
// (standing for stale data); afterwards every buffer must be the concatenation of the owners'
// segments.

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

class RingAllGatherSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingAllGatherSweep, EveryoneHasEverySegment) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  const size_t element = DataTypeSize(c.type);
  std::vector<std::vector<std::byte>> contributions, buffers;
  for (int r = 0; r < c.size; ++r) {
    contributions.push_back(test::RandomBytes(count * element, r, 1));
    buffers.push_back(test::RandomBytes(count * element, r, 2));
  }
  std::vector<std::byte> expected(count * element);
  for (int r = 0; r < c.size; ++r) {
    const ElementRange own = SegmentOf(count, c.size, r);
    std::copy_n(contributions[r].begin() + own.begin * element, own.length * element,
                buffers[r].begin() + own.begin * element);
    std::copy_n(contributions[r].begin() + own.begin * element, own.length * element,
                expected.begin() + own.begin * element);
  }

  Group group(c.size);
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return RingAllGather(ctx, test::RingOf(r, c.size), buffers[r].data(), count, c.type);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = test::FirstDifference(buffers[r], expected, element);
    EXPECT_EQ(diff, -1) << "rank " << r << " differs at element " << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypes, RingAllGatherSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/false, /*rooted=*/false,
                             {DataType::kFloat32, DataType::kUint8})),
                         [](const auto& info) { return info.param.Name(false, false); });

TEST(RingAllGatherTest, EqualBlocksInRankOrder) {
  Group group(4);
  std::vector<std::vector<std::byte>> buffers(4, test::AsBytes(std::vector<int32_t>(8, -1)));
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> values(8, -1);
    values[2 * r] = 10 * r;
    values[2 * r + 1] = 10 * r + 1;
    buffers[r] = test::AsBytes(values);
  }
  const auto statuses =
      group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& ctx) {
        return RingAllGather(ctx, test::RingOf(r, 4), buffers[r].data(), 8, DataType::kInt32);
      });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(test::FromBytes<int32_t>(buffers[r]),
              (std::vector<int32_t>{0, 1, 10, 11, 20, 21, 30, 31}));
  }
}

TEST(RingAllGatherTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(RingAllGather(ctx, Ring{2, 2, "a", "b"}, data, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(RingAllGather(ctx, Ring{0, 2, "a", "b"}, data, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(RingAllGather(ctx, Ring{}, data, 4, static_cast<DataType>(77)).code(), kInvalid);
  EXPECT_EQ(RingAllGather(ctx, Ring{}, data, SIZE_MAX / 2, DataType::kInt32).code(), kInvalid);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(RingAllGather(ctx, test::RingOf(0, 2), nullptr, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_TRUE(RingAllGather(OpContext{}, Ring{}, data, 4, DataType::kInt32).ok());
  EXPECT_TRUE(RingAllGather(ctx, test::RingOf(0, 2), data, 0, DataType::kInt32).ok());
}

}  // namespace
}  // namespace baton::collective
