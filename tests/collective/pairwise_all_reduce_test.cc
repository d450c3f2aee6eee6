// The doubling and halving-doubling all-reduces (collective/pairwise_exchange.h), side by side.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/doubling_all_reduce.h"
#include "collective/halving_doubling_all_reduce.h"
#include "tests/collective/collective_test_support.h"

// Every participant's buffer must equal the serial reference bit for bit (the exact inputs of
// collective_test_support.h make the combining order irrelevant), and, with inputs whose sums do
// round, every participant must still end with the same bits as every other.

namespace baton::collective {
namespace {

using test::Group;
using test::SweepCase;

using AllReduceFn = absl::Status (*)(const OpContext&, const Participants&, void*, size_t, DataType,
                                     ReduceOp);
struct Variant {
  const char* name;
  AllReduceFn run;
};
const Variant kVariants[] = {{"doubling", &DoublingAllReduce},
                             {"halving_doubling", &HalvingDoublingAllReduce}};

class PairwiseAllReduceSweep : public ::testing::TestWithParam<std::tuple<Variant, SweepCase>> {};

TEST_P(PairwiseAllReduceSweep, MatchesSerialReference) {
  const auto& [variant, c] = GetParam();
  const size_t count = c.count();
  const std::vector<std::vector<std::byte>> inputs =
      test::ReduceInputs(c.type, c.op, c.size, count);
  const std::vector<std::byte> expected = test::SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const auto statuses = group.Run(c.Context(), [&](int r, const OpContext& ctx) {
    return variant.run(ctx, test::ParticipantsOf(r, c.size), buffers[r].data(), count, c.type,
                       c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = test::FirstDifference(buffers[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
  }
}

std::string Name(const ::testing::TestParamInfo<std::tuple<Variant, SweepCase>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" +
         std::get<1>(info.param).Name(true, false);
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, PairwiseAllReduceSweep,
                         ::testing::Combine(::testing::ValuesIn(kVariants),
                                            ::testing::ValuesIn(test::SweepCases(
                                                /*reduces=*/true, /*rooted=*/false,
                                                {DataType::kFloat32, DataType::kBfloat16}))),
                         Name);

// Sizes around powers of two (pairs in and out, several levels), every op.
std::vector<SweepCase> MoreSizes() {
  std::vector<SweepCase> cases;
  for (int size : {5, 6, 7, 8, 9, 12, 16}) {
    for (DataType type : {DataType::kInt32, DataType::kFloat16}) {
      for (ReduceOp op : test::kAllOps) cases.push_back({size, test::CountKind::kOdd, type, op});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(MoreSizes, PairwiseAllReduceSweep,
                         ::testing::Combine(::testing::ValuesIn(kVariants),
                                            ::testing::ValuesIn(MoreSizes())),
                         Name);

TEST(PairwiseAllReduceTest, EveryParticipantEndsWithTheSameBitsWhenSumsRound) {
  for (const Variant& variant : kVariants) {
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
        return variant.run(own, test::ParticipantsOf(r, size), buffers[r].data(), kCount,
                           DataType::kFloat32, ReduceOp::kSum);
      });
      for (int r = 0; r < size; ++r) {
        ASSERT_TRUE(statuses[r].ok())
            << variant.name << " size " << size << " rank " << r << ": " << statuses[r];
        EXPECT_TRUE(buffers[r] == buffers[0])
            << variant.name << " size " << size << ": rank " << r << " differs";
      }
    }
  }
}

TEST(PairwiseAllReduceTest, RejectBadArguments) {
  for (const Variant& variant : kVariants) {
    SCOPED_TRACE(variant.name);
    int32_t data[4] = {};
    OpContext ctx;
    constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
    const Participants two = test::ParticipantsOf(0, 2);
    auto code = [&](const Participants& p, void* buffer, size_t count, DataType type, ReduceOp op) {
      return variant.run(ctx, p, buffer, count, type, op).code();
    };
    EXPECT_EQ(code(Participants{2, {"a", "b"}}, data, 4, DataType::kInt32, ReduceOp::kSum),
              kInvalid);
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
    EXPECT_TRUE(
        variant.run(OpContext{}, Participants{0, {"x"}}, data, 4, DataType::kInt32, ReduceOp::kSum)
            .ok());
    EXPECT_TRUE(variant.run(ctx, two, data, 0, DataType::kInt32, ReduceOp::kSum).ok());
  }
}

}  // namespace
}  // namespace baton::collective
