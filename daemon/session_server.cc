#include "daemon/session_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <span>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/session_protocol.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "daemon/session_messages.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {
namespace {

// Copies `text` into a fixed field, cut to fit, NUL-terminated.
template <size_t N>
void CopyField(char (&field)[N], absl::string_view text) {
  const size_t n = std::min(text.size(), N - 1);
  if (n > 0) std::memcpy(field, text.data(), n);  // an empty view may have no data at all
  field[n] = '\0';
}

}  // namespace

struct SessionServer::Connection {
  int fd = -1;
  baton::PeerCredentials peer;
  uint64_t session_id = 0;  // 0 until kOpen
  absl::Time accepted;
};

struct SessionServer::Ending {
  absl::Mutex mu;
  std::deque<uint64_t> queue ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<SessionServer>> SessionServer::Start(
    SessionServerOptions options, SessionRegistry* sessions,
    std::function<void(uint64_t session_id)> end_session) {
  BATON_ASSIGN_OR_RETURN(const int listen_fd, ListenUnix(options.path, options.mode));
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return BATON_ERRNO_STATUS("eventfd");
  }
  return std::unique_ptr<SessionServer>(
      new SessionServer(std::move(options), sessions, std::move(end_session), listen_fd, wake_fd));
}

SessionServer::SessionServer(SessionServerOptions options, SessionRegistry* sessions,
                             std::function<void(uint64_t)> end_session, int listen_fd, int wake_fd)
    : options_(std::move(options)),
      sessions_(sessions),
      end_session_(std::move(end_session)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      ending_(std::make_unique<Ending>()) {
  reaper_ = std::thread([this] {
    SetThreadName("baton-sess-end");
    Reap();
  });
  server_ = std::thread([this] {
    SetThreadName("baton-sessions");
    Serve();
  });
}

SessionServer::~SessionServer() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) spdlog::warn("cannot wake the session server");
  server_.join();
  {
    absl::MutexLock lock(&ending_->mu);
    ending_->stop = true;
  }
  reaper_.join();
  close(listen_fd_);
  close(wake_fd_);
  unlink(options_.path.c_str());
}

bool SessionServer::Allowed(const baton::PeerCredentials& peer) const {
  if (options_.allowed_uids.empty() && options_.allowed_gids.empty()) return true;
  if (peer.uid == 0) return true;
  return std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(), peer.uid) !=
             options_.allowed_uids.end() ||
         std::find(options_.allowed_gids.begin(), options_.allowed_gids.end(), peer.gid) !=
             options_.allowed_gids.end();
}

void SessionServer::EndPending(const Connection& connection) {
  --pending_;
  auto it = pending_per_uid_.find(connection.peer.uid);
  if (it != pending_per_uid_.end() && --it->second <= 0) pending_per_uid_.erase(it);
}

void SessionServer::EndLater(uint64_t session_id) {
  absl::MutexLock lock(&ending_->mu);
  ending_->queue.push_back(session_id);
}

void SessionServer::Reap() {
  while (true) {
    uint64_t session_id;
    {
      absl::MutexLock lock(&ending_->mu);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ending_->mu) {
        return !ending_->queue.empty() || ending_->stop;
      };
      ending_->mu.Await(absl::Condition(&ready));
      if (ending_->queue.empty()) return;  // stopping, nothing left
      session_id = ending_->queue.front();
      ending_->queue.pop_front();
    }
    end_session_(session_id);
  }
}

void SessionServer::Serve() {
  std::vector<Connection> connections;
  auto drop = [&](size_t i) {
    Connection& c = connections[i];
    if (c.session_id != 0) {
      // The token stops working before the client sees the connection close, so that a client
      // that closed its session and waited for that knows every later call fails; the teardown
      // (aborting its communicators) follows on the reaper.
      sessions_->Close(c.session_id).IgnoreError();
      --sessions_open_;
      EndLater(c.session_id);
    }
    close(c.fd);
    if (c.session_id == 0) EndPending(c);
    connections[i] = connections.back();
    connections.pop_back();
  };
  std::vector<pollfd> polled;
  while (true) {
    polled.assign({{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}});
    absl::Time next_expiry = absl::InfiniteFuture();
    for (const Connection& c : connections) {
      polled.push_back({c.fd, POLLIN, 0});
      if (c.session_id == 0) {
        next_expiry = std::min(next_expiry, c.accepted + options_.handshake_timeout);
      }
    }
    int timeout_ms = -1;
    if (next_expiry != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next_expiry - absl::Now()) + 1, 0, 1000));
    }
    const int ready = poll(polled.data(), polled.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("session server: poll failed (errno {}); no new sessions", errno);
      break;
    }
    if (ready > 0 && (polled[1].revents & POLLIN) != 0) break;
    // Connections first (their indices match `polled`), from the back so that dropping one
    // (which moves the last into its place) leaves the unvisited ones where they were.
    for (size_t i = connections.size(); i-- > 0;) {
      const short events = polled[i + 2].revents;
      if (events == 0) continue;
      if ((events & POLLIN) == 0 || !Handle(connections[i])) drop(i);
    }
    const absl::Time now = absl::Now();
    for (size_t i = connections.size(); i-- > 0;) {
      if (connections[i].session_id == 0 &&
          now >= connections[i].accepted + options_.handshake_timeout) {
        spdlog::debug("session socket: pid {} opened no session in {}; closed",
                      connections[i].peer.pid, absl::FormatDuration(options_.handshake_timeout));
        drop(i);
      }
    }
    if ((polled[0].revents & POLLIN) != 0) {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) {
            accept_error_log_.Log(spdlog::level::warn, "session socket: accept failed (errno {})",
                                  errno);
          }
          break;
        }
        absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(fd);
        if (!peer.ok()) {
          close(fd);
          continue;
        }
        // A connection waits for its session only while few others do, fewer still of its uid.
        auto of_uid = pending_per_uid_.find(peer->uid);
        const int uid_pending = of_uid == pending_per_uid_.end() ? 0 : of_uid->second;
        if (pending_.load() >= options_.max_pending ||
            uid_pending >= options_.max_pending_per_uid) {
          refused_log_.Log(spdlog::level::warn,
                           "session socket: refused pid {} uid {}: {} connections without a "
                           "session, {} of them of uid {} (max_pending_sessions {}, "
                           "max_pending_sessions_per_uid {})",
                           peer->pid, peer->uid, pending_.load(), uid_pending, peer->uid,
                           options_.max_pending, options_.max_pending_per_uid);
          close(fd);
          continue;
        }
        ++pending_;
        ++pending_per_uid_[peer->uid];
        connections.push_back(Connection{fd, *peer, 0, absl::Now()});
      }
    }
  }
  while (!connections.empty()) drop(connections.size() - 1);
}

bool SessionServer::Handle(Connection& connection) {
  session::Request received;
  std::vector<int> passed;
  absl::StatusOr<size_t> got = RecvPacketWithFds(connection.fd, &received, sizeof(received),
                                                 session::kMaxDeviceSegments, &passed);
  std::vector<device::UniqueFd> passed_fds;  // closed unless taken
  passed_fds.reserve(passed.size());
  for (int fd : passed) passed_fds.emplace_back(fd);
  if (!got.ok()) return absl::IsUnavailable(got.status());  // nothing to read after all
  if (*got == 0) return false;                              // closed
  session::Reply reply;
  auto answer = [&](const absl::Status& status) {
    reply.code = static_cast<int32_t>(status.code());
    CopyField(reply.message, status.message());
    return SendPacket(connection.fd, &reply, sizeof(reply)).ok();
  };
  absl::StatusOr<SessionRequest> request =
      DecodeSessionRequest(std::span(reinterpret_cast<const std::byte*>(&received), *got),
                           passed_fds.size(), connection.session_id != 0);
  if (!request.ok()) {
    answer(request.status());
    return false;
  }
  if (const auto* open = std::get_if<SessionOpen>(&*request)) {
    if (!Allowed(connection.peer)) {
      denied_log_.Log(spdlog::level::warn, "session socket: uid {} gid {} (pid {}) is not allowed",
                      connection.peer.uid, connection.peer.gid, connection.peer.pid);
      answer(absl::PermissionDeniedError(absl::StrCat("uid ", connection.peer.uid,
                                                      " may not use this daemon (allowed_uids, "
                                                      "allowed_gids)")));
      return false;
    }
    absl::StatusOr<SessionRegistry::Grant> grant =
        sessions_->Open(connection.peer, open->client_name);
    if (!grant.ok()) {
      denied_log_.Log(spdlog::level::warn, "session socket: pid {} uid {}: {}", connection.peer.pid,
                      connection.peer.uid, grant.status().ToString());
      answer(grant.status());
      return false;
    }
    connection.session_id = grant->id;
    EndPending(connection);
    ++sessions_open_;
    reply.session_id = grant->id;
    CopyField(reply.token, grant->token);
    CopyField(reply.node_name, options_.node_name);
    spdlog::debug("session {} opened by pid {} uid {} ({})", grant->id, connection.peer.pid,
                  connection.peer.uid, open->client_name);
    return answer(absl::OkStatus());
  }
  if (const auto* registration = std::get_if<SessionRegister>(&*request)) {
    if (!registration->has_memfd) {
      return answer(absl::InvalidArgumentError("a registration needs its memfd attached"));
    }
    absl::StatusOr<uint64_t> id = sessions_->RegisterBuffer(
        connection.session_id, passed_fds.front().get(), registration->size);
    if (!id.ok()) return answer(id.status());
    reply.buffer_id = *id;
    return answer(absl::OkStatus());
  }
  if (auto* registration = std::get_if<SessionRegisterDevice>(&*request)) {
    registration->memory.segment_fds = std::move(passed_fds);
    absl::StatusOr<uint64_t> id =
        sessions_->RegisterDeviceBuffer(connection.session_id, std::move(registration->memory));
    if (!id.ok()) return answer(id.status());
    reply.buffer_id = *id;
    return answer(absl::OkStatus());
  }
  if (auto* registration = std::get_if<SessionRegisterEvents>(&*request)) {
    for (size_t i = 0; i < passed_fds.size(); ++i) {
      registration->events[i].fd = std::move(passed_fds[i]);
    }
    absl::StatusOr<uint64_t> id =
        sessions_->RegisterEvents(connection.session_id, std::move(registration->events));
    if (!id.ok()) return answer(id.status());
    reply.buffer_id = *id;
    return answer(absl::OkStatus());
  }
  if (const auto* arena = std::get_if<SessionOpenArena>(&*request)) {
    if (!options_.open_arena) return answer(absl::UnimplementedError("no node arenas here"));
    absl::StatusOr<SessionServerOptions::Arena> opened =
        options_.open_arena(connection.session_id, arena->comm_tag, arena->rank);
    if (!opened.ok()) return answer(opened.status());
    const device::UniqueFd shared(opened->fd);  // closed once sent
    reply.arena_bytes = opened->bytes;
    reply.arena_rank = opened->rank;
    reply.code = static_cast<int32_t>(absl::StatusCode::kOk);
    return SendPacket(connection.fd, &reply, sizeof(reply), opened->fd).ok();
  }
  const auto& release = std::get<SessionRelease>(*request);
  return answer(sessions_->ReleaseBuffer(connection.session_id, release.buffer_id));
}

}  // namespace baton::daemon
