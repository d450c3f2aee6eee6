#include "daemon/session_registry.h"

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"
#include "common/status_macros.h"

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

absl::Status SessionRegistry::CheckRoom(uint64_t session_id) const {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  if (static_cast<int>(it->second.buffers.size()) >= limits_.max_buffers_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session ", session_id, " has ", it->second.buffers.size(),
                     " buffers, its limit (max_buffers_per_session)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SessionRegistry::Add(uint64_t session_id, Buffer buffer) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  const uint64_t id = next_buffer_id_++;
  it->second.buffers[id] = std::move(buffer);
  return id;
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterBuffer(uint64_t session_id, int fd,
                                                         uint64_t size) {
  {
    absl::MutexLock lock(&mu_);
    BATON_RETURN_IF_ERROR(CheckRoom(session_id));
  }
  // Map outside the lock: it is a system call and the memory is the client's.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory, SharedMemory::Map(fd, size));
  return Add(session_id, Buffer{std::move(memory), nullptr, nullptr});
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterDeviceBuffer(uint64_t session_id,
                                                               device::ExportedMemory memory) {
  {
    absl::MutexLock lock(&mu_);
    BATON_RETURN_IF_ERROR(CheckRoom(session_id));
  }
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node's batond has no GPU device, so it cannot map device memory (batond --device)");
  }
  // Importing maps the memory (driver calls): outside the lock.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Mapping> mapping,
                         device_->Import(std::move(memory)));
  return Add(session_id, Buffer{nullptr, std::move(mapping), nullptr});
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterEvents(uint64_t session_id,
                                                         std::vector<device::EventHandle> handles) {
  {
    absl::MutexLock lock(&mu_);
    BATON_RETURN_IF_ERROR(CheckRoom(session_id));
  }
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node's batond has no GPU device, so it cannot order operations with a stream "
        "(batond --device)");
  }
  auto events = std::make_shared<EventSet>();
  for (device::EventHandle& handle : handles) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event,
                           device_->OpenIpcEvent(std::move(handle)));
    events->push_back(std::move(event));
  }
  return Add(session_id, Buffer{nullptr, nullptr, std::move(events)});
}

absl::StatusOr<std::shared_ptr<EventSet>> SessionRegistry::Events(uint64_t session_id,
                                                                  uint64_t set_id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto set = it->second.buffers.find(set_id);
  if (set == it->second.buffers.end() || set->second.events == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(set_id, " is not an event set of session ", session_id));
  }
  return set->second.events;
}

absl::Status SessionRegistry::ReleaseBuffer(uint64_t session_id, uint64_t buffer_id) {
  Buffer released;  // unmapped after the lock is dropped
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto buffer = it->second.buffers.find(buffer_id);
  if (buffer == it->second.buffers.end()) {
    return absl::NotFoundError(absl::StrCat("unknown buffer ", buffer_id));
  }
  released = std::move(buffer->second);
  it->second.buffers.erase(buffer);
  return absl::OkStatus();
}

absl::StatusOr<BufferRegion> SessionRegistry::Resolve(uint64_t session_id, uint64_t buffer_id,
                                                      uint64_t offset, uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto buffer = it->second.buffers.find(buffer_id);
  if (buffer == it->second.buffers.end() || buffer->second.events != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("buffer ", buffer_id, " is not registered"));
  }
  const Buffer& found = buffer->second;
  const uint64_t size = found.host != nullptr ? found.host->size() : found.device->size();
  if (offset > size || bytes > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("range [", offset, ", ", offset, "+", bytes,
                                                   ") is outside buffer ", buffer_id, " of ", size,
                                                   " bytes"));
  }
  if (found.host != nullptr) {
    return BufferRegion{found.host, static_cast<std::byte*>(found.host->data()) + offset,
                        transport::MemoryKind::kHost, -1, found.host};
  }
  return BufferRegion{found.device, static_cast<std::byte*>(found.device->data()) + offset,
                      transport::MemoryKind::kDevice, found.device->ordinal(), nullptr};
}

}  // namespace baton::daemon
