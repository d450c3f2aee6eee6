// RingSteps (collective/ring_steps.h) beyond the schedules of the ring collectives, which test
// it through their own sweeps.

#include "collective/ring_steps.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/collective/collective_test_support.h"

namespace baton::collective {
namespace {

using test::Group;
using test::RingOf;

// Holds back the sends of one step for a while, as a busy link or a descheduled thread would.
class SlowStepEndpoint final : public test::ForwardingEndpoint {
 public:
  SlowStepEndpoint(transport::Endpoint* inner, uint32_t slow_step, absl::Duration delay)
      : ForwardingEndpoint(inner), slow_step_(slow_step), delay_(delay) {}

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    if (tag.step == slow_step_) absl::SleepFor(delay_);
    return inner()->Send(peer, tag, data, deadline);
  }

 private:
  const uint32_t slow_step_;
  const absl::Duration delay_;
};

// A reducing step folds what arrives into the buffer as it arrives, so its receive must wait
// until every earlier send of that range has gone out. Here step 1 reduces into the range that
// step 0 sends, and rank 0's step-0 send is held back: the previous rank's step-1 message (which
// does not depend on it, with 4 ranks) comes first. Posted early, it would be folded in before
// rank 0 sent the range, and rank 1 would receive the sum instead of rank 0's own elements.
TEST(RingStepsTest, AReducingReceiveWaitsForEarlierSendsOfItsRange) {
  constexpr int kRanks = 4;
  constexpr size_t kChunk = 1024;  // elements per range: one chunk of int32
  Group group(kRanks);
  std::vector<std::unique_ptr<SlowStepEndpoint>> slow;
  std::vector<transport::Endpoint*> endpoints;
  for (int r = 0; r < kRanks; ++r) {
    slow.push_back(std::make_unique<SlowStepEndpoint>(
        group.endpoint(r), /*slow_step=*/0,
        r == 0 ? absl::Milliseconds(300) : absl::ZeroDuration()));
    endpoints.push_back(slow.back().get());
  }
  // Ranges A = [0, c), B = [c, 2c), C = [2c, 3c). Step 0 sends A and folds the previous rank's A
  // into B; step 1 sends C and folds the previous rank's C into A.
  const ElementRange a{0, kChunk}, b{kChunk, kChunk}, c{2 * kChunk, kChunk};
  const std::vector<internal::RingStep> schedule = {{a, b, /*reduce=*/true},
                                                    {c, a, /*reduce=*/true}};
  auto value = [](int rank, size_t i) { return static_cast<int32_t>(rank * 100000 + i); };
  std::vector<std::vector<int32_t>> data(kRanks, std::vector<int32_t>(3 * kChunk));
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = value(r, i);
  }
  OpContext base = test::TestContext(1, absl::Seconds(30));
  base.chunk_bytes = kChunk * sizeof(int32_t);
  const std::vector<absl::Status> statuses = group.Run(
      base,
      [&](int r, const OpContext& ctx) {
        const Ring ring = RingOf(r, kRanks);  // RingSteps keeps a reference
        internal::RingSteps steps(ctx, ring, data[r].data(), DataType::kInt32, ReduceOp::kSum);
        return steps.Run(schedule, [](size_t i) { return "step " + std::to_string(i); });
      },
      endpoints);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int prev = (r + kRanks - 1) % kRanks;
    for (size_t i = 0; i < kChunk; ++i) {
      // B got the previous rank's A as it was before its step 1; A got its C.
      ASSERT_EQ(data[r][kChunk + i], value(r, kChunk + i) + value(prev, i)) << "rank " << r;
      ASSERT_EQ(data[r][i], value(r, i) + value(prev, 2 * kChunk + i)) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace baton::collective
