#include "collective/piggyback_endpoint.h"

#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "transport/forwarding_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::collective {
namespace {

using namespace ::baton::transport;  // NOLINT(google-build-using-namespace): the endpoint's types

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

ConstByteSpan Bytes(const std::string& text) { return std::as_bytes(std::span(text)); }

// Passes everything to an in-memory endpoint and writes down the sends and waits it sees.
class Recording final : public ForwardingEndpoint {
 public:
  explicit Recording(std::unique_ptr<Endpoint> inner)
      : ForwardingEndpoint(inner.get()), inner_(std::move(inner)) {}

  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  absl::Status Send(const std::string& peer, const Tag& tag, ConstByteSpan data,
                    absl::Time deadline) override {
    Note(absl::StrCat("send ", peer, " ", tag.step));
    return inner_->Send(peer, tag, data, deadline);
  }
  absl::Status SendAll(const std::string& peer, std::span<const OutMessage> messages,
                       absl::Time deadline) override {
    std::vector<uint32_t> steps;
    for (const OutMessage& m : messages) steps.push_back(m.tag.step);
    Note(absl::StrCat("send ", peer, " ", absl::StrJoin(steps, "+")));
    return inner_->SendAll(peer, messages, deadline);
  }
  std::unique_ptr<PostedRecv> PostRecv(const std::string& peer, const Tag& tag, ByteSpan data,
                                       absl::Time deadline, ArrivalCallback on_arrival) override {
    return std::make_unique<Patient>(
        inner_->PostRecv(peer, tag, data, deadline, std::move(on_arrival)), patience_);
  }
  // How long a receive's brief wait lasts, as a transport's spin would (in-memory ones have none).
  void set_patience(absl::Duration patience) { patience_ = patience; }

 private:
  void Note(std::string call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }

  // A receive whose brief wait waits up to `patience` for its message.
  class Patient final : public PostedRecv {
   public:
    Patient(std::unique_ptr<PostedRecv> inner, absl::Duration patience)
        : inner_(std::move(inner)), patience_(patience) {}
    absl::Status Wait() override { return inner_->Wait(); }
    bool Test() override { return inner_->Test(); }
    bool WaitBriefly() override {
      const absl::Time until = absl::Now() + patience_;
      while (!inner_->Test() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
      return inner_->Test();
    }

   private:
    const std::unique_ptr<PostedRecv> inner_;
    const absl::Duration patience_;
  };

  const std::unique_ptr<Endpoint> inner_;
  absl::Duration patience_ = absl::ZeroDuration();
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

class PiggybackEndpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<Endpoint> Make(const std::string& address) {
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = fabric_->CreateEndpoint(address);
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    return *std::move(endpoint);
  }
  // Posts the receive of c's two-byte answer into `answer`.
  std::unique_ptr<PostedRecv> PostAnswer(std::string& answer) {
    answer.assign(2, '\0');
    return piggyback_.PostRecv("c", data_, std::as_writable_bytes(std::span(answer)), Deadline(),
                               nullptr);
  }
  std::string Receive(Endpoint& at, const Tag& tag, size_t size) {
    std::string text(size, '\0');
    const absl::Status status =
        at.Recv("a", tag, std::as_writable_bytes(std::span(text)), Deadline());
    EXPECT_TRUE(status.ok()) << status;
    return text;
  }

  const Tag held_{.comm = 1, .seq = 1, .step = 9};
  const Tag data_{.comm = 1, .seq = 1, .step = 0};
  std::unique_ptr<InMemoryFabric> fabric_ = NewInMemoryFabric();
  Recording recording_{Make("a")};
  std::unique_ptr<Endpoint> b_ = Make("b");
  std::unique_ptr<Endpoint> c_ = Make("c");
  PiggybackEndpoint piggyback_{&recording_};
};

TEST_F(PiggybackEndpointTest, TheHeldMessageRidesWithTheNextMessageToItsPeer) {
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("sig"), Deadline()).ok());
  EXPECT_TRUE(recording_.calls().empty());
  ASSERT_TRUE(piggyback_.Send("b", data_, Bytes("data"), Deadline()).ok());
  EXPECT_EQ(recording_.calls(), std::vector<std::string>{"send b 9+0"});
  EXPECT_EQ(Receive(*b_, held_, 3), "sig");
  EXPECT_EQ(Receive(*b_, data_, 4), "data");
  ASSERT_TRUE(piggyback_.Flush().ok());  // nothing left
  EXPECT_EQ(recording_.calls().size(), 1u);
}

// A small send elsewhere leaves the message held for its own peer; a large one, which may wait for
// room, sends it first.
TEST_F(PiggybackEndpointTest, OnlyALargeSendElsewhereSendsTheHeldMessageFirst) {
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("sig"), Deadline()).ok());
  ASSERT_TRUE(piggyback_.Send("c", data_, Bytes("data"), Deadline()).ok());
  EXPECT_EQ(recording_.calls(), (std::vector<std::string>{"send c 0"}));
  const Tag more{.comm = 1, .seq = 1, .step = 1};
  ASSERT_TRUE(piggyback_.Send("b", more, Bytes("more"), Deadline()).ok());
  EXPECT_EQ(recording_.calls(), (std::vector<std::string>{"send c 0", "send b 9+1"}));
  EXPECT_EQ(Receive(*c_, data_, 4), "data");
  EXPECT_EQ(Receive(*b_, held_, 3), "sig");
  EXPECT_EQ(Receive(*b_, more, 4), "more");

  const Tag second{.comm = 1, .seq = 2, .step = 9};
  ASSERT_TRUE(piggyback_.Hold("b", second, Bytes("two"), Deadline()).ok());
  const std::string large(PiggybackEndpoint::kHeldAcrossBytes + 1, 'x');
  const Tag big{.comm = 1, .seq = 2, .step = 0};
  ASSERT_TRUE(piggyback_.Send("c", big, Bytes(large), Deadline()).ok());
  EXPECT_EQ(recording_.calls(),
            (std::vector<std::string>{"send c 0", "send b 9+1", "send b 9", "send c 0"}));
  EXPECT_EQ(Receive(*b_, second, 3), "two");
  EXPECT_EQ(Receive(*c_, big, large.size()), large);
}

// A receive that would block once its brief wait is over sends the held message first: here the
// message it waits for comes only once the held one has arrived, so without the flush the wait
// would reach its deadline.
TEST_F(PiggybackEndpointTest, TheHeldMessageGoesAloneBeforeAWaitThatBlocks) {
  recording_.set_patience(absl::Milliseconds(50));
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("sig"), Deadline()).ok());
  std::string answer;
  std::unique_ptr<PostedRecv> posted = PostAnswer(answer);
  EXPECT_FALSE(posted->Test());
  EXPECT_TRUE(recording_.calls().empty()) << "Test must not send";
  auto peer = std::async(std::launch::async, [&] {
    EXPECT_EQ(Receive(*b_, held_, 3), "sig");
    return c_->Send("a", data_, Bytes("ok"), Deadline());
  });
  ASSERT_TRUE(posted->Wait().ok());
  EXPECT_EQ(answer, "ok");
  ASSERT_TRUE(peer.get().ok());
  EXPECT_EQ(recording_.calls(), std::vector<std::string>{"send b 9"});
}

// A message that arrives within the receive's brief wait (the transport's spin) keeps the held one
// back for a later send to its peer.
TEST_F(PiggybackEndpointTest, AMessageWithinTheBriefWaitKeepsTheMessageHeld) {
  recording_.set_patience(absl::Seconds(20));
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("sig"), Deadline()).ok());
  std::string answer;
  std::unique_ptr<PostedRecv> posted = PostAnswer(answer);
  auto peer = std::async(std::launch::async, [&] {
    absl::SleepFor(absl::Milliseconds(20));
    return c_->Send("a", data_, Bytes("ok"), Deadline());
  });
  ASSERT_TRUE(posted->Wait().ok());
  ASSERT_TRUE(peer.get().ok());
  EXPECT_EQ(answer, "ok");
  EXPECT_TRUE(recording_.calls().empty());
  ASSERT_TRUE(piggyback_.Flush().ok());
  EXPECT_EQ(Receive(*b_, held_, 3), "sig");
}

TEST_F(PiggybackEndpointTest, AWaitThatNeedNotBlockKeepsTheMessageHeld) {
  ASSERT_TRUE(c_->Send("a", data_, Bytes("ok"), Deadline()).ok());
  std::string answer;
  std::unique_ptr<PostedRecv> posted = PostAnswer(answer);
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("sig"), Deadline()).ok());
  ASSERT_TRUE(posted->Wait().ok());
  EXPECT_TRUE(recording_.calls().empty());
  ASSERT_TRUE(piggyback_.Flush().ok());
  EXPECT_EQ(recording_.calls(), std::vector<std::string>{"send b 9"});
  EXPECT_EQ(Receive(*b_, held_, 3), "sig");
}

TEST_F(PiggybackEndpointTest, HoldingAgainSendsTheFirstAndAFailedFlushSaysWhy) {
  ASSERT_TRUE(piggyback_.Hold("b", held_, Bytes("one"), Deadline()).ok());
  const Tag second{.comm = 1, .seq = 2, .step = 9};
  ASSERT_TRUE(piggyback_.Hold("b", second, Bytes("two"), Deadline()).ok());
  EXPECT_EQ(recording_.calls(), std::vector<std::string>{"send b 9"});
  EXPECT_EQ(Receive(*b_, held_, 3), "one");
  fabric_->Kill("b");
  const absl::Status flushed = piggyback_.Flush();
  EXPECT_EQ(flushed.code(), absl::StatusCode::kUnavailable) << flushed;
  EXPECT_TRUE(piggyback_.Flush().ok()) << "the failed message is not sent twice";
}

}  // namespace
}  // namespace baton::collective
