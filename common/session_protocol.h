#pragma once

// The session socket: how a rank's process opens its session with the node's daemon and hands it
// shared memory. It is a unix SOCK_SEQPACKET socket next to the gRPC socket (SessionSocketPath);
// each Request gets one Reply, in order.
//
// 1. The process connects and sends kOpen. The daemon reads the process's pid, uid and gid from
//    the kernel (SO_PEERCRED), checks its allow-list and limits, and replies with the session id
//    and a random 128-bit token. The token is the session's credential: every gRPC call that
//    names the session carries it as metadata (kTokenMetadata, 32 hex digits), and no other
//    call may use the session.
// 2. kRegister with a memfd attached (SCM_RIGHTS) maps `size` bytes of it: it must be sealed
//    against shrinking (common/shared_memory.h). The reply carries the buffer id.
// 3. kRegisterDevice maps GPU memory the process exported (device/device.h ExportedMemory): a
//    VMM allocation with one descriptor per segment attached, or a legacy CUDA IPC handle with
//    none. The reply carries its buffer id, used like any other.
// 4. kRegisterEvents opens `event_count` interprocess events of the process (the slots a rank's
//    stream-ordered operations record into; descriptors attached only for the host fake). The
//    reply carries the event set's id (in buffer_id).
// 5. kRelease forgets buffer or event set `buffer_id`.
// The session lasts as long as the connection: when the process exits or closes it, the daemon
// tears down everything the session owned.

#include <cstdint>
#include <string>

namespace baton::session {

inline constexpr uint32_t kMagic = 0x53544242;  // "BBTS"
// 2: device memory and events.
inline constexpr uint32_t kVersion = 3;

enum class RequestType : uint32_t {
  kOpen = 1,
  kRegister = 2,
  kRelease = 3,
  kRegisterDevice = 4,
  kRegisterEvents = 5,
  kOpenArena = 6,  // the node arena of a communicator (collective/node_arena.h); one fd back
};

// The most segments of one device registration, and events of one event set.
inline constexpr uint32_t kMaxDeviceSegments = 16;
inline constexpr uint32_t kMaxEvents = 8;
inline constexpr size_t kHandleBytes = 64;

// kRegisterDevice: device/device.h ExportedMemory, field for field.
struct DeviceMemory {
  uint32_t share_kind = 0;  // device::ShareKind
  uint32_t segment_count = 0;
  uint8_t device_uuid[16] = {};
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t driver_buffer_id = 0;
  uint64_t segment_sizes[kMaxDeviceSegments] = {};
  uint8_t ipc_handle[kHandleBytes] = {};
};

// kRegisterEvents: the events' handles; descriptors attached in order when `with_fds` is 1.
struct EventSet {
  uint32_t event_count = 0;
  uint32_t with_fds = 0;
  uint8_t handles[kMaxEvents][kHandleBytes] = {};
};

struct Request {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t type = 0;  // RequestType
  uint32_t reserved = 0;
  uint64_t size = 0;          // kRegister: bytes to map
  uint64_t buffer_id = 0;     // kRelease
  char client_name[64] = {};  // kOpen: free text for logs, NUL-terminated
  DeviceMemory device;        // kRegisterDevice
  EventSet events;            // kRegisterEvents
  uint64_t comm_tag = 0;      // kOpenArena: the communicator
  int32_t rank = 0;           // kOpenArena: a rank of it this session holds
  uint32_t reserved2 = 0;
};

struct Reply {
  int32_t code = 0;  // absl::StatusCode
  uint32_t reserved = 0;
  uint64_t session_id = 0;   // kOpen
  uint64_t buffer_id = 0;    // kRegister
  char token[40] = {};       // kOpen: 32 hex digits, NUL-terminated
  char node_name[64] = {};   // kOpen, NUL-terminated
  char message[256] = {};    // the error, NUL-terminated
  uint64_t arena_bytes = 0;  // kOpenArena: the arena's size (its memfd comes with the reply)
  int32_t arena_rank = 0;    // kOpenArena: the rank's place among the arena's ranks
  uint32_t reserved2 = 0;
};

// The gRPC metadata key that carries the session token.
inline constexpr char kTokenMetadata[] = "baton-session-token";

// The session socket of the daemon whose gRPC client socket is `socket`.
inline std::string SessionSocketPath(const std::string& socket) { return socket + ".session"; }

}  // namespace baton::session
