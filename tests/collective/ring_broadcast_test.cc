#include "collective/ring_broadcast.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "tests/collective/collective_test_support.h"

// The root's buffer holds random bits, everyone else's other random bits; afterwards every
// buffer must equal the root's, and the root's must be unchanged.

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

class RingBroadcastSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingBroadcastSweep, EveryoneHasTheRootsData) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  const size_t element = DataTypeSize(c.type);
  std::vector<std::vector<std::byte>> buffers;
  for (int r = 0; r < c.size; ++r) buffers.push_back(test::RandomBytes(count * element, r, 3));
  const std::vector<std::byte> expected = buffers[c.root];

  Group group(c.size);
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return RingBroadcast(ctx, test::RingOf(r, c.size), c.root, buffers[r].data(), count, c.type);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = test::FirstDifference(buffers[r], expected, element);
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the root at element " << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesRoots, RingBroadcastSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/false, /*rooted=*/true,
                             {DataType::kFloat32, DataType::kUint8})),
                         [](const auto& info) { return info.param.Name(false, true); });

TEST(RingBroadcastTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(RingBroadcast(ctx, Ring{2, 2, "a", "b"}, 0, data, 4, DataType::kInt32).code(),
            kInvalid);
  EXPECT_EQ(RingBroadcast(ctx, Ring{}, 1, data, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(RingBroadcast(ctx, Ring{}, -1, data, 4, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(RingBroadcast(ctx, Ring{}, 0, data, 4, static_cast<DataType>(77)).code(), kInvalid);
  EXPECT_EQ(RingBroadcast(ctx, Ring{}, 0, data, SIZE_MAX / 2, DataType::kInt32).code(), kInvalid);
  EXPECT_EQ(RingBroadcast(ctx, Ring{0, 2, "a", "b"}, 0, data, 4, DataType::kInt32).code(),
            kInvalid);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(RingBroadcast(ctx, test::RingOf(0, 2), 0, nullptr, 4, DataType::kInt32).code(),
            kInvalid);
  EXPECT_TRUE(RingBroadcast(OpContext{}, Ring{}, 0, data, 4, DataType::kInt32).ok());
  EXPECT_TRUE(RingBroadcast(ctx, test::RingOf(0, 2), 1, data, 0, DataType::kInt32).ok());
}

}  // namespace
}  // namespace baton::collective
