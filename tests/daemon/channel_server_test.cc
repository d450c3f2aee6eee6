#include "daemon/channel_server.h"

#include <unistd.h>

#include <atomic>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

using channel::Layout;

// A channel page as libbaton creates it, and the client's half of the protocol.
class ChannelServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memory_ = *SharedMemory::Create(channel::kChannelBytes, "channel-test");
    page_ = new (memory_->data()) Layout;
    page_->magic = channel::kMagic;
    page_->version = channel::kVersion;
  }

  absl::StatusOr<std::unique_ptr<ChannelServer>> Open(ChannelServer::Runner run) {
    return ChannelServer::Open(memory_, /*session_id=*/7, /*comm_tag=*/0xabc, /*rank=*/3,
                               std::move(run), absl::Microseconds(20));
  }

  // Submits `op` and waits for the daemon's answer.
  absl::StatusOr<std::string> Submit(const channel::OpDescriptor& op) {
    page_->op = op;
    const uint32_t previous = submitted_++;
    channel::Publish(page_->submitted, submitted_, page_->daemon_sleeping);
    absl::Status waited = channel::WaitForChange(
        page_->completed, previous, page_->client_sleeping, absl::Microseconds(20),
        absl::Now() + absl::Seconds(20), [this] {
          return page_->closed.load() ? absl::UnavailableError("closed") : absl::OkStatus();
        });
    if (!waited.ok()) return waited;
    std::string algorithm;
    absl::Status status = channel::ReadResult(page_->result, &algorithm);
    if (!status.ok()) return status;
    return algorithm;
  }

  static channel::OpDescriptor AllReduce(uint64_t count) {
    channel::OpDescriptor op;
    op.kind = static_cast<uint32_t>(collective::Collective::kAllReduce);
    op.data_type = static_cast<uint32_t>(collective::DataType::kFloat32);
    op.reduce_op = static_cast<uint32_t>(collective::ReduceOp::kMax);
    op.count = count;
    op.send_buffer = 11;
    op.send_offset = 64;
    op.recv_buffer = 12;
    op.recv_offset = 128;
    op.timeout_ms = 5000;
    return op;
  }

  std::shared_ptr<SharedMemory> memory_;
  Layout* page_ = nullptr;
  uint32_t submitted_ = 0;
};

TEST_F(ChannelServerTest, CallsRunAsTheChannelsRankAndResultsComeBack) {
  absl::Mutex mu;
  std::vector<CollectiveCall> calls;
  auto server = Open([&](const CollectiveCall& call) -> absl::StatusOr<std::string> {
    absl::MutexLock lock(&mu);
    calls.push_back(call);
    if (call.spec.count == 13)
      return absl::FailedPreconditionError("ranks disagree on operation 1");
    return std::string("ring");
  });
  ASSERT_TRUE(server.ok()) << server.status();

  for (uint64_t count : {1u, 1000u, 5u}) {
    absl::StatusOr<std::string> ran = Submit(AllReduce(count));
    ASSERT_TRUE(ran.ok()) << ran.status();
    EXPECT_EQ(*ran, "ring");
  }
  absl::StatusOr<std::string> failed = Submit(AllReduce(13));
  EXPECT_TRUE(absl::IsFailedPrecondition(failed.status())) << failed.status();
  EXPECT_EQ(failed.status().message(), "ranks disagree on operation 1");

  absl::MutexLock lock(&mu);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[1].spec.count, 1000u);
  for (const CollectiveCall& call : calls) {
    // Who is calling comes from the channel, never from the page.
    EXPECT_EQ(call.session_id, 7u);
    EXPECT_EQ(call.comm_tag, 0xabcu);
    EXPECT_EQ(call.rank, 3);
    EXPECT_EQ(call.spec.collective, collective::Collective::kAllReduce);
    EXPECT_EQ(call.spec.type, collective::DataType::kFloat32);
    EXPECT_EQ(call.spec.op, collective::ReduceOp::kMax);
    EXPECT_FALSE(call.spec.algorithm.has_value());
    EXPECT_EQ(call.send_buffer, 11u);
    EXPECT_EQ(call.send_offset, 64u);
    EXPECT_EQ(call.recv_buffer, 12u);
    EXPECT_EQ(call.recv_offset, 128u);
    EXPECT_GT(call.deadline, absl::Now());
    EXPECT_LT(call.deadline, absl::Now() + absl::Seconds(6));
  }
}

TEST_F(ChannelServerTest, ValuesOutsideTheEnumerationsFailWithoutRunning) {
  // Atomic although the channel orders it: the server maps the page at another address, so
  // ThreadSanitizer cannot see the ordering that the page's atomics provide.
  std::atomic<int> runs{0};
  auto server = Open([&](const CollectiveCall&) -> absl::StatusOr<std::string> {
    ++runs;
    return std::string("ring");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  struct Case {
    uint32_t channel::OpDescriptor::*field;
    uint32_t value;
    const char* message;
  };
  for (const Case& c : {Case{&channel::OpDescriptor::kind, 12, "unknown collective 12"},
                        Case{&channel::OpDescriptor::data_type, 99, "unknown data type 99"},
                        Case{&channel::OpDescriptor::reduce_op, 5, "unknown reduce op 5"},
                        Case{&channel::OpDescriptor::algorithm, 6, "unknown algorithm 5"}}) {
    channel::OpDescriptor op = AllReduce(4);
    op.*c.field = c.value;
    absl::StatusOr<std::string> ran = Submit(op);
    EXPECT_TRUE(absl::IsInvalidArgument(ran.status())) << ran.status();
    EXPECT_EQ(ran.status().message(), c.message);
  }
  EXPECT_EQ(runs, 0);
  // A valid operation after them still runs: nothing was lost.
  channel::OpDescriptor tree = AllReduce(4);
  tree.algorithm = 1 + static_cast<uint32_t>(collective::Algorithm::kTree);
  EXPECT_TRUE(Submit(tree).ok());
  EXPECT_EQ(runs, 1);
}

TEST_F(ChannelServerTest, APageThatIsNotAChannelIsRefused) {
  page_->magic = 0x12345678;
  auto server = Open([](const CollectiveCall&) { return absl::StatusOr<std::string>("ring"); });
  EXPECT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
  EXPECT_NE(server.status().message().find(
                absl::StrCat("is not a version ", channel::kVersion, " submission channel")),
            std::string::npos)
      << server.status();
  // Nor is a buffer too small to hold the page.
  auto small = ChannelServer::Open(
      *SharedMemory::Create(channel::kChannelBytes - 1, "small"), 7, 0xabc, 3,
      [](const CollectiveCall&) { return absl::StatusOr<std::string>("ring"); },
      absl::Microseconds(20));
  EXPECT_TRUE(absl::IsInvalidArgument(small.status())) << small.status();
}

TEST_F(ChannelServerTest, StoppingTheServerClosesTheChannelForTheClient) {
  auto server = Open([](const CollectiveCall&) { return absl::StatusOr<std::string>("ring"); });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Submit(AllReduce(1)).ok());
  server->reset();
  EXPECT_EQ(page_->closed.load(), 1u);
  // A submission after the close fails at once instead of waiting for its deadline.
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> ran = Submit(AllReduce(1));
  EXPECT_TRUE(absl::IsUnavailable(ran.status())) << ran.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace baton::daemon
