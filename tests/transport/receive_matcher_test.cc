// The receive-side rules every transport relies on, in particular that a Recv never returns
// while a transport is still writing into its buffer.

#include "transport/receive_matcher.h"

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/tcp/frame.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

constexpr char kPeer[] = "peer-a";

// Delivers to the receive that a concurrent Recv posts with `buffer`, once it is posted.
ReceiveMatcher::Delivery ClaimPostedReceive(ReceiveMatcher& matcher, const Tag& tag,
                                            ByteSpan buffer) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (true) {
    ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(kPeer, tag, buffer.size());
    if (delivery.buffer().data() == buffer.data() || absl::Now() > give_up) return delivery;
    // Not posted yet: dropping an unfinished unexpected message leaves no trace.
    matcher.FinishDelivery(std::move(delivery), absl::UnavailableError("retry"));
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// Delivers a whole unexpected (or posted) message of `length` bytes of `fill`.
void Deliver(ReceiveMatcher& matcher, const std::string& peer, const Tag& tag, size_t length,
             char fill) {
  ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(peer, tag, length);
  if (!delivery.discard() && length > 0) std::memset(delivery.buffer().data(), fill, length);
  matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
}

TEST(ReceiveMatcherTest, UnexpectedMessageIsReceivedLater) {
  ReceiveMatcher matcher(/*message_overhead_bytes=*/kFrameHeaderBytes);
  ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(kPeer, Tag{.seq = 1}, 3);
  ASSERT_FALSE(delivery.discard());
  std::memcpy(delivery.buffer().data(), "abc", 3);
  matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
  std::vector<std::byte> received(3);
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 1}, received, absl::Now()).ok());
  EXPECT_EQ(std::memcmp(received.data(), "abc", 3), 0);
  const LinkStats stats = matcher.RecvLinkStats().at(kPeer);
  EXPECT_EQ(stats.rx_bytes, 3 + kFrameHeaderBytes);
  EXPECT_EQ(stats.rx_messages, 1u);
}

// A message that arrived corrupt (DataLoss) fails the receive that wants it, whether that was
// posted before, while or after the payload was read; a message cut short (any other error) is
// simply dropped. Neither is counted.
TEST(ReceiveMatcherTest, ACorruptMessageFailsItsReceiveWheneverItIsPosted) {
  ReceiveMatcher matcher;
  const absl::Status corrupt = absl::DataLossError("checksum mismatch on a message from peer-a");
  std::vector<std::byte> buffer(3);
  // Communicator 0 has formed here, with kPeer in it.
  const std::vector<std::string> members = {kPeer};
  matcher.Restrict(0, members);

  // Posted first.
  std::unique_ptr<PostedRecv> before =
      matcher.Post(kPeer, Tag{.seq = 1}, buffer, absl::Now() + absl::Seconds(10));
  ReceiveMatcher::Delivery into_posted = matcher.BeginDelivery(kPeer, Tag{.seq = 1}, 3);
  ASSERT_EQ(into_posted.buffer().data(), buffer.data());
  matcher.FinishDelivery(std::move(into_posted), corrupt);
  EXPECT_EQ(before->Wait(), corrupt);

  // Posted while the payload was read as unexpected.
  ReceiveMatcher::Delivery reading = matcher.BeginDelivery(kPeer, Tag{.seq = 2}, 3);
  std::unique_ptr<PostedRecv> meanwhile =
      matcher.Post(kPeer, Tag{.seq = 2}, buffer, absl::Now() + absl::Seconds(10));
  matcher.FinishDelivery(std::move(reading), corrupt);
  EXPECT_EQ(meanwhile->Wait(), corrupt);

  // Posted later: the error waits for it, once.
  Deliver(matcher, kPeer, Tag{.seq = 3}, 1, 'x');  // unrelated, still received
  ReceiveMatcher::Delivery unexpected = matcher.BeginDelivery(kPeer, Tag{.seq = 4}, 3);
  matcher.FinishDelivery(std::move(unexpected), corrupt);
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.seq = 4}, buffer, absl::Now()), corrupt);
  EXPECT_TRUE(absl::IsDeadlineExceeded(matcher.Recv(kPeer, Tag{.seq = 4}, buffer, absl::Now())));
  // For a communicator not formed here the error is not kept: it would cost no allowance.
  ReceiveMatcher::Delivery unknown = matcher.BeginDelivery(kPeer, Tag{.comm = 9, .seq = 1}, 3);
  matcher.FinishDelivery(std::move(unknown), corrupt);
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(matcher.Recv(kPeer, Tag{.comm = 9, .seq = 1}, buffer, absl::Now())));
  std::vector<std::byte> unrelated(1);
  EXPECT_TRUE(matcher.Recv(kPeer, Tag{.seq = 3}, unrelated, absl::Now()).ok());
  EXPECT_EQ(unrelated[0], std::byte{'x'});

  // Cut short: dropped, so the receive waits for its deadline.
  ReceiveMatcher::Delivery cut = matcher.BeginDelivery(kPeer, Tag{.seq = 5}, 3);
  matcher.FinishDelivery(std::move(cut), absl::UnavailableError("connection closed"));
  EXPECT_TRUE(absl::IsDeadlineExceeded(matcher.Recv(kPeer, Tag{.seq = 5}, buffer, absl::Now())));

  const LinkStats stats = matcher.RecvLinkStats().at(kPeer);
  EXPECT_EQ(stats.rx_messages, 1u) << "only the intact message counts";
}

TEST(ReceiveMatcherTest, CountsNoOverheadUnlessTheTransportHasOne) {
  ReceiveMatcher matcher;
  Deliver(matcher, kPeer, Tag{.seq = 1}, 5, 'x');
  const LinkStats stats = matcher.RecvLinkStats().at(kPeer);
  EXPECT_EQ(stats.rx_bytes, 5u);
  EXPECT_EQ(stats.rx_messages, 1u);
}

TEST(ReceiveMatcherTest, ClaimedReceiveOutlivesItsDeadlineUntilTheWriterFinishes) {
  ReceiveMatcher matcher;
  std::vector<std::byte> buffer(4);
  auto recv = std::async(std::launch::async, [&] {
    return matcher.Recv(kPeer, Tag{.seq = 1}, buffer, absl::Now() + absl::Milliseconds(50));
  });
  ReceiveMatcher::Delivery delivery = ClaimPostedReceive(matcher, Tag{.seq = 1}, buffer);
  ASSERT_EQ(delivery.buffer().data(), buffer.data()) << "the receive was never posted";
  absl::SleepFor(absl::Milliseconds(150));
  // Past the deadline, but the buffer is still ours: the receive must not have returned.
  EXPECT_EQ(recv.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  std::memset(delivery.buffer().data(), 7, 4);
  matcher.FinishDelivery(std::move(delivery), RecvDeadlineExceeded(kPeer, Tag{.seq = 1}));
  const absl::Status status = recv.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr(kPeer));
}

TEST(ReceiveMatcherTest, AbortCancelsAClaimedDelivery) {
  ReceiveMatcher matcher;
  std::vector<std::byte> buffer(4);
  auto recv = std::async(std::launch::async, [&] {
    return matcher.Recv(kPeer, Tag{.comm = 3}, buffer, absl::Now() + absl::Seconds(30));
  });
  ReceiveMatcher::Delivery delivery = ClaimPostedReceive(matcher, Tag{.comm = 3}, buffer);
  ASSERT_EQ(delivery.buffer().data(), buffer.data()) << "the receive was never posted";
  EXPECT_FALSE(delivery.cancelled());
  matcher.Abort(3, absl::AbortedError("stop"));
  EXPECT_TRUE(delivery.cancelled());
  matcher.FinishDelivery(std::move(delivery), absl::CancelledError("writer stopped"));
  EXPECT_EQ(recv.get(), absl::AbortedError("stop"));
}

TEST(ReceiveMatcherTest, DestroyingAClaimedPostedReceiveCancelsTheWriterAndWaitsForIt) {
  ReceiveMatcher matcher;
  std::vector<std::byte> buffer(4);
  std::unique_ptr<PostedRecv> posted =
      matcher.Post(kPeer, Tag{.seq = 1}, buffer, absl::Now() + absl::Seconds(30));
  ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(kPeer, Tag{.seq = 1}, buffer.size());
  ASSERT_EQ(delivery.buffer().data(), buffer.data());
  auto destroyed = std::async(std::launch::async, [&] { posted.reset(); });
  // The destructor marks the delivery cancelled, then must not return while it is writing.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!delivery.cancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(delivery.cancelled());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(destroyed.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  std::memset(delivery.buffer().data(), 7, 4);
  matcher.FinishDelivery(std::move(delivery), absl::CancelledError("writer stopped"));
  destroyed.get();
  // Nothing of it is left: the tag can be received again.
  Deliver(matcher, kPeer, Tag{.seq = 1}, 4, 9);
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 1}, buffer, absl::Now()).ok());
  EXPECT_EQ(buffer, std::vector<std::byte>(4, std::byte{9}));
}

TEST(ReceiveMatcherTest, SecondPendingReceiveForTheSameMessageIsRefused) {
  ReceiveMatcher matcher;
  std::vector<std::byte> first(1), second(1);
  auto pending = std::async(std::launch::async, [&] {
    return matcher.Recv(kPeer, Tag{.seq = 1}, first, absl::Now() + absl::Seconds(30));
  });
  // Whichever of the two is posted second is refused; until then the probe just times out.
  absl::Status probe;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  do {
    probe = matcher.Recv(kPeer, Tag{.seq = 1}, second, absl::Now() + absl::Milliseconds(5));
  } while (absl::IsDeadlineExceeded(probe) &&
           pending.wait_for(std::chrono::seconds(0)) == std::future_status::timeout &&
           absl::Now() < give_up);
  if (absl::IsDeadlineExceeded(probe)) {
    probe = pending.get();  // the probe was posted first and refused this one
  } else {
    matcher.Shutdown(absl::UnavailableError("endpoint shut down"));
    EXPECT_EQ(pending.get(), absl::UnavailableError("endpoint shut down"));
  }
  EXPECT_EQ(probe.code(), absl::StatusCode::kFailedPrecondition) << probe;
  EXPECT_THAT(std::string(probe.message()), HasSubstr("already pending"));
}

TEST(ReceiveMatcherTest, LostPeerKeepsDeliveredMessagesUntilReconnect) {
  ReceiveMatcher matcher;
  matcher.PeerConnected(kPeer);
  ReceiveMatcher::Delivery delivery = matcher.BeginDelivery(kPeer, Tag{.seq = 1}, 0);
  matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
  matcher.PeerLost(kPeer, absl::UnavailableError("lost connection from peer peer-a: EOF"));
  EXPECT_FALSE(matcher.RecvLinkStats().at(kPeer).up);
  EXPECT_TRUE(matcher.Recv(kPeer, Tag{.seq = 1}, {}, absl::Now()).ok());
  const absl::Status lost = matcher.Recv(kPeer, Tag{.seq = 2}, {}, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.message(), HasSubstr(kPeer));
  matcher.PeerConnected(kPeer);
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.seq = 2}, {}, absl::Now()).code(),
            absl::StatusCode::kDeadlineExceeded);
}

// A peer lost before a communicator was formed (restricted) is, for that communicator, the peer
// of its plan as it is now (a daemon restarted at the same address): its receives wait for the
// message, until their deadline, instead of failing at once. A communicator formed before the
// loss, or not restricted, fails at once; one formed after fails at once on a later loss.
TEST(ReceiveMatcherTest, ALossBeforeACommunicatorFormedDoesNotFailItsReceives) {
  ReceiveMatcher matcher;
  matcher.PeerConnected(kPeer);
  const std::string members[] = {kPeer};
  matcher.Restrict(1, members);
  matcher.PeerLost(kPeer, absl::UnavailableError("lost connection from peer peer-a: EOF"));
  matcher.Restrict(2, members);
  EXPECT_EQ(
      matcher.Recv(kPeer, Tag{.comm = 1, .seq = 1}, {}, absl::Now() + absl::Seconds(30)).code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      matcher.Recv(kPeer, Tag{.comm = 3, .seq = 1}, {}, absl::Now() + absl::Seconds(30)).code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.comm = 2, .seq = 1}, {}, absl::Now() + absl::Milliseconds(50))
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  // The restarted peer's message arrives and completes it.
  std::unique_ptr<PostedRecv> waiting =
      matcher.Post(kPeer, Tag{.comm = 2, .seq = 2}, {}, absl::Now() + absl::Seconds(30));
  EXPECT_FALSE(waiting->Test());
  Deliver(matcher, kPeer, Tag{.comm = 2, .seq = 2}, 0, 'x');
  EXPECT_TRUE(waiting->Wait().ok());
  // A loss after it formed fails its pending and later receives at once.
  std::unique_ptr<PostedRecv> pending =
      matcher.Post(kPeer, Tag{.comm = 2, .seq = 3}, {}, absl::Now() + absl::Seconds(30));
  matcher.PeerLost(kPeer, absl::UnavailableError("lost connection from peer peer-a: reset"));
  EXPECT_EQ(pending->Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      matcher.Recv(kPeer, Tag{.comm = 2, .seq = 4}, {}, absl::Now() + absl::Seconds(30)).code(),
      absl::StatusCode::kUnavailable);
  // Forgotten and formed again, it is new once more.
  matcher.Forget(2);
  matcher.Restrict(2, members);
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.comm = 2, .seq = 5}, {}, absl::Now() + absl::Milliseconds(50))
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

// With flow control the matcher never waits for room: a message within its sender's credit is
// kept, one beyond it is refused (discard() with violation(), not kept, counted), and another
// peer's credit is its own.
TEST(ReceiveMatcherTest, AMessageBeyondItsSendersCreditIsRefusedNotKept) {
  // 1000 bytes of window: eager up to 250 bytes of charge (186 of payload).
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  ReceiveMatcher matcher(/*message_overhead_bytes=*/0, &credits);
  credits.Attach(kPeer);
  credits.Attach("peer-b");
  // 100 bytes cost 164: six fit in 1000, the seventh does not.
  for (uint64_t seq = 0; seq < 6; ++seq) Deliver(matcher, kPeer, Tag{.seq = seq}, 100, 'a');
  ReceiveMatcher::Delivery refused = matcher.BeginDelivery(kPeer, Tag{.seq = 6}, 100);
  EXPECT_TRUE(refused.discard());
  EXPECT_TRUE(refused.violation());
  matcher.FinishDelivery(std::move(refused), absl::OkStatus());
  // Another peer has its own credit.
  Deliver(matcher, "peer-b", Tag{.seq = 1}, 100, 'b');
  std::vector<std::byte> buffer(100);
  ASSERT_TRUE(matcher.Recv("peer-b", Tag{.seq = 1}, buffer, absl::Now() + absl::Seconds(5)).ok());
  // The refused message was not kept; those within the credit were.
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.seq = 6}, buffer, absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 5}, buffer, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(buffer[0], std::byte{'a'});
  const LinkStats stats = matcher.RecvLinkStats().at(kPeer);
  EXPECT_EQ(stats.Counter(kCreditViolationsCounter), 1u);
  EXPECT_EQ(stats.rx_messages, 6u);
}

// Taking messages returns their credit, batched: a grant is queued once half the window (here:
// more than window - eager_max would leave too little) is owed, not per message.
TEST(ReceiveMatcherTest, TakingMessagesReturnsTheirCreditInBatches) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  ReceiveMatcher matcher(/*message_overhead_bytes=*/0, &credits);
  const CreditGrant first = credits.Attach(kPeer);
  EXPECT_EQ(first.limit, 1000u);
  for (uint64_t seq = 0; seq < 6; ++seq) Deliver(matcher, kPeer, Tag{.seq = seq}, 100, 'a');
  std::vector<std::byte> buffer(100);
  // 164 owed: below the threshold (500), nothing to send yet.
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 0}, buffer, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE(credits.TakeOutgoing(absl::InfinitePast()).empty());
  for (uint64_t seq = 1; seq < 4; ++seq) {
    ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = seq}, buffer, absl::Now() + absl::Seconds(5)).ok());
  }
  // 656 owed: one grant, which raises the limit by all of it.
  ReceiveCredits::Outgoing outgoing = credits.TakeOutgoing(absl::InfinitePast());
  ASSERT_EQ(outgoing.grants, std::vector<std::string>{kPeer});
  EXPECT_EQ(credits.Current(kPeer)->limit, 1000u + 4 * CreditCharge(100));
}

// A message that lands in a receive already posted is charged (its sender could not know) and
// returned at once; one beyond the credit is refused even then.
TEST(ReceiveMatcherTest, AMessageIntoAPostedReceiveIsChargedAndReturnedAtOnce) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  ReceiveMatcher matcher(/*message_overhead_bytes=*/0, &credits);
  credits.Attach(kPeer);
  for (uint64_t round = 0; round < 20; ++round) {
    std::vector<std::byte> buffer(100);
    auto receiver = std::async(std::launch::async, [&] {
      return matcher.Recv(kPeer, Tag{.seq = round}, buffer, absl::Now() + absl::Seconds(10));
    });
    ReceiveMatcher::Delivery delivery = ClaimPostedReceive(matcher, Tag{.seq = round}, buffer);
    ASSERT_FALSE(delivery.discard());
    std::memset(delivery.buffer().data(), 'p', 100);
    matcher.FinishDelivery(std::move(delivery), absl::OkStatus());
    ASSERT_TRUE(receiver.get().ok());
    EXPECT_EQ(buffer[0], std::byte{'p'});
    // The sender's view: what it had granted minus what it sent, refreshed by the grants queued.
    (void)credits.TakeOutgoing(absl::InfinitePast());
  }
  // 20 messages of 164 went through a window of 1000: their credit came back as they landed.
  EXPECT_GE(credits.Current(kPeer)->limit, 20 * CreditCharge(100));
  EXPECT_EQ(matcher.RecvLinkStats().at(kPeer).Counter(kCreditViolationsCounter), 0u);
}

// Abort, Forget and Restrict drop unexpected messages, and return their credit.
TEST(ReceiveMatcherTest, DroppingUnexpectedMessagesReturnsTheirCredit) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  ReceiveMatcher matcher(/*message_overhead_bytes=*/0, &credits);
  credits.Attach(kPeer);
  for (uint64_t seq = 0; seq < 2; ++seq)
    Deliver(matcher, kPeer, Tag{.comm = 1, .seq = seq}, 100, 'a');
  for (uint64_t seq = 0; seq < 2; ++seq)
    Deliver(matcher, kPeer, Tag{.comm = 2, .seq = seq}, 100, 'b');
  for (uint64_t seq = 0; seq < 2; ++seq)
    Deliver(matcher, kPeer, Tag{.comm = 3, .seq = seq}, 100, 'c');
  // Full: a seventh would be refused.
  matcher.Abort(1, absl::CancelledError("gone"));
  matcher.Forget(2);
  const std::vector<std::string> others = {"peer-b"};
  matcher.Restrict(3, others);
  // All six came back; a grant went once four were owed (656 of 1000, past the threshold of
  // 500), the last two stay owed until more are.
  EXPECT_EQ(credits.TakeOutgoing(absl::InfinitePast()).grants, std::vector<std::string>{kPeer});
  EXPECT_EQ(credits.Current(kPeer)->limit, 1000u + 4 * CreditCharge(100));
  for (uint64_t seq = 0; seq < 4; ++seq) {
    Deliver(matcher, kPeer, Tag{.comm = 4, .seq = seq}, 100, 'd');
  }
  EXPECT_EQ(matcher.RecvLinkStats().at(kPeer).Counter(kCreditViolationsCounter), 0u);
}

// A receive of rendezvous size asks for its message when it is posted; such a message is
// delivered into it, and dropped (never kept) when no receive is posted.
TEST(ReceiveMatcherTest, ARendezvousMessageGoesOnlyIntoAPostedReceive) {
  ReceiveCredits credits(/*window=*/1000, /*total=*/0);
  ReceiveMatcher matcher(/*message_overhead_bytes=*/0, &credits);
  credits.Attach(kPeer);
  ASSERT_FALSE(credits.Eager(5000));
  // Unasked: dropped, costs no credit, is not a violation.
  Deliver(matcher, kPeer, Tag{.seq = 1}, 5000, 'x');
  std::vector<std::byte> large(5000);
  EXPECT_EQ(matcher.Recv(kPeer, Tag{.seq = 1}, large, absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // (That receive asked for its message too, which had come and gone.)
  EXPECT_EQ(credits.TakeOutgoing(absl::InfinitePast()).clear_to_send.size(), 1u);
  std::unique_ptr<PostedRecv> posted =
      matcher.Post(kPeer, Tag{.seq = 2}, large, absl::Now() + absl::Seconds(10));
  ReceiveCredits::Outgoing outgoing = credits.TakeOutgoing(absl::InfinitePast());
  ASSERT_EQ(outgoing.clear_to_send.size(), 1u);
  EXPECT_EQ(outgoing.clear_to_send[0].first, kPeer);
  EXPECT_EQ(outgoing.clear_to_send[0].second.tag, (Tag{.seq = 2}));
  EXPECT_EQ(outgoing.clear_to_send[0].second.length, 5000u);
  Deliver(matcher, kPeer, Tag{.seq = 2}, 5000, 'r');
  ASSERT_TRUE(posted->Wait().ok());
  EXPECT_EQ(large[4999], std::byte{'r'});
  // A small receive asks for nothing.
  std::unique_ptr<PostedRecv> small =
      matcher.Post(kPeer, Tag{.seq = 3}, std::span(large).first(10), absl::Now());
  EXPECT_TRUE(credits.TakeOutgoing(absl::InfinitePast()).empty());
  EXPECT_EQ(matcher.RecvLinkStats().at(kPeer).Counter(kCreditViolationsCounter), 0u);
}

}  // namespace
}  // namespace baton::transport
