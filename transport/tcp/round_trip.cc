#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

absl::StatusOr<absl::Duration> TcpEndpoint::RoundTrip(const std::string& peer,
                                                      absl::Time deadline) {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&pings_mu_);
    id = next_ping_++;
    pings_[id] = absl::InfinitePast();
  }
  // The identifier is opaque to the peer, which echoes its bytes: host byte order will do.
  std::array<std::byte, kPingPayloadBytes> payload;
  static_assert(sizeof(id) == kPingPayloadBytes);
  std::memcpy(payload.data(), &id, sizeof(id));
  const OutMessage ping{Tag{}, payload};
  const absl::Time start = absl::Now();
  const absl::Status sent = SendFrames(peer, FrameType::kPing, std::span(&ping, 1), deadline);
  // The pong is read as it comes, not when a reader's linger ends: the time is the link's.
  const AnswerWait waiting(answers_awaited_);
  if (sent.ok()) StopLingering();
  absl::MutexLock lock(&pings_mu_);
  auto answered = [this, id]() ABSL_SHARED_LOCKS_REQUIRED(pings_mu_) {
    return pings_stopping_ || pings_[id] != absl::InfinitePast();
  };
  if (sent.ok()) pings_mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
  const absl::Time pong = pings_[id];
  pings_.erase(id);
  if (!sent.ok()) return sent;
  if (pong != absl::InfinitePast()) return pong - start;
  if (pings_stopping_) return ShutDownError();
  return absl::DeadlineExceededError(absl::StrCat("no answer from peer ", peer,
                                                  " to a ping within ",
                                                  absl::FormatDuration(absl::Now() - start)));
}

absl::Status TcpEndpoint::ReadPingOrPong(Conn& conn, const FrameHeader& header, absl::Time limit) {
  std::array<std::byte, kPingPayloadBytes> payload;
  BATON_RETURN_IF_ERROR(ReadControlPayload(conn, header, payload, limit));
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&pings_mu_);
  if (header.type == FrameType::kPing) {
    // Bounded, whatever a peer sends: a ping beyond it goes unanswered (its sender times out).
    constexpr size_t kMaxPongsDue = 64;
    if (!pings_stopping_ && pongs_due_.size() < kMaxPongsDue) {
      pongs_due_.emplace_back(conn.peer, payload);
    }
    return absl::OkStatus();
  }
  uint64_t id = 0;
  std::memcpy(&id, payload.data(), sizeof(id));
  // A pong for a ping that gave up is dropped.
  if (auto it = pings_.find(id); it != pings_.end()) it->second = now;
  return absl::OkStatus();
}

void TcpEndpoint::PongLoop() {
  // Long enough to wait behind bulk data on the connection: a pong cut short would break it.
  constexpr absl::Duration kPongTimeout = absl::Seconds(30);
  absl::MutexLock lock(&pings_mu_);
  while (true) {
    auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(pings_mu_) {
      return pings_stopping_ || !pongs_due_.empty();
    };
    pings_mu_.Await(absl::Condition(&due));
    if (pings_stopping_) return;
    auto [peer, payload] = std::move(pongs_due_.front());
    pongs_due_.pop_front();
    pings_mu_.Unlock();
    const OutMessage pong{Tag{}, payload};
    const absl::Status sent =
        SendFrames(peer, FrameType::kPong, std::span(&pong, 1), absl::Now() + kPongTimeout);
    if (!sent.ok()) {
      spdlog::debug("tcp endpoint {}: no pong to peer {}: {}", address_, peer, sent.ToString());
    }
    pings_mu_.Lock();
  }
}

}  // namespace baton::transport::tcp
