// The communicator's membership and its point-to-point path, over the in-memory transport: what
// batond's Node relies on when ranks attach, leave and send at different moments.

#include "daemon/communicator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "collective/node_arena.h"
#include "gtest/gtest.h"
#include "transport/forwarding_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::daemon {
namespace {

Plan OneDaemonPlan(std::vector<int> ranks) {
  Plan plan;
  plan.comm_tag = 0x51;
  plan.world_size = static_cast<int>(ranks.size());
  PlanDaemon daemon;
  daemon.member.node_name = "node-0";
  daemon.member.data_address = "d0";
  daemon.ranks = std::move(ranks);
  plan.daemons.push_back(daemon);
  return plan;
}

class CommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto endpoint = fabric_->CreateEndpoint("d0");
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = std::move(endpoint).value();
  }
  std::unique_ptr<transport::InMemoryFabric> fabric_ = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> endpoint_;
};

OpRequest PointToPoint(collective::Collective kind, int peer, std::vector<float>& data) {
  OpRequest request;
  request.spec.collective = kind;
  request.spec.count = data.size();
  request.spec.peer = peer;
  if (kind == collective::Collective::kSend) {
    request.send = reinterpret_cast<const std::byte*>(data.data());
  } else {
    request.recv = reinterpret_cast<std::byte*>(data.data());
  }
  return request;
}

// A rank may send eagerly and leave before a rank of the same daemon has even attached: the
// communicator must outlive that, or the message would be lost with it.
TEST_F(CommunicatorTest, NotEmptyUntilEveryLocalRankHasAttachedOnce) {
  Communicator comm(OneDaemonPlan({0, 1}), 0, endpoint_.get(), CommunicatorOptions{}, nullptr);
  ASSERT_TRUE(comm.AttachRank(0, /*session_id=*/10).ok());
  std::vector<float> sent = {1, 2, 3};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(
      comm.Submit(0, 10, PointToPoint(collective::Collective::kSend, 1, sent), deadline).ok());
  EXPECT_EQ(comm.DetachSession(10), std::vector<int>{0});
  EXPECT_FALSE(comm.Empty()) << "rank 1 has not attached yet";

  ASSERT_TRUE(comm.AttachRank(1, /*session_id=*/11).ok());
  std::vector<float> received(3, -1);
  absl::StatusOr<std::string> recv =
      comm.Submit(1, 11, PointToPoint(collective::Collective::kRecv, 0, received), deadline);
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(received, sent);
  comm.DetachSession(11);
  EXPECT_TRUE(comm.Empty());
}

// A failed communicator with no rank attached may go, whoever has not attached.
TEST_F(CommunicatorTest, EmptyOnceAbortedWithNoRankAttached) {
  Communicator comm(OneDaemonPlan({0, 1}), 0, endpoint_.get(), CommunicatorOptions{}, nullptr);
  ASSERT_TRUE(comm.AttachRank(0, 10).ok());
  comm.DetachSession(10);
  EXPECT_FALSE(comm.Empty());
  comm.Abort(absl::AbortedError("gone"), /*notify_peers=*/false);
  EXPECT_TRUE(comm.Empty());
}

// An endpoint whose Abort does not return until released: the transport's part of an abort may
// take a while (a connection being torn down on a loaded node).
class SlowAbortEndpoint final : public transport::ForwardingEndpoint {
 public:
  using ForwardingEndpoint::ForwardingEndpoint;
  void Abort(uint64_t comm, const absl::Status& reason) override {
    entered.count_down();
    release.wait();
    ForwardingEndpoint::Abort(comm, reason);
  }
  std::latch entered{1};
  std::latch release{1};
};

// A rank already waiting in the node arena fails with the abort's reason as soon as the
// communicator is aborted, at the same moment as a rank that asks the daemon, and not only once
// the transport's part of the abort is done.
TEST_F(CommunicatorTest, AnAbortReachesARankWaitingInTheArenaBeforeTheTransportIsDone) {
  SlowAbortEndpoint slow(endpoint_.get());
  auto comm = std::make_unique<Communicator>(OneDaemonPlan({0, 1}), 0, &slow, CommunicatorOptions{},
                                             nullptr);
  ASSERT_TRUE(comm->AttachRank(0, 10).ok());
  ASSERT_TRUE(comm->AttachRank(1, 11).ok());
  absl::StatusOr<Communicator::Arena> opened = comm->OpenArena(0, 10);
  ASSERT_TRUE(opened.ok()) << opened.status();
  void* memory = mmap(nullptr, opened->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, opened->fd, 0);
  close(opened->fd);
  ASSERT_NE(memory, MAP_FAILED);
  absl::StatusOr<collective::NodeArena> arena =
      collective::NodeArena::Attach(memory, opened->bytes, opened->rank);
  ASSERT_TRUE(arena.ok()) << arena.status();

  absl::Status waited;
  std::latch failed(1);
  std::thread rank0([&] {  // rank 1 never comes
    waited = arena->Barrier(absl::Now() + absl::Seconds(60));
    failed.count_down();
  });
  std::thread aborter(
      [&] { comm->Abort(absl::AbortedError("rank 1 lost its shard"), /*notify_peers=*/false); });
  slow.entered.wait();
  // The transport's Abort has not returned; the rank in the arena fails all the same.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!failed.try_wait() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  const bool failed_first = failed.try_wait();
  EXPECT_TRUE(absl::IsAborted(comm->OpenArena(1, 11).status()));
  slow.release.count_down();
  aborter.join();
  rank0.join();
  EXPECT_TRUE(failed_first) << "the rank in the arena waited for the transport's abort";
  EXPECT_TRUE(absl::IsAborted(waited)) << waited;
  EXPECT_NE(waited.message().find("rank 1 lost its shard"), std::string::npos) << waited;
  comm.reset();
  munmap(memory, opened->bytes);
}

}  // namespace
}  // namespace baton::daemon
