// The flow-control unit on its own: what a receiver grants and refuses, when it returns credit,
// and how a sender waits for credit and clear-to-sends (transport/flow_control.h).

#include "transport/flow_control.h"

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

constexpr char kPeer[] = "peer-a";

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(FlowControlTest, MessagesUpToAQuarterOfTheWindowAreEager) {
  ReceiveCredits credits(/*window=*/4096, /*total=*/0);
  EXPECT_EQ(credits.eager_max(), 1024u);
  EXPECT_TRUE(credits.Eager(1024 - kCreditPerMessageBytes));
  EXPECT_FALSE(credits.Eager(1024 - kCreditPerMessageBytes + 1));
  // No window, no flow control: everything eager, nothing refused.
  ReceiveCredits unbounded(/*window=*/0, /*total=*/0);
  EXPECT_TRUE(unbounded.Eager(uint64_t{1} << 40));
  unbounded.Attach(kPeer);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(unbounded.Charge(kPeer, uint64_t{1} << 30));
  EXPECT_EQ(CreditCharge(UINT64_MAX), UINT64_MAX);
}

TEST(FlowControlTest, AReceiverRefusesWhatGoesBeyondTheCreditItGranted) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  // Not linked: no credit at all.
  EXPECT_FALSE(credits.Charge(kPeer, 10));
  const CreditGrant grant = credits.Attach(kPeer);
  EXPECT_NE(grant.epoch, 0u);
  EXPECT_EQ(grant.limit, 1000u);
  EXPECT_EQ(grant.eager_max, 250u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(credits.Charge(kPeer, 136));  // 200 each
  EXPECT_FALSE(credits.Charge(kPeer, 0));
  EXPECT_EQ(credits.Violations().at(kPeer), 2u);
}

TEST(FlowControlTest, ANewEpochCountsWhatThePeerStillHolds) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  const CreditGrant first = credits.Attach(kPeer);
  ASSERT_TRUE(credits.Charge(kPeer, 136));  // 200 held
  credits.Detach(kPeer);
  EXPECT_FALSE(credits.Current(kPeer).has_value());
  // Linked again: a new epoch, its window less what is still held.
  const CreditGrant second = credits.Attach(kPeer);
  EXPECT_NE(second.epoch, first.epoch);
  EXPECT_EQ(second.limit, 800u);
  // The held message, taken now, is owed to the new epoch.
  credits.Release(kPeer, 200);
  EXPECT_EQ(credits.Current(kPeer)->limit, 800u);  // below the threshold: not granted yet
  // A second link of the same epoch shares it.
  EXPECT_EQ(credits.Attach(kPeer).epoch, second.epoch);
  credits.Detach(kPeer);
  EXPECT_EQ(credits.Current(kPeer)->epoch, second.epoch);
}

// With many peers linked the total bound shrinks the windows of those linked later, never below
// half the window.
TEST(FlowControlTest, TheTotalBoundShrinksLaterWindowsToHalfAtMost) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/2500);
  EXPECT_EQ(credits.Attach("a").limit, 1000u);
  EXPECT_EQ(credits.Attach("b").limit, 1000u);
  EXPECT_EQ(credits.Attach("c").limit, 500u);
  EXPECT_EQ(credits.Attach("d").limit, 500u);
  credits.Detach("a");
  credits.Detach("b");
  EXPECT_EQ(credits.Attach("e").limit, 1000u);
  // eager_max does not change with the window: both ends classify alike.
  EXPECT_EQ(credits.Current("d")->eager_max, 250u);
}

// The rule that keeps credit from deadlocking: whatever the order of charges and releases,
// once every charged message is released the sender has at least eager_max granted back.
TEST(FlowControlTest, OnceEverythingIsTakenASenderHasRoomForAnyEagerMessage) {
  std::mt19937 random(7);
  for (const uint64_t window : {uint64_t{1000}, uint64_t{4096}, uint64_t{1} << 20}) {
    for (const uint64_t total : {uint64_t{0}, window + window / 2}) {
      ReceiveCredits credits(window, total);
      if (total > 0) credits.Attach("other");  // shrinks kPeer's window to half
      CreditGrant grant = credits.Attach(kPeer);
      uint64_t sent = 0;
      std::vector<uint64_t> held;
      for (int step = 0; step < 2000; ++step) {
        const uint64_t charge =
            kCreditPerMessageBytes + random() % (credits.eager_max() - kCreditPerMessageBytes + 1);
        if (grant.limit - sent >= charge && random() % 2 == 0) {
          ASSERT_TRUE(credits.Charge(kPeer, charge - kCreditPerMessageBytes));
          sent += charge;
          held.push_back(charge);
        } else if (!held.empty()) {
          const size_t k = random() % held.size();
          credits.Release(kPeer, held[k]);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
        }
        grant = *credits.Current(kPeer);
        if (held.empty()) {
          ASSERT_GE(grant.limit - sent, credits.eager_max())
              << "window " << window << " total " << total << " step " << step;
        }
      }
    }
  }
}

TEST(FlowControlTest, ASenderWaitsForCreditAndTakesItOnceGranted) {
  SendCredits credits;
  credits.Grant(kPeer, CreditGrant{.epoch = 5, .limit = 300, .eager_max = 250});
  EXPECT_EQ(credits.Latest(kPeer), 5u);
  EXPECT_EQ(credits.EagerMax(kPeer, 5), 250u);
  EXPECT_TRUE(credits.TryTake(kPeer, 5, 200));
  EXPECT_FALSE(credits.TryTake(kPeer, 5, 200));
  bool retry = true;
  auto waiting = std::async(std::launch::async, [&] {
    return credits.Take(kPeer, 5, Tag{.seq = 1}, 200, Soon(), &retry);
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  // A grant of the same epoch raises the limit; an older one does not lower it.
  credits.Grant(kPeer, CreditGrant{.epoch = 5, .limit = 600, .eager_max = 250});
  credits.Grant(kPeer, CreditGrant{.epoch = 5, .limit = 100, .eager_max = 250});
  ASSERT_TRUE(waiting.get().ok());
  EXPECT_FALSE(retry);
  EXPECT_TRUE(credits.TryTake(kPeer, 5, 200));
  EXPECT_FALSE(credits.TryTake(kPeer, 5, 1));
  credits.Refund(kPeer, 5, 200);
  EXPECT_TRUE(credits.TryTake(kPeer, 5, 200));
}

TEST(FlowControlTest, AWaitForCreditEndsAtTheDeadlineNamingThePeerAndTag) {
  SendCredits credits;
  credits.Grant(kPeer, CreditGrant{.epoch = 1, .limit = 0, .eager_max = 250});
  bool retry = false;
  const absl::Status status = credits.Take(kPeer, 1, Tag{.comm = 0xab, .seq = 3}, 100,
                                           absl::Now() + absl::Milliseconds(50), &retry);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr(kPeer));
  EXPECT_THAT(status.message(), HasSubstr("op 3"));
  EXPECT_THAT(status.message(), HasSubstr("credit"));
}

TEST(FlowControlTest, AbortFailsASenderWaitingForCreditAtOnce) {
  SendCredits credits;
  credits.Grant(kPeer, CreditGrant{.epoch = 1, .limit = 0, .eager_max = 250});
  bool retry = false;
  auto waiting = std::async(std::launch::async, [&] {
    return credits.Take(kPeer, 1, Tag{.comm = 7}, 100, absl::Now() + absl::Seconds(60), &retry);
  });
  bool cts_retry = false;
  auto clearing = std::async(std::launch::async, [&] {
    return credits.AwaitClearToSend(kPeer, Tag{.comm = 7, .seq = 2},
                                    absl::Now() + absl::Seconds(60), &cts_retry);
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  credits.Abort(7, absl::AbortedError("rank 3 failed"));
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(waiting.get().message(), "rank 3 failed");
  ASSERT_EQ(clearing.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(clearing.get().message(), "rank 3 failed");
  // Other communicators are not affected; Forget lifts it.
  credits.Grant(kPeer, CreditGrant{.epoch = 1, .limit = 1000, .eager_max = 250});
  EXPECT_TRUE(credits.Take(kPeer, 1, Tag{.comm = 8}, 100, Soon(), &retry).ok());
  credits.Forget(7);
  EXPECT_TRUE(credits.Take(kPeer, 1, Tag{.comm = 7}, 100, Soon(), &retry).ok());
}

TEST(FlowControlTest, ARetiredEpochSendsItsWaitersToTryAgain) {
  SendCredits credits;
  credits.Grant(kPeer, CreditGrant{.epoch = 1, .limit = 0, .eager_max = 250});
  bool retry = false;
  auto waiting = std::async(std::launch::async, [&] {
    return credits.Take(kPeer, 1, Tag{}, 100, absl::Now() + absl::Seconds(60), &retry);
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  credits.Retire(kPeer);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_TRUE(retry);
  EXPECT_FALSE(credits.Latest(kPeer).has_value());
  // Taking from an epoch that is gone asks for a retry at once.
  EXPECT_TRUE(credits.Take(kPeer, 1, Tag{}, 100, Soon(), &retry).ok());
  EXPECT_TRUE(retry);
}

TEST(FlowControlTest, ARendezvousSendWaitsForItsClearToSend) {
  SendCredits credits;
  bool retry = false;
  auto waiting = std::async(std::launch::async, [&] {
    return credits.AwaitClearToSend(kPeer, Tag{.seq = 4}, Soon(), &retry);
  });
  // Another message's clear-to-send is not this one's.
  credits.ClearToSend(kPeer, ClearToSend{Tag{.seq = 5}, 100});
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  credits.ClearToSend(kPeer, ClearToSend{Tag{.seq = 4}, 100});
  ASSERT_TRUE(waiting.get().ok());
  EXPECT_FALSE(retry);
  // Taken: a second wait for the same tag waits again.
  EXPECT_EQ(
      credits.AwaitClearToSend(kPeer, Tag{.seq = 4}, absl::Now() + absl::Milliseconds(20), &retry)
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  // Forget drops the clear-to-sends of its communicator.
  credits.Forget(0);
  EXPECT_EQ(
      credits.AwaitClearToSend(kPeer, Tag{.seq = 5}, absl::Now() + absl::Milliseconds(20), &retry)
          .code(),
      absl::StatusCode::kDeadlineExceeded);
}

TEST(FlowControlTest, AClearToSendForAPeerNotLinkedIsSentOnceItLinks) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  credits.Posted(kPeer, Tag{.seq = 1}, 5000);
  credits.Posted(kPeer, Tag{.seq = 2}, 10);  // eager: nothing to ask for
  EXPECT_TRUE(credits.TakeOutgoing(absl::InfinitePast()).empty());
  credits.Attach(kPeer);
  const ReceiveCredits::Outgoing outgoing = credits.TakeOutgoing(absl::InfinitePast());
  ASSERT_EQ(outgoing.clear_to_send.size(), 1u);
  EXPECT_EQ(outgoing.clear_to_send[0].second.length, 5000u);
}

TEST(FlowControlTest, StopWakesTakeOutgoing) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  auto taking = std::async(std::launch::async,
                           [&] { return credits.TakeOutgoing(absl::InfiniteFuture()).empty(); });
  EXPECT_EQ(taking.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  credits.Stop();
  ASSERT_EQ(taking.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(taking.get());
}

}  // namespace
}  // namespace baton::transport
