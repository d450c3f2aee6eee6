#pragma once

// Small POSIX socket helpers for the TCP transport: an owning file descriptor, host:port
// parsing, listen/connect, and exact reads/writes that honour a deadline and a cancel check, so
// that no transport thread ever blocks forever in the kernel. Linux only (eventfd, POLLRDHUP).

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace baton::transport {

// Owns a file descriptor and closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  std::string port;
};

// Splits "host:port" or "[v6 host]:port". InvalidArgument when malformed.
absl::StatusOr<HostPort> SplitHostPort(absl::string_view address);
// The inverse: brackets a host that contains ':'.
std::string JoinHostPort(absl::string_view host, int port);

// A bound, listening TCP socket (SO_REUSEADDR, close-on-exec) and the port it got.
struct Listener {
  FileDescriptor fd;
  int port = 0;
};
absl::StatusOr<Listener> ListenTcp(const HostPort& address);

// Connects to `address` ("host:port"), retrying refused or failed attempts with backoff until
// `deadline`, or until `cancelled()` returns true (Cancelled). The socket is non-blocking, with
// TCP_NODELAY. Unavailable names the address and the last error when the deadline passes.
absl::StatusOr<FileDescriptor> ConnectWithRetry(const std::string& address, absl::Time deadline,
                                                absl::FunctionRef<bool()> cancelled);

// Writes all of `iov` (modified in place) with MSG_NOSIGNAL, waiting in poll() for buffer space.
// Adds the bytes written to `*written`. Errors: DeadlineExceeded at `deadline`, Cancelled once
// `cancelled()` returns true (checked at least every 20 ms while waiting), or the errno's status
// (e.g. Unavailable for EPIPE/ECONNRESET) when the connection fails.
absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline, size_t* written);
absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled, size_t* written);
// The same, calling `on_full()` each time the socket's send buffer is full, before it waits.
absl::Status WriteFull(int fd, std::span<iovec> iov, absl::Time deadline,
                       absl::FunctionRef<bool()> cancelled, absl::FunctionRef<void()> on_full,
                       size_t* written);

// Reads exactly `buffer.size()` bytes. Adds the bytes read to `*read`. Errors: Unavailable
// ("connection closed by the peer") at EOF, DeadlineExceeded, Cancelled (as for WriteFull), or
// the errno's status. Without a cancel check an infinite deadline waits in poll() without waking.
absl::Status ReadFull(int fd, ByteSpan buffer, absl::Time deadline, size_t* read);
absl::Status ReadFull(int fd, ByteSpan buffer, absl::Time deadline,
                      absl::FunctionRef<bool()> cancelled, size_t* read);

// Reads a stream through a small read-ahead buffer, so that a frame header and the small payload
// that arrives with it cost one recv, not two, and so that after a recv that found the socket
// empty the next read waits in poll() at once instead of trying recv first. Reads of at least
// kCapacity bytes go straight into the caller's buffer after what is buffered, so bulk data is
// not copied twice. Not thread-safe; one reader per connection.
class BufferedReader {
 public:
  static constexpr size_t kCapacity = 4096;
  explicit BufferedReader(int fd) : fd_(fd) {}
  BufferedReader(const BufferedReader&) = delete;
  BufferedReader& operator=(const BufferedReader&) = delete;

  // As ReadFull.
  absl::Status Read(ByteSpan buffer, absl::Time deadline, size_t* read);
  absl::Status Read(ByteSpan buffer, absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                    size_t* read);
  // True when bytes read from the socket are waiting to be consumed.
  bool buffered() const { return end_ > begin_; }
  // The caller's own poll() found the socket readable: the next read need not poll again.
  void NoteReadable() { drained_ = false; }

 private:
  absl::Status ReadImpl(ByteSpan buffer, absl::Time deadline,
                        const absl::FunctionRef<bool()>* cancelled, size_t* read);

  const int fd_;
  std::array<std::byte, kCapacity> ahead_;
  size_t begin_ = 0;  // ahead_[begin_, end_) is read from the socket but not yet consumed
  size_t end_ = 0;
  bool drained_ = false;  // the last recv left the socket empty
};

// Turns off Nagle's algorithm, so that a small frame leaves at once instead of waiting for the
// acknowledgement of the previous one (which the receiver may delay by up to 40 ms). Every
// connection that carries frames needs it, in both directions. Best effort.
void SetNoDelay(int fd);

// Segments the kernel has retransmitted on this TCP connection (TCP_INFO); 0 if unavailable.
uint64_t TcpRetransmits(int fd);

}  // namespace baton::transport
