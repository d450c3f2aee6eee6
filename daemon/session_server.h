#pragma once

// The daemon's side of the session socket (common/session_protocol.h): one thread that accepts
// connections, learns each peer's credentials from the kernel, opens a session per connection,
// maps the memfds a session registers, and ends the session when its connection closes. A
// connection that has not opened a session within the handshake timeout is closed, and so is one
// that sends anything malformed; connections beyond the session limits are refused with the
// reason. No thread per session: one poll loop serves them all.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/log_limiter.h"
#include "daemon/session_registry.h"

namespace baton::daemon {

struct SessionServerOptions {
  std::string path;  // the socket file
  int mode = 0660;
  std::string node_name;
  absl::Duration handshake_timeout = absl::Seconds(5);
  // Connections accepted but without a session yet, in all and of one uid; more are closed at
  // once, so that one user's idle connections cannot keep the others from opening sessions.
  int max_pending = 1024;
  int max_pending_per_uid = 64;
  // When non-empty, only processes of these uids or with these primary gids may open sessions.
  std::vector<uid_t> allowed_uids;
  std::vector<gid_t> allowed_gids;
  // kOpenArena: the node arena of a communicator for a rank the session holds (Node::OpenArena).
  // The server sends the descriptor with the reply, then closes it.
  struct Arena {
    int fd = -1;
    uint64_t bytes = 0;
    int rank = 0;  // the rank's place among the arena's ranks
  };
  std::function<absl::StatusOr<Arena>(uint64_t session_id, uint64_t comm_tag, int rank)> open_arena;
};

class SessionServer {
 public:
  // When a session's connection closes, the session is closed in `sessions` at once (its token
  // stops working before the client sees the close), and `end_session` runs for it on a thread
  // of its own, in order, to tear down what it owned.
  static absl::StatusOr<std::unique_ptr<SessionServer>> Start(
      SessionServerOptions options, SessionRegistry* sessions,
      std::function<void(uint64_t session_id)> end_session);
  // Stops serving and ends every session still connected.
  ~SessionServer();

  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // Connections with a session, and ones still in their handshake.
  int sessions() const { return sessions_open_.load(); }
  int pending() const { return pending_.load(); }

 private:
  struct Connection;
  SessionServer(SessionServerOptions options, SessionRegistry* sessions,
                std::function<void(uint64_t)> end_session, int listen_fd, int wake_fd);
  void Serve();
  void Reap();
  // Handles one readable connection; false when it must be closed.
  bool Handle(Connection& connection);
  bool Allowed(const baton::PeerCredentials& peer) const;
  // The connection no longer waits for its session (it opened one, or is closed).
  void EndPending(const Connection& connection);
  void EndLater(uint64_t session_id);

  const SessionServerOptions options_;
  SessionRegistry* const sessions_;
  const std::function<void(uint64_t)> end_session_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd: wakes Serve to stop
  std::atomic<int> sessions_open_{0};
  std::atomic<int> pending_{0};
  // Connections without a session per uid; only the serving thread touches it.
  absl::flat_hash_map<uid_t, int> pending_per_uid_;
  // What a local process can cause as often as it likes is logged a few times a minute at most.
  LogLimiter refused_log_{5, absl::Minutes(1)};
  LogLimiter denied_log_{10, absl::Minutes(1)};
  LogLimiter accept_error_log_{5, absl::Minutes(1)};
  std::thread server_;
  // Sessions to end, in order, off the serving thread (ending one may take a while).
  struct Ending;
  std::unique_ptr<Ending> ending_;
  std::thread reaper_;
};

}  // namespace baton::daemon
