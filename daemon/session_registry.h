#pragma once

// Client sessions and the shared-memory buffers they registered. A session belongs to the process
// that opened it on the session socket (its pid, uid and gid as the kernel reported them) and is
// reached only with its token (common/session_protocol.h). A buffer stays mapped while any
// operation still uses it, even if its session goes away meanwhile.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory.h"
#include "common/unix_socket.h"

namespace baton::daemon {

// A resolved region of a registered buffer; `pin` keeps the mapping alive.
struct BufferRegion {
  std::shared_ptr<SharedMemory> pin;
  std::byte* data = nullptr;
};

struct SessionLimits {
  int max_sessions = 4096;             // on this daemon
  int max_sessions_per_uid = 1024;     // of one user
  int max_buffers_per_session = 4096;  // registered at once
};

class SessionRegistry {
 public:
  explicit SessionRegistry(SessionLimits limits = {}) : limits_(limits) {}

  struct Grant {
    uint64_t id = 0;
    std::string token;  // 32 hex digits
  };
  // A new session for the process `peer`. ResourceExhausted past a limit (naming it).
  absl::StatusOr<Grant> Open(const baton::PeerCredentials& peer, const std::string& client_name);
  // Forgets a session and its buffers. NotFound if unknown.
  absl::Status Close(uint64_t session_id);
  bool Exists(uint64_t session_id) const;
  int Count() const;

  // OK when `token` is session `session_id`'s; else Unauthenticated, the same for a wrong token
  // and an unknown session (which sessions exist is not revealed).
  absl::Status Authenticate(uint64_t session_id, const std::string& token) const;

  // Maps `size` bytes of the memfd `fd` (the caller keeps and closes it) as a buffer of the
  // session. InvalidArgument for memory that is not sealed or is too small; ResourceExhausted
  // past the per-session limit.
  absl::StatusOr<uint64_t> RegisterBuffer(uint64_t session_id, int fd, uint64_t size);
  absl::Status ReleaseBuffer(uint64_t session_id, uint64_t buffer_id);

  // The address of bytes [offset, offset + bytes) of a buffer. NotFound for an unknown session;
  // InvalidArgument for a buffer that is not registered or a range that does not fit in it.
  absl::StatusOr<BufferRegion> Resolve(uint64_t session_id, uint64_t buffer_id, uint64_t offset,
                                       uint64_t bytes) const;

 private:
  struct Session {
    baton::PeerCredentials peer;
    std::string client_name;
    std::string token;
    absl::flat_hash_map<uint64_t, std::shared_ptr<SharedMemory>> buffers;
  };

  const SessionLimits limits_;
  mutable absl::Mutex mu_;
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_buffer_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, int> sessions_per_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::daemon
