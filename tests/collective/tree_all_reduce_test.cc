#include "collective/tree_all_reduce.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "tests/collective/collective_test_support.h"

// Every participant's buffer must equal the serial reference bit for bit; the trees combine in a
// different order from the reference, which the exact inputs make irrelevant (see
// collective_test_support.h).

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

void ExpectMatchesSerialReference(const SweepCase& c) {
  const size_t count = c.count();
  const std::vector<std::vector<std::byte>> inputs =
      test::ReduceInputs(c.type, c.op, c.size, count);
  const std::vector<std::byte> expected = test::SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return TreeAllReduce(ctx, test::ParticipantsOf(r, c.size), buffers[r].data(), count, c.type,
                         c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = test::FirstDifference(buffers[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
  }
}

class TreeAllReduceSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(TreeAllReduceSweep, MatchesSerialReference) { ExpectMatchesSerialReference(GetParam()); }

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, TreeAllReduceSweep,
                         ::testing::ValuesIn(test::SweepCases(
                             /*reduces=*/true, /*rooted=*/false,
                             {DataType::kFloat32, DataType::kBfloat16})),
                         [](const auto& info) { return info.param.Name(true, false); });

// More tree shapes: sizes whose trees have single-child interior nodes, deeper levels, and
// (13, 16) several levels of both trees.
std::vector<SweepCase> MoreShapes() {
  std::vector<SweepCase> cases;
  for (int size : {5, 6, 9, 13, 16}) {
    for (DataType type : {DataType::kInt32, DataType::kFloat16}) {
      for (ReduceOp op : test::kAllOps) cases.push_back({size, test::CountKind::kOdd, type, op});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(MoreShapes, TreeAllReduceSweep, ::testing::ValuesIn(MoreShapes()),
                         [](const auto& info) { return info.param.Name(true, false); });

// Four ranks of four elements, [1,2,3,4] * 10^r: every rank ends with the sum [1111,...,4444].
TEST(TreeAllReduceTest, EveryRankGetsTheSumOfFourDistinctInputs) {
  Group group(4);
  std::vector<std::vector<std::byte>> buffers = {
      test::AsBytes<float>({1, 2, 3, 4}), test::AsBytes<float>({10, 20, 30, 40}),
      test::AsBytes<float>({100, 200, 300, 400}), test::AsBytes<float>({1000, 2000, 3000, 4000})};
  const auto statuses =
      group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& ctx) {
        return TreeAllReduce(ctx, test::ParticipantsOf(r, 4), buffers[r].data(), 4,
                             DataType::kFloat32, ReduceOp::kSum);
      });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(test::FromBytes<float>(buffers[r]), (std::vector<float>{1111, 2222, 3333, 4444}));
  }
}

// Many more chunks than the pipeline's lag, on a deep tree.
TEST(TreeAllReduceTest, LongPipeline) {
  SweepCase c{16, test::CountKind::kLarge, DataType::kInt64, ReduceOp::kSum};
  ExpectMatchesSerialReference(c);
}

// Caller-supplied trees of any shape: chains (much deeper than the pipeline's lag assumes) in
// opposite directions, and stars.
TEST(TreeAllReduceTest, CallerSuppliedTrees) {
  auto chain = [](int size, int rank, bool up) {
    TreeNode node;
    const int parent = up ? rank - 1 : rank + 1;
    const int child = up ? rank + 1 : rank - 1;
    if (parent >= 0 && parent < size) node.parent = parent;
    if (child >= 0 && child < size) node.children.push_back(child);
    return node;
  };
  auto star = [](int size, int rank, int center) {
    TreeNode node;
    if (rank != center) node.parent = center;
    for (int r = 0; r < size && rank == center; ++r) {
      if (r != center) node.children.push_back(r);
    }
    return node;
  };
  for (int size : {2, 3, 5, 8}) {
    for (int shape = 0; shape < 2; ++shape) {
      SCOPED_TRACE(::testing::Message() << "size " << size << (shape == 0 ? " chains" : " stars"));
      const size_t count = 1001;
      const std::vector<std::vector<std::byte>> inputs =
          test::ReduceInputs(DataType::kInt32, ReduceOp::kSum, size, count);
      const auto expected = test::SerialReference(inputs, count, DataType::kInt32, ReduceOp::kSum);
      Group group(size);
      std::vector<std::vector<std::byte>> buffers = inputs;
      OpContext base = test::TestContext(1, absl::Seconds(30));
      base.chunk_bytes = 40;
      const auto statuses = group.Run(base, [&](int r, const OpContext& ctx) {
        const std::array<TreeNode, 2> trees =
            shape == 0 ? std::array<TreeNode, 2>{chain(size, r, true), chain(size, r, false)}
                       : std::array<TreeNode, 2>{star(size, r, 0), star(size, r, size - 1)};
        return TreeAllReduce(ctx, test::ParticipantsOf(r, size), trees, buffers[r].data(), count,
                             DataType::kInt32, ReduceOp::kSum);
      });
      for (int r = 0; r < size; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
        EXPECT_EQ(test::FirstDifference(buffers[r], expected, 4), -1) << "rank " << r;
      }
    }
  }
}

TEST(TreeAllReduceTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Participants two = test::ParticipantsOf(0, 2);
  auto code = [&](const Participants& p, void* buffer, size_t count, DataType type, ReduceOp op) {
    return TreeAllReduce(ctx, p, buffer, count, type, op).code();
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
  // Links outside the participants or to itself.
  for (const TreeNode& bad : {TreeNode{2, {}}, TreeNode{-1, {0}}, TreeNode{-1, {-3}}}) {
    EXPECT_EQ(TreeAllReduce(ctx, two, {bad, TreeNode{}}, data, 4, DataType::kInt32, ReduceOp::kSum)
                  .code(),
              kInvalid);
    EXPECT_EQ(TreeAllReduce(ctx, two, {TreeNode{}, bad}, data, 4, DataType::kInt32, ReduceOp::kSum)
                  .code(),
              kInvalid);
  }
  EXPECT_TRUE(
      TreeAllReduce(OpContext{}, Participants{0, {"x"}}, data, 4, DataType::kInt32, ReduceOp::kSum)
          .ok());
  EXPECT_TRUE(TreeAllReduce(ctx, two, data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace baton::collective
