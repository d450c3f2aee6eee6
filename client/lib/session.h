#pragma once

// libbaton's session with its node's daemon: the session socket (common/session_protocol.h) that
// opened it and carries its shared memory, the session's id and token, the gRPC stub whose calls
// carry the token, and the buffers registered with the daemon (pointer -> buffer resolution).
// Internal.

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/session_protocol.h"
#include "common/shared_memory.h"
#include "common/status_macros.h"
#include "common/unix_socket.h"
#include "device/device.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {

inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

inline void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

inline constexpr absl::Duration kControlTimeout = absl::Seconds(30);

// What a communicator needs of its client: the session, and pointer -> buffer resolution.
class Session {
 public:
  // Opens a session on the daemon whose client socket is `socket_path` (its session socket is
  // beside it); `stub` talks to that daemon.
  static absl::StatusOr<std::shared_ptr<Session>> Open(const std::string& socket_path,
                                                       std::unique_ptr<v1::Client::Stub> stub,
                                                       absl::Duration timeout) {
    const std::string path = session::SessionSocketPath(socket_path);
    absl::StatusOr<int> fd = ConnectUnix(path);
    if (!fd.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot open a session at ", path, ": ", fd.status().message()));
    }
    auto session = std::shared_ptr<Session>(new Session(std::move(stub), *fd));
    session::Request request;
    request.type = static_cast<uint32_t>(session::RequestType::kOpen);
    std::strncpy(request.client_name, "libbaton", sizeof(request.client_name) - 1);
    absl::StatusOr<session::Reply> reply = session->Exchange(request, {}, timeout);
    if (!reply.ok()) return reply.status();
    session->id_ = reply->session_id;
    session->token_.assign(reply->token, strnlen(reply->token, sizeof(reply->token)));
    session->node_name_.assign(reply->node_name,
                               strnlen(reply->node_name, sizeof(reply->node_name)));
    return session;
  }

  ~Session() { close(fd_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  v1::Client::Stub* stub() { return stub_.get(); }
  uint64_t id() const { return id_; }
  const std::string& node_name() const { return node_name_; }

  // Sets a call's deadline and the session's token, which every call naming the session needs.
  void Prepare(grpc::ClientContext& context, absl::Duration timeout) const {
    SetDeadline(context, timeout);
    context.AddMetadata(session::kTokenMetadata, token_);
  }

  // Ends the session at the daemon (which tears down what it owned) and waits, at most a few
  // seconds, until the daemon has closed it: from then on every call of the session fails.
  // Idempotent.
  void Close() {
    absl::MutexLock lock(&socket_mu_);
    shutdown(fd_, SHUT_WR);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (true) {
      session::Reply stale;  // a reply nobody waits for any more
      int stray = -1;
      absl::StatusOr<size_t> got = RecvPacket(fd_, &stale, sizeof(stale), &stray, deadline);
      if (stray >= 0) close(stray);
      if (!got.ok() || *got == 0) break;  // closed by the daemon (or it is gone, or too slow)
    }
    shutdown(fd_, SHUT_RDWR);
  }
  // The session socket, for watching whether the daemon is still there (it hangs up when it
  // goes away).
  int socket_fd() const { return fd_; }
  // Set once the daemon hung up.
  // The daemon went away: later requests fail, and ranks waiting in this session's node arenas
  // fail at once instead of at their deadline.
  void MarkLost();
  bool lost() const { return lost_.load(); }

  absl::StatusOr<void*> Allocate(size_t bytes) {
    absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Create(bytes, "baton");
    if (!memory.ok()) return memory.status();
    session::Request request;
    request.type = static_cast<uint32_t>(session::RequestType::kRegister);
    request.size = bytes;
    const int fd = (*memory)->fd();
    absl::StatusOr<session::Reply> reply =
        Exchange(request, std::span<const int>(&fd, 1), kControlTimeout);
    // The daemon holds its own mapping now (or failed): the descriptor is no longer needed.
    (*memory)->CloseFd();
    if (!reply.ok()) return reply.status();
    void* data = (*memory)->data();
    absl::MutexLock lock(&mu_);
    buffers_[static_cast<std::byte*>(data)] = Buffer{std::move(*memory), reply->buffer_id};
    return data;
  }

  absl::Status Free(void* data) {
    BATON_ASSIGN_OR_RETURN(Buffer buffer, Take(data));
    return ReleaseAtDaemon(buffer.id);
  }

  // ---- Device memory (client/lib/session_device.cc) ----

  // Allocates device memory on GPU `ordinal` shared with the daemon (the process's device,
  // ClientDevice()).
  absl::StatusOr<void*> AllocateDevice(size_t bytes, int ordinal);
  // Frees memory from AllocateDevice; InvalidArgument for any other pointer.
  absl::Status FreeDevice(void* data);
  // The registered device buffer holding [data, data + bytes), registering its allocation with
  // the daemon on first use (cached by base address; the driver's buffer id is checked on every
  // use, so an address reused by a new allocation, the old one freed without Deregister, is
  // registered anew and the daemon lets go of the old one).
  // NotFound for memory that is not device memory; FailedPrecondition for device memory that
  // cannot be shared.
  absl::StatusOr<v1::BufferRef> FindDevice(const void* data, size_t bytes);
  // Forgets the registration of the allocation holding `data` (before the owner frees it: the
  // daemon must not keep a mapping of freed memory). InvalidArgument when it is not registered.
  absl::Status Deregister(const void* data);
  // Opens `events` (their handles) at the daemon; returns the event set's id.
  // The node arena of communicator `comm_tag` for `rank` (the daemon's, shared with the node's
  // other ranks of it), mapped here, and the rank's place in it.
  struct Arena {
    std::shared_ptr<SharedMemory> memory;  // the session keeps a weak reference (MarkLost)
    int rank = 0;
  };
  absl::StatusOr<Arena> OpenArena(uint64_t comm_tag, int rank);
  absl::StatusOr<uint64_t> RegisterEvents(const std::vector<const device::Event*>& events);

  // Takes a buffer from Allocate out of the session: the daemon releases it, and the memory
  // stays mapped for as long as the caller keeps the returned object (also after the session
  // ends). InvalidArgument for any other pointer.
  absl::StatusOr<std::unique_ptr<SharedMemory>> Detach(void* data) {
    BATON_ASSIGN_OR_RETURN(Buffer buffer, Take(data));
    ReleaseAtDaemon(buffer.id).IgnoreError();  // a closed session released it
    return std::move(buffer.memory);
  }

  // How [data, data + bytes) relates to the registered buffers.
  struct Found {
    std::optional<v1::BufferRef> ref;  // the buffer that holds all of it
    // The size of a registered buffer that holds `data` but not all `bytes` after it (0: none).
    size_t overrun_of = 0;
  };
  Found Locate(const void* data, size_t bytes) {
    const auto* begin = static_cast<const std::byte*>(data);
    absl::MutexLock lock(&mu_);
    auto it = buffers_.upper_bound(const_cast<std::byte*>(begin));
    if (it == buffers_.begin()) return {};
    --it;
    const size_t size = it->second.memory->size();
    const size_t offset = static_cast<size_t>(begin - it->first);
    if (offset >= size && !(offset == 0 && size == 0)) return {};  // past its end: not in it
    if (bytes > size - offset) return {std::nullopt, size};
    v1::BufferRef ref;
    ref.set_buffer_id(it->second.id);
    ref.set_offset(offset);
    return {ref, 0};
  }
  // The registered buffer holding [data, data + bytes), if any.
  std::optional<v1::BufferRef> Find(const void* data, size_t bytes) {
    return Locate(data, bytes).ref;
  }

 private:
  Session(std::unique_ptr<v1::Client::Stub> stub, int fd) : stub_(std::move(stub)), fd_(fd) {}

  struct Buffer {
    std::unique_ptr<SharedMemory> memory;
    uint64_t id = 0;
  };
  // Removes the Allocate()d buffer at `data` from the session's table (not from the daemon).
  absl::StatusOr<Buffer> Take(void* data) {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(static_cast<std::byte*>(data));
    if (it == buffers_.end()) {
      return absl::InvalidArgumentError("pointer was not returned by Allocate");
    }
    Buffer buffer = std::move(it->second);
    buffers_.erase(it);
    return buffer;
  }
  // Asks the daemon to forget buffer or event set `id` (kRelease).
  absl::Status ReleaseAtDaemon(uint64_t id) {
    session::Request request;
    request.type = static_cast<uint32_t>(session::RequestType::kRelease);
    request.buffer_id = id;
    return Exchange(request, {}, kControlTimeout).status();
  }

  // Sends `request` (with `pass_fds` attached) and waits for its reply; the reply's error as a
  // status.
  // Sends `request` (with `pass_fds`) and waits for the reply; a descriptor that comes with the
  // reply goes to `*received_fd` when it is given (the caller owns it), else is closed.
  absl::StatusOr<session::Reply> Exchange(const session::Request& request,
                                          std::span<const int> pass_fds, absl::Duration timeout,
                                          int* received_fd = nullptr) {
    absl::MutexLock lock(&socket_mu_);
    absl::Status sent = SendPacketWithFds(fd_, &request, sizeof(request), pass_fds);
    if (!sent.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the session with batond is closed or broken: ", sent.message()));
    }
    session::Reply reply;
    int stray = -1;
    absl::StatusOr<size_t> got =
        RecvPacket(fd_, &reply, sizeof(reply), &stray, absl::Now() + timeout);
    if (stray >= 0 &&
        (received_fd == nullptr || !got.ok() || *got != sizeof(reply) || reply.code != 0)) {
      close(stray);
      stray = -1;
    }
    if (received_fd != nullptr) *received_fd = stray;
    if (!got.ok()) return got.status();
    if (*got != sizeof(reply)) {
      return absl::UnavailableError(*got == 0 ? "batond closed the session"
                                              : "batond sent a malformed session reply");
    }
    if (reply.code != 0) {
      return absl::Status(
          static_cast<absl::StatusCode>(reply.code),
          std::string(reply.message, strnlen(reply.message, sizeof(reply.message))));
    }
    return reply;
  }

  std::unique_ptr<v1::Client::Stub> stub_;
  const int fd_;
  uint64_t id_ = 0;
  std::string token_;
  std::string node_name_;
  std::atomic<bool> lost_{false};
  absl::Mutex socket_mu_;  // one request and its reply at a time
  absl::Mutex mu_;
  std::map<std::byte*, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<SharedMemory>> arenas_ ABSL_GUARDED_BY(mu_);  // OpenArena's

  // Registered device allocations by base address.
  struct DeviceBuffer {
    uint64_t size = 0;
    uint64_t driver_id = 0;                     // the driver's id of the allocation
    uint64_t id = 0;                            // the daemon's buffer id
    std::unique_ptr<device::Allocation> owned;  // from AllocateDevice
  };
  // Registers `exported` with the daemon; returns its buffer id.
  absl::StatusOr<uint64_t> RegisterExported(device::ExportedMemory exported);
  absl::Mutex device_mu_;  // one registration at a time (they are rare)
  std::map<uint64_t, DeviceBuffer> device_buffers_ ABSL_GUARDED_BY(device_mu_);
};

}  // namespace baton::core
