#pragma once

// What a datagram on the session socket (common/session_protocol.h) asks of the daemon, decoded
// and checked apart from any socket: the session server decodes every request with it, and a
// libFuzzer target (tests/fuzz/session_fuzz.cc) feeds it whatever a local process could send.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace baton::daemon {

// kOpen: `client_name` is the request's field up to its first NUL, at most 63 bytes.
struct SessionOpen {
  std::string client_name;
};
// kRegister: map `size` bytes of the attached memfd, if one came (`has_memfd`).
struct SessionRegister {
  uint64_t size = 0;
  bool has_memfd = false;
};
// kRelease: forget buffer `buffer_id`.
struct SessionRelease {
  uint64_t buffer_id = 0;
};
// kRegisterDevice: the export, without its descriptors (the caller attaches the ones that came,
// `passed_fds` of them, which the decoder checked against the segment count).
struct SessionRegisterDevice {
  device::ExportedMemory memory;
};
// kRegisterEvents: the handles, without descriptors (as above).
struct SessionRegisterEvents {
  std::vector<device::EventHandle> events;
  bool with_fds = false;
};
// kOpenArena: the node arena of communicator `comm_tag`, for rank `rank` (which the session must
// hold; the node checks).
struct SessionOpenArena {
  uint64_t comm_tag = 0;
  int rank = 0;
};
using SessionRequest = std::variant<SessionOpen, SessionRegister, SessionRelease,
                                    SessionRegisterDevice, SessionRegisterEvents, SessionOpenArena>;

// Decodes `datagram`, which arrived with `passed_fds` descriptors on a connection that has a
// session already (`has_session`) or not. Every error is a reason to close the connection after
// replying with it: InvalidArgument for anything but one whole session::Request of this magic and
// version, a type the protocol does not define, more descriptors than the request takes (one
// for the others; kRegisterDevice: exactly one per VMM segment, none for a legacy handle;
// kRegisterEvents: one per event or none), a share kind, segment count, event count or size
// out of range; FailedPrecondition for kOpen on a connection with a session, and for any other
// request on one without. A descriptor that comes with kOpen or kRelease is not an error (the
// caller closes it); a kRegister without one is for the caller to refuse.
absl::StatusOr<SessionRequest> DecodeSessionRequest(std::span<const std::byte> datagram,
                                                    size_t passed_fds, bool has_session);

}  // namespace baton::daemon
