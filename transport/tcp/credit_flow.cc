#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

absl::Status TcpEndpoint::WriteFirstGrant(Conn& conn, absl::Time deadline) {
  if (!conn.first_grant.has_value()) return absl::OkStatus();
  const CreditPayload payload = EncodeCredit(*conn.first_grant);
  const OutMessage grant{Tag{}, payload};
  size_t written = 0;
  absl::Status status = WriteFramesOn(
      conn, FrameType::kCredit, std::span(&grant, 1), /*checksum=*/false, deadline,
      [] { return false; }, [] {}, &written);
  if (status.ok()) conn.first_grant.reset();
  return status;
}

absl::StatusOr<uint64_t> TcpEndpoint::AwaitCreditEpoch(Conn& conn, const Tag& tag,
                                                       absl::Time deadline) {
  while (true) {
    {
      absl::MutexLock lock(&conn.read_mu);
      auto known = [&conn]() ABSL_SHARED_LOCKS_REQUIRED(conn.read_mu) {
        return conn.credit_epoch != 0 || !conn.ended.ok();
      };
      // The peer sends its first credit frame as soon as the handshake is done: a short wait, in
      // slices, so that an abort shows.
      conn.read_mu.AwaitWithDeadline(absl::Condition(&known),
                                     std::min(deadline, absl::Now() + kReadForReceiveSlice));
      if (conn.credit_epoch != 0) return conn.credit_epoch;
      if (!conn.ended.ok()) {
        return absl::UnavailableError(absl::StrCat("the connection with peer ", conn.peer,
                                                   " ended before its first credit frame"));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      BATON_RETURN_IF_ERROR(SendBlockingErrorLocked(tag.comm));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("send to peer ", conn.peer, " (", TagToString(tag),
                       ") timed out waiting for the peer's first credit on a new connection"));
    }
  }
}

absl::StatusOr<TcpEndpoint::CreditAction> TcpEndpoint::TakeCredit(
    const std::string& peer, const std::shared_ptr<Conn>& stream,
    std::span<const OutMessage> messages, absl::Time deadline, SendCredit& credit) {
  const Tag& tag = messages.back().tag;
  credit.write_epoch.reset();
  absl::StatusOr<uint64_t> epoch = AwaitCreditEpoch(*stream, tag, deadline);
  if (!epoch.ok()) {
    const bool ended = absl::IsUnavailable(epoch.status());
    ReleaseStream(peer, stream, /*healthy=*/!ended);
    if (ended) return CreditAction::kDead;
    if (credit.paid_epoch.has_value())
      send_credits_.Refund(peer, *credit.paid_epoch, credit.charge);
    return epoch.status();
  }
  const uint64_t eager_max = send_credits_.EagerMax(peer, *epoch).value_or(0);
  uint64_t charge = 0;
  bool rendezvous = false;
  for (const OutMessage& message : messages) {
    const uint64_t one = CreditCharge(message.data.size());
    rendezvous = rendezvous || one > eager_max;
    charge = one > UINT64_MAX - charge ? UINT64_MAX : charge + one;
  }
  if (messages.size() > 1 && (rendezvous || charge > eager_max)) {
    // Each message takes its own credit or clear-to-send: never more at once than eager_max,
    // which is what keeps credit from deadlocking (flow_control.h).
    ReleaseStream(peer, stream, /*healthy=*/true);
    if (credit.paid_epoch.has_value())
      send_credits_.Refund(peer, *credit.paid_epoch, credit.charge);
    return CreditAction::kOneByOne;
  }
  if (rendezvous) {
    if (credit.cleared) return CreditAction::kWrite;
    // Waits without holding the connection: the clear-to-send comes when the receiver posts, and
    // meanwhile this endpoint's own credit and clear-to-send frames must get through to the peer.
    ReleaseStream(peer, stream, /*healthy=*/true);
    const AnswerWait waiting(answers_awaited_);
    StopLingering();
    bool retry = false;
    BATON_RETURN_IF_ERROR(send_credits_.AwaitClearToSend(peer, tag, deadline, &retry));
    credit.cleared = !retry;
    return CreditAction::kRetry;
  }
  if (credit.paid_epoch.has_value()) {
    const uint64_t paid = *credit.paid_epoch;
    credit.paid_epoch.reset();
    if (paid == *epoch) {
      credit.write_epoch = paid;
      return CreditAction::kWrite;
    }
    // Paid in an epoch that has ended (the link came back since): that credit is of no use here.
    send_credits_.Refund(peer, paid, credit.charge);
  }
  credit.charge = charge;
  if (send_credits_.TryTake(peer, *epoch, charge)) {
    credit.write_epoch = *epoch;
    return CreditAction::kWrite;
  }
  // As for a clear-to-send, wait without holding the connection.
  ReleaseStream(peer, stream, /*healthy=*/true);
  const AnswerWait waiting(answers_awaited_);
  StopLingering();
  bool retry = false;
  BATON_RETURN_IF_ERROR(send_credits_.Take(peer, *epoch, tag, charge, deadline, &retry));
  if (!retry) credit.paid_epoch = *epoch;
  return CreditAction::kRetry;
}

absl::Status TcpEndpoint::ReadCreditFrame(Conn& conn, const FrameHeader& header, absl::Time limit) {
  std::array<std::byte, std::max(kCreditPayloadBytes, kClearToSendPayloadBytes)> payload{};
  BATON_RETURN_IF_ERROR(
      ReadControlPayload(conn, header, ByteSpan(payload.data(), header.payload_bytes), limit));
  if (header.type == FrameType::kClearToSend) {
    ClearToSendPayload length;
    std::copy_n(payload.begin(), length.size(), length.begin());
    send_credits_.ClearToSend(conn.peer, ClearToSend{header.tag, DecodeClearToSend(length)});
    return absl::OkStatus();
  }
  CreditPayload bytes;
  std::copy_n(payload.begin(), bytes.size(), bytes.begin());
  const CreditGrant grant = DecodeCredit(bytes);
  if (grant.epoch == 0) return absl::OkStatus();  // no such epoch: ignored
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&conn.read_mu);
    epoch = conn.credit_epoch;
  }
  // A connection belongs to the epoch of its first credit frame; a grant of another epoch on it
  // is stale (the link came back since it was queued) and ignored.
  if (epoch != 0 && epoch != grant.epoch) return absl::OkStatus();
  send_credits_.Grant(conn.peer, grant);
  if (epoch == 0) {
    absl::MutexLock lock(&conn.read_mu);
    conn.credit_epoch = grant.epoch;
  }
  return absl::OkStatus();
}

void TcpEndpoint::CreditLoop() {
  // As a pong: long enough to wait behind bulk data on the connection.
  constexpr absl::Duration kCreditTimeout = absl::Seconds(30);
  while (true) {
    ReceiveCredits::Outgoing outgoing = receive_credits_.TakeOutgoing(absl::InfiniteFuture());
    if (outgoing.empty()) return;  // stopped
    for (const std::string& peer : outgoing.grants) {
      const std::optional<CreditGrant> grant = receive_credits_.Current(peer);
      if (!grant.has_value()) continue;  // the link is gone: its next epoch starts afresh
      const CreditPayload payload = EncodeCredit(*grant);
      const OutMessage frame{Tag{}, payload};
      const absl::Status sent =
          SendFrames(peer, FrameType::kCredit, std::span(&frame, 1), absl::Now() + kCreditTimeout);
      if (!sent.ok()) {
        spdlog::debug("tcp endpoint {}: no credit to peer {}: {}", address_, peer, sent.ToString());
      }
    }
    for (const auto& [peer, clear] : outgoing.clear_to_send) {
      const ClearToSendPayload payload = EncodeClearToSend(clear.length);
      const OutMessage frame{clear.tag, payload};
      const absl::Status sent = SendFrames(peer, FrameType::kClearToSend, std::span(&frame, 1),
                                           absl::Now() + kCreditTimeout);
      if (!sent.ok()) {
        spdlog::debug("tcp endpoint {}: no clear-to-send to peer {}: {}", address_, peer,
                      sent.ToString());
      }
    }
  }
}

}  // namespace baton::transport::tcp
