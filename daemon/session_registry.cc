#include "daemon/session_registry.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"
#include "common/status_macros.h"

namespace baton::daemon {
namespace {

absl::Status UnknownSession(uint64_t session_id) {
  return absl::NotFoundError(absl::StrCat("unknown session ", session_id));
}

// "4 TiB", "12 KiB", "4097 bytes": sizes in messages, as exact as the value.
std::string Bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t unit = 0;
  while (bytes != 0 && bytes % 1024 == 0 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, " ", kUnits[unit]);
}

// A host buffer maps whole pages, and at least one (SharedMemory::Map).
uint64_t MappedBytes(uint64_t size) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (size == 0) return page;
  if (size > UINT64_MAX - (page - 1)) return UINT64_MAX;  // refused by any limit
  return (size + page - 1) / page * page;
}

// An object that owns `T` and something destroyed after it (members go in reverse order), handed
// out as a plain shared_ptr<T>.
template <typename T, typename After>
struct Holder {
  After after;
  std::unique_ptr<T> object;
};
template <typename T, typename After>
std::shared_ptr<T> HoldWith(std::unique_ptr<T> object, After after) {
  T* raw = object.get();
  auto holder =
      std::make_shared<Holder<T, After>>(Holder<T, After>{std::move(after), std::move(object)});
  return std::shared_ptr<T>(std::move(holder), raw);
}

}  // namespace

// Counts under a lock of its own, which is taken last (under the registry's, or alone from a
// deleter on whichever thread drops the last pin of a buffer).
class SessionRegistry::Ledger {
 public:
  explicit Ledger(const SessionLimits& limits) : limits_(limits) {}

  // Adds `buffers` and `bytes` to the session's, the uid's and the total usage, or changes
  // nothing and names the first limit it would pass.
  absl::Status Charge(uint64_t session_id, uid_t uid, int64_t buffers, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    MappedUsage& session = sessions_[session_id];
    MappedUsage& of_uid = uids_[uid];
    absl::Status status = Check(session, buffers, bytes, limits_.max_buffers_per_session,
                                limits_.max_mapped_bytes_per_session,
                                absl::StrCat("session ", session_id), "_per_session");
    if (status.ok()) {
      status = Check(of_uid, buffers, bytes, limits_.max_buffers_per_uid,
                     limits_.max_mapped_bytes_per_uid, absl::StrCat("uid ", uid), "_per_uid");
    }
    if (status.ok()) {
      status = Check(total_, buffers, bytes, limits_.max_buffers, limits_.max_mapped_bytes,
                     "this daemon's sessions together", "");
    }
    if (!status.ok()) {
      Forget(session_id, uid);
      return status;
    }
    for (MappedUsage* usage : {&session, &of_uid, &total_}) {
      usage->buffers += buffers;
      usage->bytes += bytes;
    }
    return absl::OkStatus();
  }

  void Refund(uint64_t session_id, uid_t uid, int64_t buffers, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    for (MappedUsage* usage : {&sessions_[session_id], &uids_[uid], &total_}) {
      usage->buffers -= buffers;
      usage->bytes -= bytes;
    }
    Forget(session_id, uid);
  }

  MappedUsage OfSession(uint64_t session_id) const {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    return it == sessions_.end() ? MappedUsage{} : it->second;
  }
  MappedUsage OfUid(uid_t uid) const {
    absl::MutexLock lock(&mu_);
    auto it = uids_.find(uid);
    return it == uids_.end() ? MappedUsage{} : it->second;
  }
  MappedUsage Total() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  static absl::Status Check(const MappedUsage& used, int64_t buffers, uint64_t bytes,
                            int max_buffers, uint64_t max_bytes, const std::string& who,
                            absl::string_view suffix) {
    if (buffers > 0 && used.buffers + buffers > max_buffers) {
      return absl::ResourceExhaustedError(
          absl::StrCat(who, " has ", used.buffers, " buffers registered, its limit (max_buffers",
                       suffix, " = ", max_buffers, ")"));
    }
    if (bytes > max_bytes || used.bytes > max_bytes - bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          who, " has ", Bytes(used.bytes), " mapped; ", Bytes(bytes),
          " more would pass its limit (max_mapped_bytes", suffix, " = ", Bytes(max_bytes), ")"));
    }
    return absl::OkStatus();
  }

  // Drops the entries that count nothing any more, so that the maps hold only live ones.
  void Forget(uint64_t session_id, uid_t uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto session = sessions_.find(session_id);
    if (session != sessions_.end() && session->second.buffers == 0 && session->second.bytes == 0) {
      sessions_.erase(session);
    }
    auto of_uid = uids_.find(uid);
    if (of_uid != uids_.end() && of_uid->second.buffers == 0 && of_uid->second.bytes == 0) {
      uids_.erase(of_uid);
    }
  }

  const SessionLimits limits_;
  mutable absl::Mutex mu_;
  MappedUsage total_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, MappedUsage> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, MappedUsage> uids_ ABSL_GUARDED_BY(mu_);
};

class SessionRegistry::Share {
 public:
  Share(std::shared_ptr<Ledger> ledger, uint64_t session_id, uid_t uid, uint64_t bytes)
      : ledger_(std::move(ledger)), session_id_(session_id), uid_(uid), bytes_(bytes) {}
  ~Share() { ledger_->Refund(session_id_, uid_, 1, bytes_); }
  Share(const Share&) = delete;
  Share& operator=(const Share&) = delete;

  // Charges `bytes` more (the mapping turned out larger than asked for); the limit's error
  // otherwise, charging nothing.
  absl::Status Grow(uint64_t bytes) {
    BATON_RETURN_IF_ERROR(ledger_->Charge(session_id_, uid_, 0, bytes));
    bytes_ += bytes;
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<Ledger> ledger_;
  const uint64_t session_id_;
  const uid_t uid_;
  uint64_t bytes_;
};

SessionRegistry::SessionRegistry(SessionLimits limits, device::Device* device,
                                 transport::Endpoint* data_plane)
    : limits_(limits),
      device_(device),
      data_plane_(data_plane),
      ledger_(std::make_shared<Ledger>(limits)) {}

absl::StatusOr<std::shared_ptr<transport::MemoryRegion>> SessionRegistry::RegisterWithDataPlane(
    transport::ByteSpan bytes, transport::MemoryKind kind, std::shared_ptr<void> mapping) const {
  if (data_plane_ == nullptr || bytes.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> region =
      data_plane_->RegisterMemory(bytes, kind);
  if (absl::IsInvalidArgument(region.status())) return nullptr;  // staged through host memory
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat("could not register ", bytes.size(), " bytes of ",
                                     transport::MemoryKindName(kind),
                                     " memory with the data plane: ", region.status().message()));
  }
  return HoldWith(*std::move(region), std::move(mapping));
}

SessionRegistry::~SessionRegistry() = default;

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
  Session closed;  // its buffers are unmapped (and their shares given back) after the lock
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  auto uid = sessions_per_uid_.find(it->second.peer.uid);
  if (uid != sessions_per_uid_.end() && --uid->second <= 0) sessions_per_uid_.erase(uid);
  GiveBackRanksLocked(it->second, it->second.ranks);
  closed = std::move(it->second);
  sessions_.erase(it);
  return absl::OkStatus();
}

absl::Status SessionRegistry::HoldRank(uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  Session& session = it->second;
  int& of_uid = ranks_per_uid_[session.peer.uid];
  const auto refuse = [](absl::string_view holder, int held, absl::string_view limit, int value) {
    return absl::ResourceExhaustedError(absl::StrCat(
        holder, " holds ", held, " communicator ranks, its limit (", limit, " = ", value, ")"));
  };
  absl::Status refused;
  if (session.ranks >= limits_.max_ranks_per_session) {
    refused = refuse(absl::StrCat("session ", session_id), session.ranks, "max_ranks_per_session",
                     limits_.max_ranks_per_session);
  } else if (of_uid >= limits_.max_ranks_per_uid) {
    refused = refuse(absl::StrCat("uid ", session.peer.uid), of_uid, "max_ranks_per_uid",
                     limits_.max_ranks_per_uid);
  } else if (ranks_ >= limits_.max_ranks) {
    refused = refuse("this daemon", ranks_, "max_ranks", limits_.max_ranks);
  }
  if (!refused.ok()) {
    if (of_uid == 0) ranks_per_uid_.erase(session.peer.uid);
    return refused;
  }
  ++session.ranks;
  ++of_uid;
  ++ranks_;
  return absl::OkStatus();
}

void SessionRegistry::ReleaseRanks(uint64_t session_id, int ranks) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;  // Close gave back what it held
  GiveBackRanksLocked(it->second, std::min(ranks, it->second.ranks));
}

void SessionRegistry::GiveBackRanksLocked(Session& session, int ranks) {
  if (ranks <= 0) return;
  session.ranks -= ranks;
  ranks_ -= ranks;
  auto uid = ranks_per_uid_.find(session.peer.uid);
  if (uid != ranks_per_uid_.end() && (uid->second -= ranks) <= 0) ranks_per_uid_.erase(uid);
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

absl::StatusOr<uid_t> SessionRegistry::UidOf(uint64_t session_id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return UnknownSession(session_id);
  return it->second.peer.uid;
}

absl::StatusOr<std::unique_ptr<SessionRegistry::Share>> SessionRegistry::Charge(
    uint64_t session_id, uint64_t bytes) const {
  BATON_ASSIGN_OR_RETURN(const uid_t uid, UidOf(session_id));
  BATON_RETURN_IF_ERROR(ledger_->Charge(session_id, uid, 1, bytes));
  return std::make_unique<Share>(ledger_, session_id, uid, bytes);
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
  // Charged before mapping, so that a refused buffer is never mapped at all, and several
  // registrations at once cannot pass a limit together.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Share> share, Charge(session_id, MappedBytes(size)));
  // Map outside the lock: it is a system call and the memory is the client's.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory, SharedMemory::Map(fd, size));
  std::shared_ptr<SharedMemory> host = HoldWith(std::move(memory), std::move(share));
  BATON_ASSIGN_OR_RETURN(
      std::shared_ptr<transport::MemoryRegion> registered,
      RegisterWithDataPlane(
          transport::ByteSpan(static_cast<std::byte*>(host->data()), host->size()),
          transport::MemoryKind::kHost, host));
  return Add(session_id, Buffer{std::move(host), nullptr, nullptr, std::move(registered)});
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterDeviceBuffer(uint64_t session_id,
                                                               device::ExportedMemory memory) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node's batond has no GPU device, so it cannot map device memory (batond --device)");
  }
  // The size the export claims, before anything is mapped; the mapping's own size after.
  const uint64_t claimed = std::max<uint64_t>(memory.size, 1);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Share> share, Charge(session_id, claimed));
  // Importing maps the memory (driver calls): outside the lock.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Mapping> mapping,
                         device_->Import(std::move(memory)));
  if (mapping->size() > claimed) BATON_RETURN_IF_ERROR(share->Grow(mapping->size() - claimed));
  std::shared_ptr<device::Mapping> device = HoldWith(std::move(mapping), std::move(share));
  BATON_ASSIGN_OR_RETURN(
      std::shared_ptr<transport::MemoryRegion> registered,
      RegisterWithDataPlane(
          transport::ByteSpan(static_cast<std::byte*>(device->data()), device->size()),
          transport::MemoryKind::kDevice, device));
  return Add(session_id, Buffer{nullptr, std::move(device), nullptr, std::move(registered)});
}

absl::StatusOr<uint64_t> SessionRegistry::RegisterEvents(uint64_t session_id,
                                                         std::vector<device::EventHandle> handles) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node's batond has no GPU device, so it cannot order operations with a stream "
        "(batond --device)");
  }
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Share> share, Charge(session_id, 0));
  auto events = std::make_unique<EventSet>();
  for (device::EventHandle& handle : handles) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event,
                           device_->OpenIpcEvent(std::move(handle)));
    events->push_back(std::move(event));
  }
  return Add(session_id,
             Buffer{nullptr, nullptr, HoldWith(std::move(events), std::move(share)), nullptr});
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
  // The registration holds the mapping: pinning it keeps both.
  if (found.host != nullptr) {
    return BufferRegion{found.registered ? std::shared_ptr<void>(found.registered)
                                         : std::shared_ptr<void>(found.host),
                        static_cast<std::byte*>(found.host->data()) + offset,
                        found.registered.get(),
                        transport::MemoryKind::kHost,
                        -1,
                        found.host};
  }
  return BufferRegion{found.registered ? std::shared_ptr<void>(found.registered)
                                       : std::shared_ptr<void>(found.device),
                      static_cast<std::byte*>(found.device->data()) + offset,
                      found.registered.get(),
                      transport::MemoryKind::kDevice,
                      found.device->ordinal(),
                      nullptr};
}

MappedUsage SessionRegistry::SessionUsage(uint64_t session_id) const {
  return ledger_->OfSession(session_id);
}

MappedUsage SessionRegistry::UidUsage(uid_t uid) const { return ledger_->OfUid(uid); }

MappedUsage SessionRegistry::TotalUsage() const { return ledger_->Total(); }

}  // namespace baton::daemon
