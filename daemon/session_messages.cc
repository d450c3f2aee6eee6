#include "daemon/session_messages.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/session_protocol.h"

namespace baton::daemon {

absl::StatusOr<SessionRequest> DecodeSessionRequest(std::span<const std::byte> datagram,
                                                    int passed_fds, bool has_session) {
  session::Request request;
  if (datagram.size() == sizeof(request)) std::memcpy(&request, datagram.data(), sizeof(request));
  if (datagram.size() != sizeof(request) || request.magic != session::kMagic ||
      request.version != session::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a session request of version ", session::kVersion, " (", datagram.size(), " bytes)"));
  }
  // RecvPacket refuses these already; a decoder that stands alone refuses them too.
  if (passed_fds < 0 || passed_fds > 1) {
    return absl::InvalidArgumentError("a session message with more than one descriptor");
  }
  // The order of the checks below is what clients see: an open on a connection that has its
  // session, then anything but an open before one, then an unknown type.
  const auto type = static_cast<session::RequestType>(request.type);
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
    case session::RequestType::kRelease:
      return SessionRelease{request.buffer_id};
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown request type ", request.type));
  }
}

}  // namespace baton::daemon
