// Failure semantics through real daemons: a daemon killed during a large all-reduce turns into an
// error naming it on every surviving rank within the configured timeout, and the survivors keep
// serving new communicators.

#include <signal.h>

#include <atomic>
#include <functional>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/test_cluster.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::TestCluster;

constexpr absl::Duration kOpTimeout = absl::Seconds(5);

TEST(FailureTest, KilledDaemonIsNamedOnEverySurvivingRankAndSurvivorsKeepServing) {
  TestCluster cluster(
      3, {absl::StrCat("--op-timeout=", absl::FormatDuration(kOpTimeout)), "--chunk-bytes=262144"});
  ASSERT_TRUE(cluster.ok());
  constexpr int kRanksPerDaemon = 2;
  constexpr int kWorld = 6;
  constexpr size_t kCount = size_t{16} << 20;  // 64 MiB of float32 per rank
  const std::string victim = cluster.daemons()[2].node_name;
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();

  std::atomic<int> completed_first{0};
  std::vector<Status> failure(kWorld);
  std::vector<absl::Duration> failed_after(kWorld);
  std::vector<absl::Time> kill_time(1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Client> client =
          MustConnect(cluster.daemons()[rank / kRanksPerDaemon].socket);
      auto comm = client->Join(id, kWorld, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      auto memory = client->Allocate(kCount * sizeof(float));
      ASSERT_TRUE(memory.ok());
      // Keep all-reducing until something fails (the kill), at most 200 times.
      for (int i = 0; i < 200; ++i) {
        Status status = (*comm)->AllReduce(*memory, *memory, kCount, DataType::kFloat32,
                                           ReduceOp::kSum, CallOptions(std::chrono::seconds(60)));
        if (!status.ok()) {
          failure[rank] = status;
          failed_after[rank] = absl::Now() - kill_time[0];
          return;
        }
        if (i == 0) completed_first++;
      }
    });
  }
  // Kill the victim once every rank has finished one operation, so the next is in flight.
  while (completed_first.load() < kWorld) absl::SleepFor(absl::Milliseconds(5));
  kill_time[0] = absl::Now();
  ASSERT_EQ(kill(cluster.daemons()[2].pid, SIGKILL), 0);
  for (auto& t : threads) t.join();

  for (int rank = 0; rank < 4; ++rank) {  // ranks on the surviving daemons
    EXPECT_FALSE(failure[rank].ok()) << "rank " << rank;
    EXPECT_NE(failure[rank].message().find(victim), std::string::npos)
        << "rank " << rank << ": " << failure[rank];
    EXPECT_LT(failed_after[rank], kOpTimeout + absl::Seconds(3)) << "rank " << rank;
  }
  for (int rank = 4; rank < kWorld; ++rank) {  // their daemon is gone: the call fails too
    EXPECT_EQ(failure[rank].code(), StatusCode::kUnavailable) << failure[rank];
  }

  // The survivors form a new communicator and reduce correctly.
  const std::string fresh = *MustConnect(cluster.daemons()[1].socket)->CreateCommId();
  std::vector<std::thread> survivors;
  for (int rank = 0; rank < 2; ++rank) {
    survivors.emplace_back([&, rank] {
      std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
      auto comm = client->Join(fresh, 2, rank, std::chrono::seconds(30));
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data(100000, static_cast<float>(rank + 1));
      ASSERT_TRUE(
          (*comm)
              ->AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum)
              .ok());
      EXPECT_EQ(data.front(), 3.0f);
      EXPECT_EQ(data.back(), 3.0f);
    });
  }
  for (auto& t : survivors) t.join();
}

// A daemon that stops answering (SIGSTOP: its sockets stay open, so nothing sees a closed
// connection) is what every rank's error names, not the healthy neighbour each rank happened to
// wait for; once it resumes, fresh communicators including it work.
TEST(FailureTest, StoppedDaemonIsNamedOnEveryRankAndFreshCommunicatorsWorkAfterItResumes) {
  constexpr int kWorld = 4;
  TestCluster cluster(kWorld, {"--op-timeout=3s", "--chunk-bytes=262144"});
  ASSERT_TRUE(cluster.ok());
  constexpr size_t kCount = size_t{1} << 20;  // 4 MiB of float32 per rank
  constexpr int kVictim = 2;
  const std::string victim = cluster.daemons()[kVictim].node_name;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
    std::atomic<int> completed_first{0};
    std::atomic<bool> stopped{false};
    std::vector<Status> failure(kWorld);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kWorld; ++rank) {
      threads.emplace_back([&, rank] {
        std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
        auto comm = client->Join(id, kWorld, rank, std::chrono::seconds(30));
        ASSERT_TRUE(comm.ok()) << comm.status();
        auto memory = client->Allocate(kCount * sizeof(float));
        ASSERT_TRUE(memory.ok());
        for (int i = 0; i < 1000; ++i) {
          Status status = (*comm)->AllReduce(*memory, *memory, kCount, DataType::kFloat32,
                                             ReduceOp::kSum, CallOptions(std::chrono::seconds(60)));
          if (!status.ok()) {
            failure[rank] = status;
            return;
          }
          if (i == 0) completed_first++;
          // The victim's own rank cannot notice while its daemon is stopped: it waits.
          if (stopped.load()) absl::SleepFor(absl::Milliseconds(1));
        }
      });
    }
    while (completed_first.load() < kWorld) absl::SleepFor(absl::Milliseconds(5));
    ASSERT_EQ(kill(cluster.daemons()[kVictim].pid, SIGSTOP), 0);
    stopped = true;
    // Past the operation timeout and the probes that follow it.
    absl::SleepFor(absl::Seconds(8));
    ASSERT_EQ(kill(cluster.daemons()[kVictim].pid, SIGCONT), 0);
    for (auto& t : threads) t.join();
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_FALSE(failure[rank].ok()) << "rank " << rank;
      // Its own failure, or the abort of the rank that failed first.
      EXPECT_TRUE(absl::StrContains(failure[rank].message(),
                                    absl::StrCat("not responding: node ", victim, " (")))
          << "rank " << rank << ": " << failure[rank];
      for (int healthy = 0; healthy < kWorld; ++healthy) {
        if (healthy == kVictim) continue;
        const std::string& name = cluster.daemons()[healthy].node_name;
        EXPECT_FALSE(absl::StrContains(failure[rank].message(), absl::StrCat(name, " (no answer")))
            << "rank " << rank << " blames healthy " << name << ": " << failure[rank];
      }
    }

    // Fresh communicators over every daemon, the resumed one included, reconnect and reduce.
    for (int fresh = 0; fresh < 3; ++fresh) {
      const std::string again = *MustConnect(cluster.daemons()[1].socket)->CreateCommId();
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < kWorld; ++rank) {
        ranks.emplace_back([&, rank] {
          std::unique_ptr<Client> client = MustConnect(cluster.daemons()[rank].socket);
          auto comm = client->Join(again, kWorld, rank, std::chrono::seconds(30));
          ASSERT_TRUE(comm.ok()) << comm.status();
          std::vector<float> data(100000, static_cast<float>(rank + 1));
          const Status status = (*comm)->AllReduce(data.data(), data.data(), data.size(),
                                                   DataType::kFloat32, ReduceOp::kSum);
          ASSERT_TRUE(status.ok())
              << "fresh communicator " << fresh << ", rank " << rank << ": " << status;
          EXPECT_EQ(data.front(), 10.0f);
          EXPECT_EQ(data.back(), 10.0f);
        });
      }
      for (auto& t : ranks) t.join();
    }
  }
}

TEST(FailureTest, ARankThatExitsWithoutDestroyFailsItsPeersInsteadOfHangingThem) {
  TestCluster cluster(2, {"--op-timeout=30s"});
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  Status survivor;
  absl::Duration took;
  std::thread rank0([&] {
    std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
    auto comm = client->Join(id, 2, 0, std::chrono::seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    float value = 1;
    const absl::Time start = absl::Now();
    // Rank 1 never submits: its client goes away instead.
    survivor = (*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                  CallOptions(std::chrono::seconds(60)));
    took = absl::Now() - start;
  });
  {
    std::unique_ptr<Client> client = MustConnect(cluster.daemons()[1].socket);
    auto comm = client->Join(id, 2, 1, std::chrono::seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    // The session ends with the communicator never destroyed, as when the process crashes.
    client.reset();
  }
  rank0.join();
  EXPECT_EQ(survivor.code(), StatusCode::kUnavailable) << survivor;
  EXPECT_NE(survivor.message().find("went away"), std::string::npos) << survivor;
  EXPECT_LT(took, absl::Seconds(10)) << "well before the 30 s operation timeout";
}

// An abort notice reaches a daemon that could not take it for longer than a few seconds (here
// paused for 6 s, past the 5 s a notice once waited): that daemon's rank fails with the reason
// as soon as it resumes, instead of waiting for its deadline with no reason.
TEST(FailureTest, AnAbortReachesAPeerThatWasPausedWhenItWasSent) {
  TestCluster cluster(2, {"--op-timeout=60s"});
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::unique_ptr<Client> client1 = MustConnect(cluster.daemons()[1].socket);
  StatusOr<std::unique_ptr<Communicator>> comm1 = Status(StatusCode::kUnknown, "not joined");
  std::thread join1([&] { comm1 = client1->Join(id, 2, 1, std::chrono::seconds(30)); });
  std::unique_ptr<Client> client0 = MustConnect(cluster.daemons()[0].socket);
  auto comm0 = client0->Join(id, 2, 0, std::chrono::seconds(30));
  join1.join();
  ASSERT_TRUE(comm0.ok()) << comm0.status();
  ASSERT_TRUE(comm1.ok()) << comm1.status();

  const pid_t paused = cluster.daemons()[1].pid;
  ASSERT_EQ(kill(paused, SIGSTOP), 0);
  const std::string reason = "rank 0 gave up while node-1 was paused";
  EXPECT_TRUE((*comm0)->Abort(reason).ok());
  absl::SleepFor(absl::Seconds(6));  // the scenario: a pause longer than a notice once lasted
  ASSERT_EQ(kill(paused, SIGCONT), 0);

  float value = 1;
  const absl::Time start = absl::Now();
  const Status status = (*comm1)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                            CallOptions(std::chrono::seconds(40)));
  EXPECT_EQ(status.code(), StatusCode::kAborted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), reason)) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "the notice, not the 40 s deadline";
}

// A rank that destroys its handle of a communicator takes no part in any later collective: the
// other ranks' collectives from there on fail at once, naming it, instead of at their timeout
// (30 s here). What it did before stays: its collectives completed, and the message it sent
// before leaving is received.
TEST(FailureTest, ARankThatDestroysItsHandleFailsItsPeersLaterCollectivesAtOnce) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::latch pending(1);  // rank 0's next all-reduce is submitted
  testing::RunRanks(
      cluster, id, 2, [](int rank) { return rank; },
      [&](int rank, Communicator& comm) {
        float value = 1;
        ASSERT_TRUE(comm.AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_EQ(value, 2);
        if (rank == 1) {
          const float sent = 42;
          ASSERT_TRUE(comm.Send(&sent, 1, DataType::kFloat32, 0).ok());
          pending.wait();
          ASSERT_TRUE(comm.Destroy().ok());
          return;
        }
        float received = 0;
        const Status got =
            comm.Recv(&received, 1, DataType::kFloat32, 1, CallOptions(std::chrono::seconds(30)));
        EXPECT_TRUE(got.ok()) << got;
        EXPECT_EQ(received, 42);
        const absl::Time start = absl::Now();
        std::shared_ptr<Request> next =
            comm.AllReduceAsync(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                CallOptions(std::chrono::seconds(30)));
        pending.count_down();
        const Status status = next->Wait();
        EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
        EXPECT_TRUE(absl::StrContains(status.message(), "rank 1 destroyed")) << status;
        EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "at once, not at its 30 s timeout";
        const Status later = comm.Barrier(CallOptions(std::chrono::seconds(30)));
        EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition) << later;
        EXPECT_TRUE(absl::StrContains(later.message(), "rank 1 destroyed")) << later;
      });
}

// A rank that destroys its handle after sending one message to a rank of its own daemon and one
// to a rank of another: both still get that message, and their next receive from it fails at
// once (FailedPrecondition, naming the rank and what it sent), not at its 30 s timeout, with a
// receive already waiting on one of them and a new one on the other.
TEST(FailureTest, AReceiveFromARankThatLeftFailsAtOnceAfterWhatItSent) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::latch received(2);  // ranks 1 and 2 have their first message
  std::latch left(1);      // rank 0 destroyed its handle
  testing::RunRanks(
      cluster, id, 4, [](int rank) { return rank / 2; },
      [&](int rank, Communicator& comm) {
        const CallOptions options(std::chrono::seconds(30));
        if (rank == 0) {
          const float sent = 7;
          ASSERT_TRUE(comm.Send(&sent, 1, DataType::kFloat32, 1, options).ok());
          ASSERT_TRUE(comm.Send(&sent, 1, DataType::kFloat32, 2, options).ok());
          received.wait();
          ASSERT_TRUE(comm.Destroy().ok());
          left.count_down();
          return;
        }
        if (rank == 3) return;
        float value = 0;
        const Status first = comm.Recv(&value, 1, DataType::kFloat32, 0, options);
        EXPECT_TRUE(first.ok()) << "rank " << rank << ": " << first;
        EXPECT_EQ(value, 7);
        const absl::Time start = absl::Now();
        std::shared_ptr<Request> next;
        if (rank == 1) {
          // Waiting when rank 0 leaves.
          next = comm.RecvAsync(&value, 1, DataType::kFloat32, 0, options);
          received.count_down();
        } else {
          received.count_down();
          left.wait();
          next = comm.RecvAsync(&value, 1, DataType::kFloat32, 0, options);
        }
        const Status status = next->Wait();
        EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition)
            << "rank " << rank << ": " << status;
        EXPECT_TRUE(absl::StrContains(status.message(),
                                      "rank 0 left the communicator after "
                                      "sending 1 message"))
            << status;
        EXPECT_TRUE(absl::StrContains(status.message(), "rank 0 destroyed its handle")) << status;
        EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "at once, not at its 30 s timeout";
      });
}

// A call's own timeout bounds the operation on the daemon, not only the daemon's op_timeout: a
// rank waiting for a peer that never submits fails at its 2 s deadline, naming the peer's node,
// although the daemons would wait 60 s.
TEST(FailureTest, ACallsTimeoutBoundsTheOperationAndNamesTheNodeItWaitedFor) {
  TestCluster cluster(2, {"--op-timeout=60s"});
  ASSERT_TRUE(cluster.ok());
  const std::string id = *MustConnect(cluster.daemons()[0].socket)->CreateCommId();
  std::unique_ptr<Client> late_client = MustConnect(cluster.daemons()[1].socket);
  // Kept until the end: a rank that destroys its handle fails its peers' later collectives at once.
  StatusOr<std::unique_ptr<Communicator>> late = Status(StatusCode::kUnknown, "not joined");
  std::thread late_join([&] {
    late = late_client->Join(id, 2, 1, std::chrono::seconds(30));
    ASSERT_TRUE(late.ok()) << late.status();
  });
  std::unique_ptr<Client> client = MustConnect(cluster.daemons()[0].socket);
  auto comm = client->Join(id, 2, 0, std::chrono::seconds(30));
  ASSERT_TRUE(comm.ok()) << comm.status();
  late_join.join();
  float value = 1;
  const absl::Time start = absl::Now();
  const Status status = (*comm)->AllReduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum,
                                           CallOptions(std::chrono::seconds(2)));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "node-1")) << status;
  EXPECT_GE(took, absl::Milliseconds(1900));
  EXPECT_LT(took, absl::Seconds(8)) << "the call's 2 s, not the daemon's 60 s (nor 2 s + the "
                                       "client's 10 s grace)";
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// Runs the `world` ranks of a new communicator, rank r on daemon r (or all on daemon 0 with
// `one_daemon`), each making `call`; returns their statuses, in rank order.
std::vector<Status> CallOnEveryRank(const TestCluster& cluster, int world, bool one_daemon,
                                    const std::function<Status(int rank, Communicator&)>& call) {
  std::vector<Status> results(world);
  testing::RunRanks(
      cluster, testing::NewCommId(cluster), world,
      [one_daemon](int rank) { return one_daemon ? 0 : rank; },
      [&](int rank, Communicator& comm) { results[rank] = call(rank, comm); });
  return results;
}

// Every rank fails with FailedPrecondition naming the disagreement, well before the calls' 20 s
// timeout (where the operations themselves would wait for messages that never come).
void ExpectPromptDisagreement(const std::vector<Status>& results, absl::Time start) {
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "well before the 20 s timeout";
  for (const Status& status : results) {
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("called different collectives"), std::string::npos) << status;
  }
}

TEST(MismatchTest, RanksCallingDifferentCollectivesAllGetFailedPreconditionDescribingBothSides) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  // Across daemons: same byte count, different element type (silent corruption if unchecked).
  for (const Status& status :
       CallOnEveryRank(cluster, 2, /*one_daemon=*/false, [](int rank, Communicator&comm) {
         std::vector<float> data(100, 1.0f);
         return comm.AllReduce(data.data(), data.data(), data.size(),
                               rank == 0 ? DataType::kFloat32 : DataType::kInt32, ReduceOp::kSum,
                               CallOptions(std::chrono::seconds(20)));
       })) {
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("all_reduce(float32, sum, count 100)"), std::string::npos)
        << status;
    EXPECT_NE(status.message().find("all_reduce(int32, sum, count 100)"), std::string::npos)
        << status;
  }
  // Across daemons, calls that both wait to hear from the other first (a broadcast from rank 1,
  // a reduce to rank 1): only the signature can stop them before their 20 s timeout.
  absl::Time start = absl::Now();
  ExpectPromptDisagreement(
      CallOnEveryRank(cluster, 2, /*one_daemon=*/false,
                      [](int rank, Communicator& comm) {
                        std::vector<float> data(100, 1.0f), out(100);
                        return rank == 0 ? comm.Broadcast(data.data(), out.data(), data.size(),
                                                          DataType::kFloat32, 1,
                                                          CallOptions(std::chrono::seconds(20)))
                                         : comm.Reduce(data.data(), out.data(), data.size(),
                                                       DataType::kFloat32, ReduceOp::kSum, 1,
                                                       CallOptions(std::chrono::seconds(20)));
                      }),
      start);
  // Across three daemons, calls whose messages never meet (a barrier, a small all-reduce that
  // runs as doubling, a large one that runs as a ring), and across four, where the signatures
  // travel in Gray code order (daemon 1 tells 3, 3 tells 2; a barrier on the last daemon, a
  // small all-reduce on the others): the disagreement must stop every operation promptly.
  for (const int daemons : {3, 4}) {
    TestCluster many(daemons);
    ASSERT_TRUE(many.ok());
    start = absl::Now();
    ExpectPromptDisagreement(
        CallOnEveryRank(many, daemons, /*one_daemon=*/false,
                        [daemons](int rank, Communicator& comm) {
                          const bool large = daemons == 3 && rank == 2;
                          std::vector<float> data(large ? (size_t{4} << 20) : 100, 1.0f);
                          return rank == (daemons == 3 ? 0 : 3)
                                     ? comm.Barrier(CallOptions(std::chrono::seconds(20)))
                                     : comm.AllReduce(data.data(), data.data(), data.size(),
                                                      DataType::kFloat32, ReduceOp::kSum,
                                                      CallOptions(std::chrono::seconds(20)));
                        }),
        start);
  }
  // Within one daemon: two local ranks disagree on the count.
  for (const Status& status :
       CallOnEveryRank(cluster, 2, /*one_daemon=*/true, [](int rank, Communicator&comm) {
         std::vector<float> data(100, 1.0f);
         return comm.AllReduce(data.data(), data.data(), rank == 0 ? 100 : 50, DataType::kFloat32,
                               ReduceOp::kMax, CallOptions(std::chrono::seconds(20)));
       })) {
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("count 100"), std::string::npos) << status;
    EXPECT_NE(status.message().find("count 50"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace baton
