#include "daemon/session_messages.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/session_protocol.h"

namespace baton::daemon {
namespace {

absl::StatusOr<SessionRequest> DecodeDevice(const session::DeviceMemory& wire, size_t passed_fds) {
  SessionRegisterDevice out;
  device::ExportedMemory& memory = out.memory;
  std::memcpy(memory.device_uuid.data(), wire.device_uuid, memory.device_uuid.size());
  memory.base = wire.base;
  memory.size = wire.size;
  memory.buffer_id = wire.driver_buffer_id;
  if (wire.size == 0) return absl::InvalidArgumentError("a device registration of 0 bytes");
  if (wire.base > UINT64_MAX - wire.size) {
    return absl::InvalidArgumentError("a device registration whose range wraps around");
  }
  switch (static_cast<device::ShareKind>(wire.share_kind)) {
    case device::ShareKind::kVmm: {
      memory.kind = device::ShareKind::kVmm;
      if (wire.segment_count == 0 || wire.segment_count > session::kMaxDeviceSegments) {
        return absl::InvalidArgumentError(absl::StrCat("a VMM registration has 1 to ",
                                                       session::kMaxDeviceSegments,
                                                       " segments, not ", wire.segment_count));
      }
      if (passed_fds != wire.segment_count) {
        return absl::InvalidArgumentError(absl::StrCat("a VMM registration of ", wire.segment_count,
                                                       " segments came with ", passed_fds,
                                                       " descriptors"));
      }
      uint64_t total = 0;
      for (uint32_t i = 0; i < wire.segment_count; ++i) {
        const uint64_t segment = wire.segment_sizes[i];
        if (segment == 0 || segment > wire.size - total) {
          return absl::InvalidArgumentError(
              "a VMM registration whose segments do not add up to its size");
        }
        total += segment;
        memory.segment_sizes.push_back(segment);
      }
      if (total != wire.size) {
        return absl::InvalidArgumentError(
            "a VMM registration whose segments do not add up to its size");
      }
      return out;
    }
    case device::ShareKind::kLegacyIpc:
      memory.kind = device::ShareKind::kLegacyIpc;
      if (wire.segment_count != 0 || passed_fds != 0) {
        return absl::InvalidArgumentError(
            "a legacy IPC registration carries a handle, not segments or descriptors");
      }
      std::memcpy(memory.ipc_handle.data(), wire.ipc_handle, memory.ipc_handle.size());
      return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device share kind ", wire.share_kind));
}

absl::StatusOr<SessionRequest> DecodeEvents(const session::EventSet& wire, size_t passed_fds) {
  if (wire.event_count == 0 || wire.event_count > session::kMaxEvents) {
    return absl::InvalidArgumentError(absl::StrCat("an event set has 1 to ", session::kMaxEvents,
                                                   " events, not ", wire.event_count));
  }
  if (wire.with_fds > 1 || passed_fds != (wire.with_fds == 1 ? wire.event_count : 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an event set of ", wire.event_count, " events came with ", passed_fds, " descriptors"));
  }
  SessionRegisterEvents out;
  out.with_fds = wire.with_fds == 1;
  out.events.resize(wire.event_count);
  for (uint32_t i = 0; i < wire.event_count; ++i) {
    std::memcpy(out.events[i].bytes.data(), wire.handles[i], session::kHandleBytes);
  }
  return out;
}

}  // namespace

absl::StatusOr<SessionRequest> DecodeSessionRequest(std::span<const std::byte> datagram,
                                                    size_t passed_fds, bool has_session) {
  session::Request request;
  if (datagram.size() == sizeof(request)) std::memcpy(&request, datagram.data(), sizeof(request));
  if (datagram.size() != sizeof(request) || request.magic != session::kMagic ||
      request.version != session::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a session request of version ", session::kVersion, " (", datagram.size(), " bytes)"));
  }
  // RecvPacketWithFds refuses these already; a decoder that stands alone refuses them too.
  if (passed_fds > session::kMaxDeviceSegments) {
    return absl::InvalidArgumentError(absl::StrCat("a session message with more than ",
                                                   session::kMaxDeviceSegments, " descriptors"));
  }
  // The order of the checks below is what clients see: an open on a connection that has its
  // session, then anything but an open before one, then an unknown type.
  const auto type = static_cast<session::RequestType>(request.type);
  // Only the device registrations take several descriptors.
  if (passed_fds > 1 && type != session::RequestType::kRegisterDevice &&
      type != session::RequestType::kRegisterEvents) {
    return absl::InvalidArgumentError("a session message with more than one descriptor");
  }
  if (type == session::RequestType::kOpen) {
    if (has_session) {
      return absl::FailedPreconditionError("this connection has a session already");
    }
    // The field need not hold a NUL: a name that fills it is cut, never read past.
    const char* name = request.client_name;
    return SessionOpen{std::string(name, strnlen(name, sizeof(request.client_name) - 1))};
  }
  if (!has_session) return absl::FailedPreconditionError("open a session first");
  switch (type) {
    case session::RequestType::kRegister:
      return SessionRegister{request.size, passed_fds == 1};
    case session::RequestType::kRegisterDevice:
      return DecodeDevice(request.device, passed_fds);
    case session::RequestType::kRegisterEvents:
      return DecodeEvents(request.events, passed_fds);
    case session::RequestType::kRelease:
      return SessionRelease{request.buffer_id};
    case session::RequestType::kOpenArena:
      if (request.rank < 0) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank, " is negative"));
      }
      return SessionOpenArena{request.comm_tag, request.rank};
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown request type ", request.type));
  }
}

}  // namespace baton::daemon
