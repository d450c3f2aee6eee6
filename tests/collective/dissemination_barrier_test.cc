#include "collective/dissemination_barrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/collective/collective_test_support.h"

namespace baton::collective {
namespace {

using test::Group;
using ::testing::HasSubstr;

// Participants run several barriers back to back; before barrier k each one increments a shared
// counter, and after it each one must see every participant's increment for barrier k. The last
// participant enters each barrier late, so that a barrier that let anyone through early would be
// caught (the sleep only gives a broken barrier the chance to fail; nothing depends on it).
TEST(DisseminationBarrierTest, NobodyLeavesBeforeEveryoneArrived) {
  constexpr int kBarriers = 5;
  for (int size : {1, 2, 3, 4, 5, 7, 8, 13}) {
    Group group(size);
    std::atomic<int> arrived{0};
    const auto statuses =
        group.Run(test::TestContext(1, absl::Seconds(30)), [&](int r, const OpContext& base) {
          OpContext ctx = base;
          for (int k = 0; k < kBarriers; ++k) {
            if (r == size - 1) absl::SleepFor(absl::Milliseconds(5));
            arrived.fetch_add(1);
            ctx.seq = static_cast<uint64_t>(k + 1);
            absl::Status status = DisseminationBarrier(ctx, test::ParticipantsOf(r, size));
            if (!status.ok()) return status;
            const int seen = arrived.load();
            if (seen < (k + 1) * size) {
              return absl::InternalError(
                  absl::StrCat("rank ", r, " left barrier ", k, " after ", seen, " arrivals"));
            }
          }
          return absl::OkStatus();
        });
    for (int r = 0; r < size; ++r)
      EXPECT_TRUE(statuses[r].ok()) << "size " << size << ": " << statuses[r];
  }
}

TEST(DisseminationBarrierTest, MissingParticipantTimesOutNamingWhomItWaitedFor) {
  constexpr int kSize = 4;
  Group group(kSize);
  std::vector<absl::Status> statuses(kSize);
  std::vector<std::thread> threads;
  OpContext base = test::TestContext(1, absl::Milliseconds(300));
  for (int r = 0; r < kSize - 1; ++r) {  // rank 3 never calls
    threads.emplace_back([&, r] {
      OpContext ctx = base;
      ctx.endpoint = group.endpoint(r);
      statuses[r] = DisseminationBarrier(ctx, test::ParticipantsOf(r, kSize));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kSize - 1; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_THAT(statuses[r].message(), HasSubstr("barrier rank "));
    EXPECT_THAT(statuses[r].message(), HasSubstr("receiving from rank"));
  }
  // Rank 0 hears from rank 3 in the first round, which never comes.
  EXPECT_THAT(statuses[0].message(), HasSubstr("round 1/2: receiving from rank3"));
}

TEST(DisseminationBarrierTest, RejectsBadArguments) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(DisseminationBarrier(OpContext{}, Participants{2, {"a", "b"}}).code(), kInvalid);
  EXPECT_EQ(DisseminationBarrier(OpContext{}, Participants{0, {}}).code(), kInvalid);
  EXPECT_EQ(DisseminationBarrier(OpContext{}, Participants{0, {"a", "b"}}).code(), kInvalid);
  EXPECT_TRUE(DisseminationBarrier(OpContext{}, Participants{0, {"a"}}).ok());
}

}  // namespace
}  // namespace baton::collective
