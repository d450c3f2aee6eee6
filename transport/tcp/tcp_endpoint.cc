#include "transport/tcp/tcp_endpoint.h"

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

namespace baton::transport::tcp {

TcpEndpoint::~TcpEndpoint() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;  // a pong being written stops too
  }
  {
    absl::MutexLock lock(&pings_mu_);
    pings_stopping_ = true;
  }
  if (pong_thread_.joinable()) pong_thread_.join();
  StopWrites();
  send_credits_.Shutdown(ShutDownError());
  receive_credits_.Stop();
  if (credit_thread_.joinable()) credit_thread_.join();
  matcher_.Shutdown(ShutDownError());
  const uint64_t one = 1;
  if (write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("tcp endpoint {}: cannot wake the listener: errno {}", address_, errno);
  }
  if (listener_thread_.joinable()) listener_thread_.join();
  // No connection is accepted any more, and none is established (Sends fail once shutting_down_
  // is set). shutdown() wakes every reader with EOF and tells every peer that we are gone; the
  // fds are closed when their last owner lets go.
  std::list<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& conn : conns_) shutdown(conn->fd.get(), SHUT_RDWR);
    conns.swap(conns_);
  }
  // A reader thread may be waiting for its turn rather than in poll().
  for (const auto& conn : conns) {
    absl::MutexLock lock(&conn->read_mu);
    if (conn->ended.ok()) conn->ended = ShutDownError();
  }
  for (const auto& conn : conns) conn->reader.join();
}

void TcpEndpoint::Abort(uint64_t comm, const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    aborted_[comm] = reason.ok() ? absl::CancelledError("communicator aborted") : reason;
  }
  send_credits_.Abort(comm, reason);
  matcher_.Abort(comm, reason);
  AbortWrites(comm, reason.ok() ? absl::CancelledError("communicator aborted") : reason);
}

void TcpEndpoint::Forget(uint64_t comm) {
  {
    absl::MutexLock lock(&mu_);
    aborted_.erase(comm);
  }
  send_credits_.Forget(comm);
  matcher_.Forget(comm);
  ForgetWrites(comm);
}

std::vector<LinkStats> TcpEndpoint::Stats() const {
  absl::flat_hash_map<std::string, LinkStats> links = matcher_.RecvLinkStats();
  const absl::flat_hash_map<std::string, ExposureTable::PeerCounts> writes = exposures_.Counts();
  for (const auto& [peer, counts] : writes) {
    LinkStats& link = links[peer];
    link.peer = peer;
    link.rx_bytes += counts.rx_bytes;
    link.rx_messages += counts.rx_writes;
  }
  absl::flat_hash_map<std::string, uint64_t> retransmits;
  absl::flat_hash_map<std::string, uint64_t> checksum_failures;
  absl::flat_hash_map<std::string, uint64_t> seal_failures;
  {
    absl::MutexLock lock(&mu_);
    checksum_failures = checksum_failures_;
    seal_failures = seal_failures_;
    for (const auto& [peer, tx] : links_) {
      LinkStats& link = links[peer];
      link.peer = peer;
      link.tx_bytes = tx.tx_bytes;
      link.tx_messages = tx.tx_messages;
      link.errors = tx.errors;
    }
    retransmits = lost_retransmits_;
    for (const auto& [peer, streams] : out_) {
      LinkStats& link = links[peer];
      link.peer = peer;
      for (const auto& stream : streams) {
        if (!stream->connecting) retransmits[peer] += TcpRetransmits(stream->fd.get());
      }
    }
  }
  std::vector<LinkStats> result;
  result.reserve(links.size());
  for (auto& [peer, link] : links) {
    // Every TCP link has the counters, 0 until something happened (the receive side reports
    // refused messages, for the links it has seen).
    auto count = [](const absl::flat_hash_map<std::string, uint64_t>& counts,
                    const std::string& of) {
      auto it = counts.find(of);
      return it == counts.end() ? uint64_t{0} : it->second;
    };
    link.counters.push_back(
        LinkCounter{std::string(kChecksumFailuresCounter), count(checksum_failures, peer)});
    link.counters.push_back(
        LinkCounter{std::string(kSealFailuresCounter), count(seal_failures, peer)});
    auto written = writes.find(peer);
    link.counters.push_back(LinkCounter{std::string(kRefusedWritesCounter),
                                        written == writes.end() ? 0 : written->second.refused});
    auto it = retransmits.find(peer);
    link.counters.push_back(
        LinkCounter{std::string(kRetransmitsCounter), it == retransmits.end() ? 0 : it->second});
    for (const std::string_view shared : {kRefusedMessagesCounter, kCreditViolationsCounter}) {
      if (std::none_of(link.counters.begin(), link.counters.end(),
                       [shared](const LinkCounter& c) { return c.name == shared; })) {
        link.counters.push_back(LinkCounter{std::string(shared), 0});
      }
    }
    std::sort(link.counters.begin(), link.counters.end(),
              [](const LinkCounter& a, const LinkCounter& b) { return a.name < b.name; });
    result.push_back(std::move(link));
  }
  std::sort(result.begin(), result.end(),
            [](const LinkStats& a, const LinkStats& b) { return a.peer < b.peer; });
  return result;
}

absl::Status TcpEndpoint::SendBlockingErrorLocked(uint64_t comm) const {
  if (shutting_down_) return ShutDownError();
  if (auto it = aborted_.find(comm); it != aborted_.end()) return it->second;
  return absl::OkStatus();
}

bool TcpEndpoint::SendCancelled(uint64_t comm) const {
  absl::MutexLock lock(&mu_);
  return !SendBlockingErrorLocked(comm).ok();
}

void TcpEndpoint::CountSendLocked(const std::string& peer, uint64_t length, bool ok) {
  LinkStats& link = links_[peer];
  link.peer = peer;
  if (ok) {
    link.tx_bytes += length + kFrameHeaderBytes;
    ++link.tx_messages;
  } else {
    ++link.errors;
  }
}

void TcpEndpoint::CountError(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  LinkStats& link = links_[peer];
  link.peer = peer;
  ++link.errors;
}

absl::Status TcpEndpoint::IntegrityFailure(const std::string& peer, const FrameHeader& header) {
  const Tag& tag = header.tag;
  const bool sealed = header.in_records();
  {
    absl::MutexLock lock(&mu_);
    LinkStats& link = links_[peer];
    link.peer = peer;
    ++link.errors;
    ++(sealed ? seal_failures_ : checksum_failures_)[peer];
  }
  absl::Status error =
      sealed
          ? absl::DataLossError(absl::StrCat(
                header.sealed ? "a sealed" : "an authenticated", " message from peer ", peer, " (",
                TagToString(tag), ") did not open: it was altered, dropped or replayed on the way"))
          : absl::DataLossError(absl::StrCat("checksum mismatch on a message from peer ", peer,
                                             " (", TagToString(tag), "): the link corrupted data"));
  DataLostFrom(peer, error);
  return error;
}

void TcpEndpoint::DataLostFrom(const std::string& peer, const absl::Status& error) {
  peer_error_log_.Log(spdlog::level::err,
                      "tcp endpoint {}: closing every connection with peer {}: {}", address_, peer,
                      error.ToString());
  // What the peer sent may be lost from here on, and not only on this connection's stream: a
  // dropped frame shows only at the next one, whose tag is another receive's. So every receive
  // waiting for the peer fails now with this error, and so does every one posted before it
  // connects again; the peer's other connections are closed too, so that it must.
  matcher_.PeerLost(peer, error);
  WritesLost(peer, error);
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<Conn>& conn : conns_) {
      if (conn->peer == peer && !conn->finished && conn->fd.valid()) {
        shutdown(conn->fd.get(), SHUT_RDWR);
      }
    }
  }
}

}  // namespace baton::transport::tcp
