#include "daemon/session_registry.h"

#include "absl/strings/str_cat.h"

namespace baton::daemon {
namespace {

absl::Status UnknownSession(uint64_t session_id) {
  return absl::NotFoundError(absl::StrCat("unknown session ", session_id));
}

}  // namespace

uint64_t SessionRegistry::Open(int64_t pid, const std::string& client_name) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_session_id_++;
  sessions_[id] = Session{pid, client_name, {}};
  return id;
}

absl::Status SessionRegistry::Close(uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  if (sessions_.erase(session_id) == 0) return UnknownSession(session_id);
  return absl::OkStatus();
}

bool SessionRegistry::Exists(uint64_t session_id) const {
  absl::MutexLock lock(&mu_);
  return sessions_.contains(session_id);
}

int SessionRegistry::Count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterBuffer(uint64_t session_id,
                                                         const std::string& shm_name,
                                                         uint64_t size) {
  if (!Exists(session_id)) return UnknownSession(session_id);
  // Map outside the lock: it is a system call and the object is the client's.
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Open(shm_name, size);
  if (!memory.ok()) return memory.status();
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  const uint64_t id = next_buffer_id_++;
  it->second.buffers[id] = std::move(*memory);
  return id;
}

absl::Status SessionRegistry::ReleaseBuffer(uint64_t session_id, uint64_t buffer_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  if (it->second.buffers.erase(buffer_id) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown buffer ", buffer_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<BufferRegion> SessionRegistry::Resolve(uint64_t session_id, uint64_t buffer_id,
                                                      uint64_t offset, uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto buffer = it->second.buffers.find(buffer_id);
  if (buffer == it->second.buffers.end()) {
    return absl::InvalidArgumentError(absl::StrCat("buffer ", buffer_id, " is not registered"));
  }
  const uint64_t size = buffer->second->size();
  if (offset > size || bytes > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("range [", offset, ", ", offset, "+", bytes,
                                                   ") is outside buffer ", buffer_id, " of ", size,
                                                   " bytes"));
  }
  return BufferRegion{buffer->second, static_cast<std::byte*>(buffer->second->data()) + offset};
}

}  // namespace baton::daemon
