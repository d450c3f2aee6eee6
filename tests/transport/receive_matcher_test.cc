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
  ReceiveMatcher matcher(/*max_unexpected_bytes=*/0, /*message_overhead_bytes=*/kFrameHeaderBytes);
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

TEST(ReceiveMatcherTest, UnexpectedBytesPerPeerAreBoundedUntilTheReceiverCatchesUp) {
  // 100-byte messages against a 1000-byte bound: the 16 messages any peer may always have held
  // (1600 bytes) are the larger allowance.
  ReceiveMatcher matcher(/*max_unexpected_bytes=*/1000);
  for (uint64_t seq = 0; seq < 16; ++seq) Deliver(matcher, kPeer, Tag{.seq = seq}, 100, 'a');
  // Another peer has its own allowance.
  Deliver(matcher, "peer-b", Tag{.seq = 1}, 900, 'b');
  // The 17th message from kPeer waits.
  auto blocked =
      std::async(std::launch::async, [&] { Deliver(matcher, kPeer, Tag{.seq = 16}, 100, 'c'); });
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  // Taking the first message makes room.
  std::vector<std::byte> buffer(100);
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 0}, buffer, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(matcher.Recv(kPeer, Tag{.seq = 16}, buffer, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(buffer[99], std::byte{'c'});
}

// The total bound holds across peers (frames for communicators that never form, from many
// claimed peers, cannot add up past it), while each peer keeps its 16 messages.
TEST(ReceiveMatcherTest, UnexpectedBytesOfAllPeersTogetherAreBounded) {
  // 10-byte messages: a peer may always hold 160 bytes; each may hold 1000, all together 1500.
  ReceiveMatcher matcher(/*max_unexpected_bytes=*/1000, /*message_overhead_bytes=*/0,
                         /*max_unexpected_bytes_total=*/1500);
  for (uint64_t seq = 0; seq < 100; ++seq) Deliver(matcher, "peer-a", Tag{.seq = seq}, 10, 'a');
  for (uint64_t seq = 0; seq < 50; ++seq) Deliver(matcher, "peer-b", Tag{.seq = seq}, 10, 'b');
  // 1500 held: peer-b's next waits, though peer-b is far below its own bound.
  auto blocked =
      std::async(std::launch::async, [&] { Deliver(matcher, "peer-b", Tag{.seq = 50}, 10, 'c'); });
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  // A third peer still gets its 16 messages past the total.
  for (uint64_t seq = 0; seq < 16; ++seq) Deliver(matcher, "peer-c", Tag{.seq = seq}, 10, 'd');
  // Taking one of peer-a's messages makes room for peer-b's.
  std::vector<std::byte> buffer(10);
  ASSERT_TRUE(matcher.Recv("peer-a", Tag{.seq = 0}, buffer, absl::Now() + absl::Seconds(5)).ok());
  // peer-c's 160 bytes count too: once they are taken, peer-b's message fits.
  for (uint64_t seq = 0; seq < 16; ++seq) {
    ASSERT_TRUE(
        matcher.Recv("peer-c", Tag{.seq = seq}, buffer, absl::Now() + absl::Seconds(5)).ok());
  }
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(matcher.Recv("peer-b", Tag{.seq = 50}, buffer, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(buffer[0], std::byte{'c'});
}

TEST(ReceiveMatcherTest, APostedReceiveIsDeliveredEvenWhenThePeersAllowanceIsFull) {
  ReceiveMatcher matcher(/*max_unexpected_bytes=*/1000);
  for (uint64_t seq = 0; seq < 16; ++seq) Deliver(matcher, kPeer, Tag{.seq = seq}, 100, 'a');
  std::vector<std::byte> buffer(100);
  auto receiver = std::async(std::launch::async, [&] {
    return matcher.Recv(kPeer, Tag{.seq = 99}, buffer, absl::Now() + absl::Seconds(10));
  });
  // Once the receive for seq 99 is posted, its message goes straight into it, past the full
  // allowance. (Until then this delivery waits.)
  Deliver(matcher, kPeer, Tag{.seq = 99}, 100, 'p');
  ASSERT_TRUE(receiver.get().ok());
  EXPECT_EQ(buffer[0], std::byte{'p'});
}

TEST(ReceiveMatcherTest, AbortingACommunicatorReleasesItsAllowanceAndWakesTheWaiter) {
  ReceiveMatcher matcher(/*max_unexpected_bytes=*/1000);
  // 16 messages of 800 fill the allowance (16 x 800 is above the bound): the 17th waits.
  for (uint64_t seq = 0; seq < 16; ++seq) {
    Deliver(matcher, kPeer, Tag{.comm = 1, .seq = seq}, 800, 'a');
  }
  auto blocked = std::async(std::launch::async,
                            [&] { Deliver(matcher, kPeer, Tag{.comm = 2, .seq = 1}, 800, 'b'); });
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  matcher.Abort(1, absl::CancelledError("gone"));
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::vector<std::byte> buffer(800);
  ASSERT_TRUE(
      matcher.Recv(kPeer, Tag{.comm = 2, .seq = 1}, buffer, absl::Now() + absl::Seconds(5)).ok());
  // A message far larger than the bound is admitted: 16 of its size always are.
  Deliver(matcher, kPeer, Tag{.comm = 2, .seq = 2}, 50000, 'z');
  std::vector<std::byte> large(50000);
  ASSERT_TRUE(
      matcher.Recv(kPeer, Tag{.comm = 2, .seq = 2}, large, absl::Now() + absl::Seconds(5)).ok());
}

}  // namespace
}  // namespace baton::transport
