#pragma once

// Client sessions and the shared-memory buffers they registered. A session belongs to the process
// that opened it on the session socket (its pid, uid and gid as the kernel reported them) and is
// reached only with its token (common/session_protocol.h). A buffer stays mapped while any
// operation still uses it, even if its session goes away meanwhile.
//
// What sessions map into the daemon is bounded per session, per uid and in all (SessionLimits):
// the number of buffers (each one a mapping of the daemon's, which the kernel caps per process at
// vm.max_map_count) and the bytes they span (the daemon's address space, whatever the memory
// behind it: a sealed memfd may be sparse). A buffer's share is given back when it is unmapped:
// when it is released or its session closes, or, if an operation still uses it then, when that
// operation ends.

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
#include "device/device.h"
#include "transport/memory.h"
#include "transport/transport.h"

namespace baton::daemon {

// A resolved region of a registered buffer; `pin` keeps the mapping alive.
struct BufferRegion {
  std::shared_ptr<void> pin;
  std::byte* data = nullptr;
  // The whole buffer's registration with the data plane (transport::Endpoint::RegisterMemory),
  // valid while `pin` is held; null when the data plane does not move its kind (it is staged).
  const transport::MemoryRegion* registered = nullptr;
  transport::MemoryKind memory = transport::MemoryKind::kHost;
  int device_ordinal = -1;             // device memory: the device that holds it
  std::shared_ptr<SharedMemory> host;  // host memory: the shared memory itself
};

// A session's interprocess events (the slots of its stream-ordered operations).
using EventSet = std::vector<std::unique_ptr<device::Event>>;

struct SessionLimits {
  int max_sessions = 4096;             // on this daemon
  int max_sessions_per_uid = 1024;     // of one user
  int max_buffers_per_session = 4096;  // registered at once (event sets count as buffers)
  int max_buffers_per_uid = 8192;      // by all sessions of one user
  int max_buffers = 32768;             // by all sessions: well below vm.max_map_count (65530)
  // Bytes of host and device memory mapped, together (a host buffer counts whole pages).
  uint64_t max_mapped_bytes_per_session = uint64_t{2} << 40;  // 2 TiB
  uint64_t max_mapped_bytes_per_uid = uint64_t{4} << 40;      // 4 TiB
  uint64_t max_mapped_bytes = uint64_t{32} << 40;             // 32 TiB of the 128 TiB there is
  // Communicator ranks held (HoldRank): each is a communicator's threads and memory in batond.
  int max_ranks_per_session = 512;
  int max_ranks_per_uid = 2048;
  int max_ranks = 8192;
};

// What is mapped for sessions: buffers (and event sets) and the bytes they span.
struct MappedUsage {
  int64_t buffers = 0;
  uint64_t bytes = 0;
};

class SessionRegistry {
 public:
  // `device` (may be null: no GPU here) maps the sessions' device memory and events.
  // `data_plane` (may be null) is the endpoint every buffer is registered with when it is mapped
  // (transport::Endpoint::RegisterMemory), and deregistered from before it is unmapped, so that
  // a transport pays for pinning or mapping once per buffer. Both must outlive the registry.
  explicit SessionRegistry(SessionLimits limits = {}, device::Device* device = nullptr,
                           transport::Endpoint* data_plane = nullptr);
  ~SessionRegistry();

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
  // The uid of the process that opened the session; NotFound if unknown.
  absl::StatusOr<uid_t> UidOf(uint64_t session_id) const;

  // Maps `size` bytes of the memfd `fd` (the caller keeps and closes it) as a buffer of the
  // session, registered with the data plane. InvalidArgument for memory that is not sealed or is
  // too small; ResourceExhausted, naming the limit, when one more buffer or its bytes would pass
  // a limit of SessionLimits (the memory is not mapped then); the data plane's error when it
  // cannot register memory it moves (the buffer is not kept then).
  absl::StatusOr<uint64_t> RegisterBuffer(uint64_t session_id, int fd, uint64_t size);
  // Maps device memory the session's process exported, as a buffer of the session (counted
  // against the same limits). FailedPrecondition when this daemon has no device; the device's
  // errors (InvalidArgument for an export that does not describe its memory) otherwise.
  absl::StatusOr<uint64_t> RegisterDeviceBuffer(uint64_t session_id, device::ExportedMemory memory);
  // Opens the session's interprocess events as one set; its id shares the buffers' numbering
  // (and their limits on the number of buffers) and ReleaseBuffer releases it.
  absl::StatusOr<uint64_t> RegisterEvents(uint64_t session_id,
                                          std::vector<device::EventHandle> handles);
  // The event set `set_id` of the session: NotFound for an unknown session, InvalidArgument for
  // an id that is not one of its event sets.
  absl::StatusOr<std::shared_ptr<EventSet>> Events(uint64_t session_id, uint64_t set_id) const;
  absl::Status ReleaseBuffer(uint64_t session_id, uint64_t buffer_id);

  // The address of bytes [offset, offset + bytes) of a buffer. NotFound for an unknown session;
  // InvalidArgument for a buffer that is not registered or a range that does not fit in it.
  absl::StatusOr<BufferRegion> Resolve(uint64_t session_id, uint64_t buffer_id, uint64_t offset,
                                       uint64_t bytes) const;

  // Counts one more communicator rank held by the session (a join, until Destroy or the
  // session's end): ResourceExhausted naming the limit past max_ranks_per_session, _per_uid or
  // max_ranks; NotFound for an unknown session. Close gives back what the session held.
  absl::Status HoldRank(uint64_t session_id);
  // Gives back `ranks` of the session's (a failed join, a Destroy); nothing if it is gone.
  void ReleaseRanks(uint64_t session_id, int ranks);

  // What is mapped now for one session (released buffers that an operation still uses
  // included, after the session closed too), for one uid, and for all sessions.
  MappedUsage SessionUsage(uint64_t session_id) const;
  MappedUsage UidUsage(uid_t uid) const;
  MappedUsage TotalUsage() const;

 private:
  // The counts behind SessionUsage and the rest; shared with the mappings' deleters, which may
  // run after the registry is gone (an operation ending late).
  class Ledger;
  // One buffer's charge on the ledger, given back when destroyed.
  class Share;
  struct Buffer {
    std::shared_ptr<SharedMemory> host;       // host memory, or
    std::shared_ptr<device::Mapping> device;  // device memory, or
    std::shared_ptr<EventSet> events;         // an event set
    // The memory's registration with the data plane, which holds the mapping (host or device)
    // and is destroyed before it; null when not registered.
    std::shared_ptr<transport::MemoryRegion> registered;
  };
  // The registration of `bytes` of `kind` with the data plane, holding `mapping`: null when
  // there is no data plane or it does not move the kind (InvalidArgument); its other errors.
  absl::StatusOr<std::shared_ptr<transport::MemoryRegion>> RegisterWithDataPlane(
      transport::ByteSpan bytes, transport::MemoryKind kind, std::shared_ptr<void> mapping) const;
  struct Session {
    baton::PeerCredentials peer;
    std::string client_name;
    std::string token;
    absl::flat_hash_map<uint64_t, Buffer> buffers;
    int ranks = 0;  // HoldRank
  };
  // Charges one more buffer of `bytes` to the session and its uid: ResourceExhausted naming the
  // limit it would pass, NotFound for an unknown session.
  absl::StatusOr<std::unique_ptr<Share>> Charge(uint64_t session_id, uint64_t bytes) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Takes `ranks` held ranks off the session, its uid and the total.
  void GiveBackRanksLocked(Session& session, int ranks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `buffer` to the session, if it still exists.
  absl::StatusOr<uint64_t> Add(uint64_t session_id, Buffer buffer) ABSL_LOCKS_EXCLUDED(mu_);

  const SessionLimits limits_;
  device::Device* const device_;
  transport::Endpoint* const data_plane_;
  const std::shared_ptr<Ledger> ledger_;
  mutable absl::Mutex mu_;
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_buffer_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, int> sessions_per_uid_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, int> ranks_per_uid_ ABSL_GUARDED_BY(mu_);
  int ranks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton::daemon
