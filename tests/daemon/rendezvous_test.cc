#include "daemon/rendezvous.h"

#include <cctype>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

constexpr uid_t kUid = 1000;

// A new secret for `uid`, or "" after failing the test.
std::string NewSecret(Rendezvous& rendezvous, uid_t uid = kUid) {
  absl::StatusOr<std::string> secret = rendezvous.CreateSecret(uid);
  EXPECT_TRUE(secret.ok()) << secret.status();
  return secret.ok() ? *secret : "";
}

Member Daemon(int i) {
  return Member{"node-" + std::to_string(i),
                "127.0.0.1:" + std::to_string(7000 + i),
                "127.0.0.1:" + std::to_string(8000 + i),
                {}};
}

TEST(RendezvousTest, AllRanksGetTheSamePlanGroupedByDaemonInRankOrder) {
  Rendezvous rendezvous;
  const std::string secret = NewSecret(rendezvous);
  ASSERT_EQ(secret.size(), 32u);
  // Ranks 0,3 on daemon 1; ranks 1,2 on daemon 0; rank 4 on daemon 2.
  const std::vector<int> host = {1, 0, 0, 1, 2};
  std::vector<absl::StatusOr<Plan>> plans(host.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < static_cast<int>(host.size()); ++rank) {
    threads.emplace_back([&, rank] {
      plans[rank] =
          rendezvous.Join(secret, 5, rank, Daemon(host[rank]), absl::Now() + absl::Seconds(30));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& plan : plans) {
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->daemons.size(), 3u);
    EXPECT_EQ(plan->world_size, 5);
    EXPECT_EQ(plan->comm_tag, *Rendezvous::TagOfSecret(secret));
    EXPECT_EQ(plan->daemons[0].member.node_name, "node-1");
    EXPECT_EQ(plan->daemons[0].ranks, (std::vector<int>{0, 3}));
    EXPECT_EQ(plan->daemons[1].member.node_name, "node-0");
    EXPECT_EQ(plan->daemons[1].ranks, (std::vector<int>{1, 2}));
    EXPECT_EQ(plan->daemons[2].ranks, (std::vector<int>{4}));
  }
}

// A join names the whole 128-bit secret: one that shares the real one's tag (its first half) but
// differs in any later digit is refused as unknown, and one whose second half is not hex is not a
// secret at all. The real one still forms its communicator afterwards.
TEST(RendezvousTest, EveryDigitOfTheSecretIsChecked) {
  Rendezvous rendezvous;
  const std::string secret = NewSecret(rendezvous);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const std::string digits = "0123456789abcdef";
  for (size_t at : {size_t{16}, size_t{31}}) {
    std::string other = secret;
    other[at] = digits[digits.find(other[at]) ^ 1];
    EXPECT_EQ(rendezvous.Join(other, 1, 0, Daemon(0), deadline).status().code(),
              absl::StatusCode::kPermissionDenied)
        << at;
  }
  std::string not_hex = secret;
  not_hex.replace(16, 16, "zzzzzzzzzzzzzzzz");
  EXPECT_EQ(rendezvous.Join(not_hex, 1, 0, Daemon(0), deadline).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string upper = secret;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != secret) {  // only the canonical, lower case form is a key
    EXPECT_EQ(rendezvous.Join(upper, 1, 0, Daemon(0), deadline).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<Plan> plan = rendezvous.Join(secret, 1, 0, Daemon(0), deadline);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->comm_tag, *Rendezvous::TagOfSecret(secret));
}

// Secrets created while ranks wait (other process groups forming at the same time) grow the
// table under them; the last rank out must still remove exactly its own entry. Before the fix,
// the waiters erased through an iterator taken before they waited, which a rehash made stale,
// and batond crashed (a general protection fault destroying another entry) when torch made two
// groups back to back.
TEST(RendezvousTest, JoinsCompleteWhileOtherSecretsAreCreated) {
  Rendezvous::Limits limits;
  limits.max_unused_per_uid = 1 << 20;  // 4,000 ids of one uid, none of which forms
  Rendezvous rendezvous(nullptr, limits);
  for (int round = 0; round < 20; ++round) {
    const std::string secret = NewSecret(rendezvous);
    absl::StatusOr<Plan> first = absl::UnknownError("not run");
    std::thread waiter(
        [&] { first = rendezvous.Join(secret, 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)); });
    while (rendezvous.Arrived(secret) != 1) std::this_thread::yield();
    std::vector<std::string> others;
    for (int i = 0; i < 200; ++i) others.push_back(NewSecret(rendezvous));  // rehashes
    const absl::StatusOr<Plan> second =
        rendezvous.Join(secret, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30));
    waiter.join();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(rendezvous.Arrived(secret), 0);
    for (const std::string& other : others) EXPECT_EQ(rendezvous.Arrived(other), 0);
    // The others are still joinable: nothing but the formed secret was removed.
    const std::string& last = others.back();
    std::thread a([&] {
      EXPECT_TRUE(rendezvous.Join(last, 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)).ok());
    });
    EXPECT_TRUE(rendezvous.Join(last, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30)).ok());
    a.join();
  }
}

TEST(RendezvousTest, MissingRanksAreNamedAtTheDeadline) {
  Rendezvous rendezvous;
  const std::string secret = NewSecret(rendezvous);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int rank : {0, 2}) {
    threads.emplace_back([&, rank] {
      results[rank / 2] =
          rendezvous.Join(secret, 4, rank, Daemon(0), absl::Now() + absl::Milliseconds(200))
              .status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& status : results) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(status.message().find("1, 3"), std::string::npos) << status;
  }
}

TEST(RendezvousTest, StopFailsWaitingAndLaterJoinsAtOnceWithItsReason) {
  Rendezvous rendezvous;
  const std::string secret = NewSecret(rendezvous);
  absl::StatusOr<Plan> waiting = absl::UnknownError("not run");
  absl::Duration took;
  std::thread rank0([&] {
    const absl::Time start = absl::Now();
    waiting = rendezvous.Join(secret, 2, 0, Daemon(0), absl::Now() + absl::Minutes(10));
    took = absl::Now() - start;
  });
  while (rendezvous.Arrived(secret) == 0) absl::SleepFor(absl::Milliseconds(1));
  rendezvous.Stop(absl::UnavailableError("batond on node-0 is shutting down"));
  rank0.join();
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(waiting.status().message(), "batond on node-0 is shutting down");
  EXPECT_LT(took, absl::Seconds(30)) << "a stopped rendezvous must not wait out the deadline";
  absl::StatusOr<Plan> later =
      rendezvous.Join(NewSecret(rendezvous), 1, 0, Daemon(0), absl::Now() + absl::Minutes(1));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable) << later.status();
}

TEST(RendezvousTest, BadJoinsAreRejectedWithoutDisturbingTheOthers) {
  Rendezvous rendezvous;
  const std::string secret = NewSecret(rendezvous);
  const absl::Time soon = absl::Now() + absl::Milliseconds(100);
  EXPECT_EQ(
      rendezvous.Join("0123456789abcdef0123456789abcdef", 2, 0, Daemon(0), soon).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(rendezvous.Join(secret, 2, 2, Daemon(0), soon).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rendezvous.Join(secret, 2, -1, Daemon(0), soon).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rendezvous.Join(secret, 0, 0, Daemon(0), soon).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<Plan> first = absl::UnknownError("not run");
  std::thread rank0(
      [&] { first = rendezvous.Join(secret, 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)); });
  // Once rank 0 is registered, a second rank 0 is rejected.
  while (rendezvous.Arrived(secret) < 1) absl::SleepFor(absl::Milliseconds(1));
  const absl::Status duplicate =
      rendezvous.Join(secret, 2, 0, Daemon(1), absl::Now() + absl::Seconds(1)).status();
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInvalidArgument) << duplicate;
  EXPECT_NE(duplicate.message().find("already joined"), std::string::npos) << duplicate;
  EXPECT_EQ(rendezvous.Join(secret, 3, 1, Daemon(1), absl::Now()).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "world size differs from rank 0's";
  absl::StatusOr<Plan> second =
      rendezvous.Join(secret, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30));
  rank0.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->daemons.size(), 2u);
}

// A plan over daemons 0..n-1 (daemon i hosts rank i) with the given rack of each.
Plan PlanWithRacks(const std::vector<std::string>& racks) {
  std::map<int, Member> ranks;
  for (int i = 0; i < static_cast<int>(racks.size()); ++i) {
    Member member = Daemon(i);
    if (!racks[i].empty()) member.locality = {"pod-a", racks[i]};
    ranks[i] = member;
  }
  return Rendezvous::ComputePlan(1, static_cast<int>(racks.size()), ranks);
}

TEST(RendezvousTest, LocalityLabelsMakeEachRackContiguousOnTheRing) {
  // Rank order alternates racks: a ring in rank order would cross between racks 6 times.
  Plan plan = PlanWithRacks({"rack-1", "rack-2", "rack-1", "rack-2", "rack-1", "rack-2"});
  ASSERT_TRUE(Rendezvous::OrderByLocality(plan).ok());
  ASSERT_EQ(plan.daemons.size(), 6u);
  int crossings = 0;
  for (size_t i = 0; i < plan.daemons.size(); ++i) {
    const Member& a = plan.daemons[i].member;
    const Member& b = plan.daemons[(i + 1) % plan.daemons.size()].member;
    crossings += a.locality != b.locality ? 1 : 0;
  }
  EXPECT_EQ(crossings, 2);  // the minimum for a ring over two racks
  // Every daemon keeps its ranks.
  for (const PlanDaemon& daemon : plan.daemons) {
    ASSERT_EQ(daemon.ranks.size(), 1u);
    EXPECT_EQ(daemon.member.node_name, "node-" + std::to_string(daemon.ranks[0]));
  }
}

TEST(RendezvousTest, WithoutLabelsDaemonsStayInRankOrder) {
  Plan plan = PlanWithRacks({"", "", "", ""});
  ASSERT_TRUE(Rendezvous::OrderByLocality(plan).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan.daemons[i].ranks, (std::vector<int>{i}));
}

TEST(RendezvousTest, TheFinisherRefinesThePlanEveryRankGets) {
  Rendezvous rendezvous([](Plan& plan) { plan.link_bytes_per_second = 42; });
  const std::string secret = NewSecret(rendezvous);
  std::vector<absl::StatusOr<Plan>> plans(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      plans[rank] = rendezvous.Join(secret, 3, rank, Daemon(rank), absl::Now() + absl::Seconds(30));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& plan : plans) {
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->link_bytes_per_second, 42);
  }
}

// Anyone on the node may create ids: unused ones expire, and only so many are kept (the oldest
// go first), while ids in use are never forgotten.
TEST(RendezvousTest, UnusedSecretsExpireAndAreBounded) {
  Rendezvous::Limits limits;
  limits.unused_ttl = absl::Milliseconds(200);
  limits.max_unused = 100;
  Rendezvous rendezvous(nullptr, limits);
  const std::string first = NewSecret(rendezvous);
  for (int i = 0; i < 10000; ++i) NewSecret(rendezvous);
  EXPECT_LE(rendezvous.PendingCount(), 100u);
  // The oldest was forgotten: joining with it fails as for a secret never created.
  EXPECT_TRUE(absl::IsPermissionDenied(
      rendezvous.Join(first, 1, 0, Daemon(0), absl::Now() + absl::Seconds(5)).status()));
  // One in use (a rank waits on it) outlives the limit and the expiry; the unused ones expire.
  const std::string used = NewSecret(rendezvous);
  absl::StatusOr<Plan> plan;
  std::thread waiting(
      [&] { plan = rendezvous.Join(used, 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)); });
  while (rendezvous.Arrived(used) == 0) absl::SleepFor(absl::Milliseconds(1));
  for (int i = 0; i < 500; ++i) NewSecret(rendezvous);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(rendezvous.PendingCount(), 1u);
  ASSERT_TRUE(rendezvous.Join(used, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30)).ok());
  waiting.join();
  EXPECT_TRUE(plan.ok()) << plan.status();
}

// One uid cannot hold more than its share of unused ids: past it its new ids are refused, naming
// the limit, while other uids are unaffected; an id whose communicator forms counts no more.
TEST(RendezvousTest, UnusedIdsAreBoundedPerUidAndFormingGivesTheirShareBack) {
  Rendezvous::Limits limits;
  limits.max_unused_per_uid = 3;
  Rendezvous rendezvous(nullptr, limits);
  std::vector<std::string> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(NewSecret(rendezvous));
  EXPECT_EQ(rendezvous.UnusedCountOf(kUid), 3u);
  absl::StatusOr<std::string> refused = rendezvous.CreateSecret(kUid);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("max_pending_comm_ids_per_uid"), std::string::npos)
      << refused.status();
  // Refusing changed nothing: the three still work.
  EXPECT_EQ(rendezvous.UnusedCountOf(kUid), 3u);
  // Another uid is not affected.
  EXPECT_FALSE(NewSecret(rendezvous, kUid + 1).empty());
  // A communicator formed with one of them: room for another.
  ASSERT_TRUE(rendezvous.Join(mine[0], 1, 0, Daemon(0), absl::Now() + absl::Seconds(30)).ok());
  EXPECT_EQ(rendezvous.UnusedCountOf(kUid), 2u);
  EXPECT_FALSE(NewSecret(rendezvous).empty());
  for (size_t i = 1; i < mine.size(); ++i) {
    EXPECT_TRUE(rendezvous.Join(mine[i], 1, 0, Daemon(0), absl::Now() + absl::Seconds(30)).ok());
  }
}

// Past the total, room is made only from ids that no rank has joined with: an id whose rank is
// waiting, or whose rank gave up at its deadline and will join again, survives any number of
// new ids, and its communicator then forms.
TEST(RendezvousTest, MakingRoomNeverForgetsAnIdARankJoinedWith) {
  Rendezvous::Limits limits;
  limits.max_unused = 8;
  Rendezvous rendezvous(nullptr, limits);
  constexpr uid_t kJob = kUid + 1;
  const std::string withdrawn = NewSecret(rendezvous, kJob);
  const std::string waited_on = NewSecret(rendezvous, kJob);
  const std::string unjoined = NewSecret(rendezvous, kJob);
  // Rank 0 of `withdrawn` joins and gives up at its deadline, to come back later.
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      rendezvous.Join(withdrawn, 2, 0, Daemon(0), absl::Now() + absl::Milliseconds(20)).status()));
  absl::StatusOr<Plan> first = absl::UnknownError("not run");
  std::thread waiter([&] {
    first = rendezvous.Join(waited_on, 2, 0, Daemon(0), absl::Now() + absl::Seconds(60));
  });
  while (rendezvous.Arrived(waited_on) != 1) std::this_thread::yield();
  // Another uid creates ids in a loop; each beyond the total pushes out an unjoined one.
  for (int i = 0; i < 2000; ++i) ASSERT_FALSE(NewSecret(rendezvous).empty()) << i;
  EXPECT_LE(rendezvous.UnusedCountOf(kUid) + rendezvous.UnusedCountOf(kJob), 8u);
  EXPECT_EQ(rendezvous.UnusedCountOf(kJob), 2u);  // `unjoined` was the one to go
  EXPECT_TRUE(absl::IsPermissionDenied(
      rendezvous.Join(unjoined, 1, 0, Daemon(0), absl::Now() + absl::Seconds(5)).status()));
  // Both jobs complete their joins.
  ASSERT_TRUE(rendezvous.Join(waited_on, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30)).ok());
  waiter.join();
  EXPECT_TRUE(first.ok()) << first.status();
  std::thread again([&] {
    EXPECT_TRUE(rendezvous.Join(withdrawn, 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)).ok());
  });
  EXPECT_TRUE(rendezvous.Join(withdrawn, 2, 1, Daemon(1), absl::Now() + absl::Seconds(30)).ok());
  again.join();
  EXPECT_EQ(rendezvous.UnusedCountOf(kJob), 0u);
}

// When every unused id has had a rank, nothing may be pushed out: new ids are refused, naming
// the limit, until a communicator forms.
TEST(RendezvousTest, WhenEveryIdHasARankNewOnesAreRefused) {
  Rendezvous::Limits limits;
  limits.max_unused = 2;
  Rendezvous rendezvous(nullptr, limits);
  const std::vector<std::string> ids = {NewSecret(rendezvous), NewSecret(rendezvous, kUid + 1)};
  for (const std::string& id : ids) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(
        rendezvous.Join(id, 2, 0, Daemon(0), absl::Now() + absl::Milliseconds(10)).status()));
  }
  absl::StatusOr<std::string> refused = rendezvous.CreateSecret(kUid + 2);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("max_pending_comm_ids"), std::string::npos)
      << refused.status();
  std::thread rank0([&] {
    EXPECT_TRUE(rendezvous.Join(ids[0], 2, 0, Daemon(0), absl::Now() + absl::Seconds(30)).ok());
  });
  EXPECT_TRUE(rendezvous.Join(ids[0], 2, 1, Daemon(1), absl::Now() + absl::Seconds(30)).ok());
  rank0.join();
  EXPECT_FALSE(NewSecret(rendezvous, kUid + 2).empty());
}

// Ids that expire are forgotten oldest first, several at once, one whose rank gave up among
// them: the daemon once read a freed string while forgetting one (found by proto_handlers_fuzz
// under AddressSanitizer).
TEST(RendezvousTest, ExpiredIdsAreForgottenOldestFirst) {
  Rendezvous::Limits limits;
  limits.unused_ttl = absl::Milliseconds(20);
  Rendezvous rendezvous(nullptr, limits);
  std::vector<std::string> old;
  for (int i = 0; i < 5; ++i) old.push_back(NewSecret(rendezvous));
  const absl::StatusOr<Plan> gave_up =
      rendezvous.Join(old[0], 2, 0, Daemon(0), absl::Now() + absl::Milliseconds(1));
  EXPECT_TRUE(absl::IsDeadlineExceeded(gave_up.status())) << gave_up.status();
  absl::SleepFor(absl::Milliseconds(60));           // the scenario: every id is past its ttl
  const std::string fresh = NewSecret(rendezvous);  // forgets the expired ones first
  EXPECT_EQ(rendezvous.PendingCount(), 1u);
  for (const std::string& secret : old) {
    EXPECT_TRUE(absl::IsPermissionDenied(
        rendezvous.Join(secret, 1, 0, Daemon(0), absl::Now() + absl::Seconds(1)).status()));
  }
  EXPECT_TRUE(rendezvous.Join(fresh, 1, 0, Daemon(0), absl::Now() + absl::Seconds(5)).ok());
}

}  // namespace
}  // namespace baton::daemon
