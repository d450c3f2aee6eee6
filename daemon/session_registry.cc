#include "daemon/session_registry.h"

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"

namespace baton::daemon {
namespace {

absl::Status UnknownSession(uint64_t session_id) {
  return absl::NotFoundError(absl::StrCat("unknown session ", session_id));
}

}  // namespace

absl::StatusOr<SessionRegistry::Grant> SessionRegistry::Open(const baton::PeerCredentials& peer,
                                                             const std::string& client_name) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(sessions_.size()) >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this daemon has ", sessions_.size(), " sessions, its limit (max_sessions)"));
  }
  int& of_uid = sessions_per_uid_[peer.uid];
  if (of_uid >= limits_.max_sessions_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " has ", of_uid, " sessions, its limit (max_sessions_per_uid)"));
  }
  ++of_uid;
  Grant grant{next_session_id_++, SecureRandomHex(16)};
  sessions_[grant.id] = Session{peer, client_name, grant.token, {}};
  return grant;
}

absl::Status SessionRegistry::Close(uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto uid = sessions_per_uid_.find(it->second.peer.uid);
  if (uid != sessions_per_uid_.end() && --uid->second <= 0) sessions_per_uid_.erase(uid);
  sessions_.erase(it);
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

absl::Status SessionRegistry::Authenticate(uint64_t session_id, const std::string& token) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || !ConstantTimeEquals(it->second.token, token)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "session ", session_id, " is not this caller's (a missing or wrong session token)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterBuffer(uint64_t session_id, int fd,
                                                         uint64_t size) {
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return UnknownSession(session_id);
    if (static_cast<int>(it->second.buffers.size()) >= limits_.max_buffers_per_session) {
      return absl::ResourceExhaustedError(
          absl::StrCat("session ", session_id, " has ", it->second.buffers.size(),
                       " buffers, its limit (max_buffers_per_session)"));
    }
  }
  // Map outside the lock: it is a system call and the memory is the client's.
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Map(fd, size);
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
