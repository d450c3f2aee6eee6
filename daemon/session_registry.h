#pragma once

// Client sessions and the shared-memory buffers they registered. A buffer stays mapped while any
// operation still uses it, even if its session goes away meanwhile.

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

namespace baton::daemon {

// A resolved region of a registered buffer; `pin` keeps the mapping alive.
struct BufferRegion {
  std::shared_ptr<SharedMemory> pin;
  std::byte* data = nullptr;
};

class SessionRegistry {
 public:
  uint64_t Open(int64_t pid, const std::string& client_name);
  // Forgets a session and its buffers. NotFound if unknown.
  absl::Status Close(uint64_t session_id);
  bool Exists(uint64_t session_id) const;
  int Count() const;

  // Maps the client's shared-memory object. NotFound for an unknown session or object;
  // InvalidArgument if the object is smaller than `size`.
  absl::StatusOr<uint64_t> RegisterBuffer(uint64_t session_id, const std::string& shm_name,
                                          uint64_t size);
  absl::Status ReleaseBuffer(uint64_t session_id, uint64_t buffer_id);

  // The address of bytes [offset, offset + bytes) of a buffer. NotFound for an unknown session;
  // InvalidArgument for a buffer that is not registered or a range that does not fit in it.
  absl::StatusOr<BufferRegion> Resolve(uint64_t session_id, uint64_t buffer_id, uint64_t offset,
                                       uint64_t bytes) const;

 private:
  struct Session {
    int64_t pid = 0;
    std::string client_name;
    absl::flat_hash_map<uint64_t, std::shared_ptr<SharedMemory>> buffers;
  };

  mutable absl::Mutex mu_;
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_buffer_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::daemon
