#include "transport/testing/fault_endpoint.h"

#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "collective/ring_all_reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

namespace baton::transport::testing {
namespace {

using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

std::vector<std::byte> Bytes(size_t n, int seed) {
  std::vector<std::byte> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return bytes;
}

class FaultEndpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<InMemoryFabric> fabric_ = NewInMemoryFabric();
  std::unique_ptr<Endpoint> a_ = *fabric_->CreateEndpoint("a");
  std::unique_ptr<Endpoint> b_ = *fabric_->CreateEndpoint("b");
  FaultInjectingEndpoint faulty_{a_.get()};
};

TEST_F(FaultEndpointTest, FailsTheNthSendOnlyAndCountsWhatWentThrough) {
  faulty_.FailNthSend("b", 2);
  EXPECT_TRUE(faulty_.Send("b", Tag{.seq = 1}, Bytes(8, 1), Deadline()).ok());
  const absl::Status second = faulty_.Send("b", Tag{.seq = 2}, Bytes(8, 2), Deadline());
  EXPECT_EQ(second.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.message(), HasSubstr("peer b"));
  EXPECT_TRUE(faulty_.Send("b", Tag{.seq = 3}, Bytes(8, 3), Deadline()).ok());
  EXPECT_EQ(faulty_.sends_to("b"), 2);

  std::vector<std::byte> received(8);
  EXPECT_TRUE(b_->Recv("a", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_TRUE(b_->Recv("a", Tag{.seq = 3}, received, Deadline()).ok());
  // The failed one never reached b.
  EXPECT_EQ(b_->Recv("a", Tag{.seq = 2}, received, absl::Now()).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FaultEndpointTest, FailsWithTheGivenStatus) {
  faulty_.FailNthSend("b", 1, absl::DataLossError("corrupt"));
  EXPECT_EQ(faulty_.Send("b", Tag{}, Bytes(1, 0), Deadline()).code(), absl::StatusCode::kDataLoss);
}

TEST_F(FaultEndpointTest, DroppingAPeerFailsItsPostedReceiveWithoutWaitingForTheDeadline) {
  std::vector<std::byte> buffer(8);
  std::unique_ptr<PostedRecv> recv =
      faulty_.PostRecv("b", Tag{.seq = 1}, buffer, absl::Now() + absl::Hours(1), nullptr);
  EXPECT_FALSE(recv->Test());
  std::thread dropper([this] { faulty_.DropPeer("b"); });
  const absl::Status status = recv->Wait();
  dropper.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("peer b"));
  EXPECT_EQ(faulty_.Send("b", Tag{.seq = 2}, Bytes(1, 0), Deadline()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(faulty_.Recv("b", Tag{.seq = 3}, buffer, Deadline()).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(FaultEndpointTest, ReceivesFromOtherPeersStillArrive) {
  faulty_.DropPeer("c");
  std::vector<std::byte> buffer(8);
  std::unique_ptr<PostedRecv> recv =
      faulty_.PostRecv("b", Tag{.seq = 1}, buffer, Deadline(), nullptr);
  ASSERT_TRUE(b_->Send("a", Tag{.seq = 1}, Bytes(8, 4), Deadline()).ok());
  EXPECT_TRUE(recv->Wait().ok());
  EXPECT_EQ(buffer, Bytes(8, 4));
}

TEST_F(FaultEndpointTest, DelayedSendPastItsDeadlineFails) {
  faulty_.DelaySends("b", absl::Hours(1));
  EXPECT_EQ(faulty_.Send("b", Tag{}, Bytes(1, 0), absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(faulty_.sends_to("b"), 0);
}

// PostSend and PostWrite are sends: the Nth of them fails as a Send would, its handle completed
// with the error.
TEST_F(FaultEndpointTest, PostSendAndPostWriteCountAsSends) {
  std::vector<std::byte> memory = Bytes(64, 7);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  std::vector<std::byte> target_memory(64);
  const std::unique_ptr<MemoryRegion> target_region = HostMemoryRegion(target_memory);
  std::unique_ptr<ExposedRegion> exposed =
      b_->ExposeRegion("a", 1, RegionSlice{target_region.get(), 0, 64}, Deadline());

  faulty_.FailNthSend("b", 1, absl::DataLossError("injected"));
  faulty_.FailNthSend("b", 3);
  std::unique_ptr<PostedSend> failed =
      faulty_.PostSend("b", Tag{.seq = 1}, RegionSlice{region.get(), 0, 64}, Deadline());
  EXPECT_TRUE(failed->Test());
  EXPECT_EQ(failed->Wait().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(faulty_.PostSend("b", Tag{.seq = 2}, RegionSlice{region.get(), 0, 64}, Deadline())
                  ->Wait()
                  .ok());
  const absl::Status write_failed = faulty_
                                        .PostWrite("b", 1, RegionSlice{region.get(), 0, 64},
                                                   exposed->descriptor(), 0, 5u, Deadline())
                                        ->Wait();
  EXPECT_EQ(write_failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(write_failed.message(), HasSubstr("peer b"));
  EXPECT_FALSE(exposed->Test());  // nothing reached b
  EXPECT_EQ(faulty_.sends_to("b"), 1);
  // The next write goes through.
  ASSERT_TRUE(faulty_
                  .PostWrite("b", 1, RegionSlice{region.get(), 0, 64}, exposed->descriptor(), 0, 5u,
                             Deadline())
                  ->Wait()
                  .ok());
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(notice->immediate, 5u);
  EXPECT_EQ(target_memory, memory);
  std::vector<std::byte> received(64);
  EXPECT_TRUE(b_->Recv("a", Tag{.seq = 2}, received, Deadline()).ok());
  EXPECT_EQ(b_->Recv("a", Tag{.seq = 1}, received, absl::Now()).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FaultEndpointTest, FailsTheNthExposeAndConnect) {
  std::vector<std::byte> memory(64);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  faulty_.FailNthExpose("b", 2, absl::ResourceExhaustedError("no keys left"));
  std::unique_ptr<ExposedRegion> first =
      faulty_.ExposeRegion("b", 1, RegionSlice{region.get(), 0, 32}, Deadline());
  std::unique_ptr<ExposedRegion> second =
      faulty_.ExposeRegion("b", 1, RegionSlice{region.get(), 32, 32}, Deadline());
  EXPECT_FALSE(first->Test());
  EXPECT_NE(first->descriptor().key, 0u);
  EXPECT_TRUE(second->Test());
  EXPECT_EQ(second->descriptor().key, 0u);
  EXPECT_EQ(second->Wait().status().code(), absl::StatusCode::kResourceExhausted);

  faulty_.FailNthConnect("b", 1);
  const absl::Status refused = faulty_.Connect("b", "");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("peer b"));
  EXPECT_TRUE(faulty_.Connect("b", "").ok());
}

TEST_F(FaultEndpointTest, DroppingAPeerFailsItsWaitingExposureAndRevokesIt) {
  std::vector<std::byte> memory(64);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  std::unique_ptr<ExposedRegion> exposed =
      faulty_.ExposeRegion("b", 1, RegionSlice{region.get(), 0, 64}, absl::Now() + absl::Hours(1));
  const RemoteRegion target = exposed->descriptor();
  std::thread dropper([this] { faulty_.DropPeer("b"); });
  const absl::StatusOr<WriteNotice> notice = exposed->Wait();
  dropper.join();
  EXPECT_EQ(notice.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(notice.status().message(), HasSubstr("peer b"));
  // Revoked underneath: b's write is refused.
  std::vector<std::byte> source = Bytes(64, 1);
  const std::unique_ptr<MemoryRegion> source_region = HostMemoryRegion(source);
  EXPECT_EQ(
      b_->PostWrite("a", 1, RegionSlice{source_region.get(), 0, 64}, target, 0, 1u, Deadline())
          ->Wait()
          .code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(memory, std::vector<std::byte>(64));
  EXPECT_TRUE(faulty_.ExposeRegion("b", 1, RegionSlice{region.get(), 0, 8}, Deadline())->Test());
  EXPECT_EQ(faulty_.Connect("b", "").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(faulty_.ConnectionData("b").status().code(), absl::StatusCode::kUnavailable);
}

// A ring all-reduce on 3 participants whose participant 1 fails its second send to participant
// 2: participant 1 fails naming that peer, and once the caller aborts the communicator (as the
// daemon does on any rank's error) every participant returns, none at its deadline.
TEST(FaultEndpointCollectiveTest, RingAllReduceFailsCleanlyNamingThePeer) {
  constexpr int kSize = 3;
  constexpr uint64_t kComm = 0x42;
  std::unique_ptr<InMemoryFabric> fabric = NewInMemoryFabric();
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::vector<std::string> addresses;
  for (int r = 0; r < kSize; ++r) {
    addresses.push_back(absl::StrCat("mem-", r));
    endpoints.push_back(*fabric->CreateEndpoint(addresses.back()));
  }
  FaultInjectingEndpoint faulty(endpoints[1].get());
  faulty.FailNthSend("mem-2", 2);
  std::vector<Endpoint*> used = {endpoints[0].get(), &faulty, endpoints[2].get()};

  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<absl::Status> statuses(kSize);
  std::vector<std::vector<float>> data(kSize, std::vector<float>(3000, 1.0f));
  std::vector<std::thread> threads;
  threads.reserve(kSize);
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      collective::OpContext ctx;
      ctx.endpoint = used[r];
      ctx.comm = kComm;
      ctx.seq = 1;
      ctx.deadline = deadline;
      ctx.chunk_bytes = 400;  // many messages per step: the second send to 2 is early on
      const collective::Ring ring{r, kSize, addresses[(r + kSize - 1) % kSize],
                                  addresses[(r + 1) % kSize]};
      statuses[r] =
          collective::RingAllReduce(ctx, ring, data[r].data(), data[r].size(),
                                    collective::DataType::kFloat32, collective::ReduceOp::kSum);
      if (!statuses[r].ok()) {
        for (Endpoint* endpoint : used) endpoint->Abort(kComm, statuses[r]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kUnavailable) << statuses[1];
  EXPECT_THAT(statuses[1].message(), HasSubstr("mem-2"));
  for (int r = 0; r < kSize; ++r) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_NE(statuses[r].code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r << ": " << statuses[r];
  }
  EXPECT_LT(absl::Now(), deadline);
}

}  // namespace
}  // namespace baton::transport::testing
