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
// 3. kRelease forgets buffer `buffer_id`.
// The session lasts as long as the connection: when the process exits or closes it, the daemon
// tears down everything the session owned.

#include <cstdint>
#include <string>

namespace baton::session {

inline constexpr uint32_t kMagic = 0x53544242;  // "BBTS"
inline constexpr uint32_t kVersion = 1;

enum class RequestType : uint32_t { kOpen = 1, kRegister = 2, kRelease = 3 };

struct Request {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t type = 0;  // RequestType
  uint32_t reserved = 0;
  uint64_t size = 0;          // kRegister: bytes to map
  uint64_t buffer_id = 0;     // kRelease
  char client_name[64] = {};  // kOpen: free text for logs, NUL-terminated
};

struct Reply {
  int32_t code = 0;  // absl::StatusCode
  uint32_t reserved = 0;
  uint64_t session_id = 0;  // kOpen
  uint64_t buffer_id = 0;   // kRegister
  char token[40] = {};      // kOpen: 32 hex digits, NUL-terminated
  char node_name[64] = {};  // kOpen, NUL-terminated
  char message[256] = {};   // the error, NUL-terminated
};

// The gRPC metadata key that carries the session token.
inline constexpr char kTokenMetadata[] = "baton-session-token";

// The session socket of the daemon whose gRPC client socket is `socket`.
inline std::string SessionSocketPath(const std::string& socket) { return socket + ".session"; }

}  // namespace baton::session
