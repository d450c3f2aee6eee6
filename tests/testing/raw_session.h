#pragma once

// The session socket spoken directly (common/session_protocol.h), as a client in another language
// or an attacker would: open a session, register memory, and the token that gRPC calls carry.

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/session_protocol.h"
#include "common/shared_memory.h"
#include "common/unix_socket.h"
#include "grpcpp/grpcpp.h"

namespace baton::testing {

class RawSession {
 public:
  // Connects to the session socket of the daemon whose client socket is `socket` and opens a
  // session (unless `open` is false: then only connected).
  static absl::StatusOr<std::unique_ptr<RawSession>> Connect(const std::string& socket,
                                                             bool open = true) {
    absl::StatusOr<int> fd = ConnectUnix(session::SessionSocketPath(socket));
    if (!fd.ok()) return fd.status();
    auto raw = std::unique_ptr<RawSession>(new RawSession(*fd));
    if (!open) return raw;
    session::Request request;
    request.type = static_cast<uint32_t>(session::RequestType::kOpen);
    absl::StatusOr<session::Reply> reply = raw->Exchange(request);
    if (!reply.ok()) return reply.status();
    raw->id_ = reply->session_id;
    raw->token_ = reply->token;
    return raw;
  }
  ~RawSession() { close(fd_); }

  uint64_t id() const { return id_; }
  const std::string& token() const { return token_; }
  int fd() const { return fd_; }

  // A request on the session socket `fd` and its reply (waiting at most 20 s); the reply's
  // error as a status, Unavailable when the daemon closed the connection instead.
  static absl::StatusOr<session::Reply> Exchange(int fd, const session::Request& request,
                                                 int pass_fd = -1) {
    if (absl::Status s = SendPacket(fd, &request, sizeof(request), pass_fd); !s.ok()) return s;
    session::Reply reply;
    int stray = -1;
    absl::StatusOr<size_t> got =
        RecvPacket(fd, &reply, sizeof(reply), &stray, absl::Now() + absl::Seconds(20));
    if (stray >= 0) close(stray);
    if (!got.ok()) return got.status();
    if (*got != sizeof(reply)) return absl::UnavailableError("the daemon closed the session");
    if (reply.code != 0) {
      return absl::Status(static_cast<absl::StatusCode>(reply.code), reply.message);
    }
    return reply;
  }
  absl::StatusOr<session::Reply> Exchange(const session::Request& request, int pass_fd = -1) {
    return Exchange(fd_, request, pass_fd);
  }

  // Registers `memory` (of at least `size` bytes); the buffer id.
  absl::StatusOr<uint64_t> Register(const SharedMemory& memory, uint64_t size) {
    session::Request request;
    request.type = static_cast<uint32_t>(session::RequestType::kRegister);
    request.size = size;
    absl::StatusOr<session::Reply> reply = Exchange(request, memory.fd());
    if (!reply.ok()) return reply.status();
    return reply->buffer_id;
  }

  // A client context carrying this session's token, with a 20 s deadline.
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    context->AddMetadata(session::kTokenMetadata, token_);
    return context;
  }

 private:
  explicit RawSession(int fd) : fd_(fd) {}

  const int fd_;
  uint64_t id_ = 0;
  std::string token_;
};

}  // namespace baton::testing
