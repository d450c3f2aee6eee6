// A rank rewrites every byte of every shared-memory structure the daemon reads (its node arena,
// its submission channel page) with random and extreme values, and flips the arena's rank count
// between two values from another thread, while the daemon serves status, metrics and other
// jobs' operations: the daemon never crashes, and the other job's operations, a new job and the
// status keep working. (Before the daemon kept its own copy of the arena's shape, a rank that
// flipped the rank count crashed it within seconds.)

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/v1/baton.grpc.pb.h"
#include "collective/node_arena_layout.h"
#include "common/session_protocol.h"
#include "common/shared_memory.h"
#include "common/submission_channel.h"
#include "common/unix_socket.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/core_ranks.h"
#include "tests/testing/local_test_cluster.h"
#include "tests/testing/metrics_page.h"
#include "tests/testing/raw_session.h"

namespace baton {
namespace {

using core::CallOptions;
using core::Client;
using core::Communicator;
using core::DataType;
using core::ReduceOp;

// How long the ranks scribble while the daemon serves.
constexpr absl::Duration kScribbling = absl::Seconds(3);

bool Alive(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0) return line.find('Z') == std::string::npos;
  }
  return false;
}

// One rank of the hostile communicator: its own session on the session socket, joined over the
// daemon's gRPC API as a client in another language would.
struct HostileRank {
  std::unique_ptr<testing::RawSession> session;
  std::unique_ptr<v1::Client::Stub> stub;
  uint64_t tag = 0;
};

// The node arena of `rank` in `tag`, mapped writable: what any rank of the communicator gets.
absl::StatusOr<std::pair<void*, size_t>> MapArena(const HostileRank& rank, int comm_rank) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kOpenArena);
  request.comm_tag = rank.tag;
  request.rank = comm_rank;
  if (absl::Status s = SendPacket(rank.session->fd(), &request, sizeof(request)); !s.ok()) return s;
  session::Reply reply;
  int fd = -1;
  absl::StatusOr<size_t> got =
      RecvPacket(rank.session->fd(), &reply, sizeof(reply), &fd, absl::Now() + absl::Seconds(20));
  if (!got.ok()) return got.status();
  if (reply.code != 0 || fd < 0) {
    if (fd >= 0) close(fd);
    return absl::Status(static_cast<absl::StatusCode>(reply.code), reply.message);
  }
  void* memory = mmap(nullptr, reply.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) return absl::InternalError("mmap of the arena failed");
  return std::make_pair(memory, static_cast<size_t>(reply.arena_bytes));
}

// Writes random and extreme values over `bytes` bytes of `memory`, a word at a time.
void Scribble(std::byte* memory, size_t bytes, std::mt19937_64& random) {
  static constexpr uint64_t kExtremes[] = {0,          1,          2,          63,
                                           64,         65,         0xffffffff, 0x7fffffff,
                                           0x80000000, UINT64_MAX, INT64_MAX,  uint64_t{1} << 40};
  for (size_t at = 0; at + sizeof(uint64_t) <= bytes; at += sizeof(uint64_t)) {
    const uint64_t value =
        random() % 4 == 0 ? kExtremes[random() % std::size(kExtremes)] : random();
    __atomic_store_n(reinterpret_cast<uint64_t*>(memory + at), value, __ATOMIC_RELAXED);
  }
}

TEST(ScribbledMemoryTest, ScribblingRanksCannotCrashTheDaemonOrStopOtherJobs) {
  testing::LocalTestCluster cluster(1, {"--op-timeout=5s"}, /*tls=*/false);
  ASSERT_TRUE(cluster.ok());
  const pid_t daemon = cluster.daemons()[0].pid;

  // The hostile communicator: two ranks on the node, so that it has a node arena.
  std::string hostile_id;
  {
    std::unique_ptr<Client> client = testing::ConnectCore(cluster, 0);
    ASSERT_NE(client, nullptr);
    absl::StatusOr<std::string> id = client->CreateCommId();
    ASSERT_TRUE(id.ok()) << id.status();
    hostile_id = *id;
  }
  std::vector<HostileRank> hostile(2);
  {
    std::vector<std::thread> joins;
    for (int r = 0; r < 2; ++r) {
      absl::StatusOr<std::unique_ptr<testing::RawSession>> session =
          testing::RawSession::Connect(cluster.socket(0));
      ASSERT_TRUE(session.ok()) << session.status();
      hostile[r].session = *std::move(session);
      hostile[r].stub = v1::Client::NewStub(
          grpc::CreateChannel("unix://" + cluster.socket(0), grpc::InsecureChannelCredentials()));
      joins.emplace_back([&, r] {
        v1::JoinRequest join;
        join.set_session_id(hostile[r].session->id());
        join.set_comm_id(hostile_id);
        join.set_world_size(2);
        join.set_rank(r);
        join.set_timeout_ms(20000);
        v1::JoinResponse joined;
        grpc::Status status =
            hostile[r].stub->Join(hostile[r].session->Context().get(), join, &joined);
        EXPECT_TRUE(status.ok()) << status.error_message();
        hostile[r].tag = joined.comm_tag();
      });
    }
    for (std::thread& t : joins) t.join();
  }
  absl::StatusOr<std::pair<void*, size_t>> arena = MapArena(hostile[0], 0);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto* arena_bytes = static_cast<std::byte*>(arena->first);
  collective::arena::Shape& shape = static_cast<collective::arena::Header*>(arena->first)->shape;

  // Rank 0's submission channel, served by the daemon.
  std::unique_ptr<SharedMemory> page_memory =
      *SharedMemory::Create(channel::kChannelBytes, "hostile-channel");
  auto* page = new (page_memory->data()) channel::Layout;
  page->magic = channel::kMagic;
  page->version = channel::kVersion;
  absl::StatusOr<uint64_t> page_buffer =
      hostile[0].session->Register(*page_memory, channel::kChannelBytes);
  ASSERT_TRUE(page_buffer.ok()) << page_buffer.status();
  {
    v1::OpenChannelRequest open;
    open.set_session_id(hostile[0].session->id());
    open.set_comm_tag(hostile[0].tag);
    open.set_rank(0);
    open.set_buffer_id(*page_buffer);
    v1::OpenChannelResponse opened;
    grpc::Status status =
        hostile[0].stub->OpenChannel(hostile[0].session->Context().get(), open, &opened);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  std::atomic<bool> stop{false};
  std::vector<std::thread> attackers;
  // Every byte of the arena and of the channel page, again and again.
  attackers.emplace_back([&] {
    std::mt19937_64 random(1);
    while (!stop.load()) {
      Scribble(arena_bytes, arena->second, random);
      Scribble(static_cast<std::byte*>(page_memory->data()), channel::kChannelBytes, random);
      page->submitted.fetch_add(1);  // and make the daemon read the page
      channel::Wake(page->submitted);
      std::this_thread::yield();
    }
  });
  // The rank count and the slot size flipping between a true and a hostile value: the daemon
  // once validated a value and then read it again.
  attackers.emplace_back([&] {
    for (uint64_t turn = 0; !stop.load(); ++turn) {
      __atomic_store_n(&shape.ranks, turn % 2 == 0 ? 2u : 64u, __ATOMIC_RELAXED);
      __atomic_store_n(&shape.slot_bytes, turn % 2 == 0 ? uint64_t{256 << 10} : uint64_t{1} << 30,
                       __ATOMIC_RELAXED);
    }
  });

  // Meanwhile: the daemon's status and metrics, read again and again, and another job's
  // operations on the same node (in its own arena) and through the daemon.
  std::atomic<int> scrapes{0};
  std::thread observer([&] {
    auto stub = v1::Client::NewStub(
        grpc::CreateChannel("unix://" + cluster.socket(0), grpc::InsecureChannelCredentials()));
    while (!stop.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::DaemonStatus status;
      if (stub->GetStatus(&context, v1::GetStatusRequest(), &status).ok()) ++scrapes;
      if (!testing::HttpGet(cluster.daemons()[0].metrics_address, "/metrics").empty()) ++scrapes;
    }
  });
  std::atomic<int> good_ops{0};
  const absl::Time until = absl::Now() + kScribbling;
  testing::RunCoreRanks(
      cluster, 2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client&) {
        for (int round = 0;; ++round) {
          std::vector<float> small(16, static_cast<float>(rank + round));
          absl::Status status =
              comm.AllReduce(small.data(), small.data(), small.size(), DataType::kFloat32,
                             ReduceOp::kSum, CallOptions(absl::Seconds(30)));
          ASSERT_TRUE(status.ok()) << status;
          ASSERT_EQ(small[0], static_cast<float>(1 + 2 * round));
          std::vector<float> large(100000, 1.0f);  // beyond a slot
          status = comm.AllReduce(large.data(), large.data(), large.size(), DataType::kFloat32,
                                  ReduceOp::kSum, CallOptions(absl::Seconds(30)));
          ASSERT_TRUE(status.ok()) << status;
          ASSERT_EQ(large.back(), 2.0f);
          ++good_ops;
          // Rank 0's clock decides when both stop, so that they call the same operations.
          float more = rank == 0 && absl::Now() < until ? 1.0f : 0.0f;
          status = comm.AllReduce(&more, &more, 1, DataType::kFloat32, ReduceOp::kMax,
                                  CallOptions(absl::Seconds(30)));
          ASSERT_TRUE(status.ok()) << status;
          if (more == 0.0f) break;
        }
      });
  stop.store(true);
  for (std::thread& t : attackers) t.join();
  observer.join();
  EXPECT_TRUE(Alive(daemon)) << "batond died; its log: " << cluster.daemons()[0].log;
  EXPECT_GT(good_ops.load(), 0);
  EXPECT_GT(scrapes.load(), 0);

  // Afterwards a new job runs, and the status still answers.
  testing::RunCoreRanks(
      cluster, 2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client&) {
        float x = static_cast<float>(rank);
        absl::Status status = comm.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                             CallOptions(absl::Seconds(30)));
        EXPECT_TRUE(status.ok()) << status;
        EXPECT_EQ(x, 1.0f);
      });
  auto stub = v1::Client::NewStub(
      grpc::CreateChannel("unix://" + cluster.socket(0), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::DaemonStatus status;
  EXPECT_TRUE(stub->GetStatus(&context, v1::GetStatusRequest(), &status).ok());
  EXPECT_TRUE(Alive(daemon));
  munmap(arena->first, arena->second);
}

}  // namespace
}  // namespace baton
