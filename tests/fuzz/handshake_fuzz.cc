// libFuzzer target: both sides of the data connections' handshake against whatever the other end
// sends. The input is what arrives on the socket (then the other end closes): the accepting side
// must refuse it (nobody can prove a key over a nonce it has not seen), the connecting side must
// fail cleanly, and neither may crash, hang past its deadline or read more than a frame allows.

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/time/clock.h"
#include "transport/tcp/handshake_io.h"

namespace {

// A connected pair with `data` already sent from the far end, which is then shut for writing.
bool Prepare(const uint8_t* data, size_t size, int fds[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fds[1], data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  shutdown(fds[1], SHUT_WR);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // within one socket buffer: the far end writes it all first
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  int fds[2];
  if (Prepare(data, size, fds)) {
    absl::StatusOr<baton::transport::tcp::Admitted> admitted =
        baton::transport::tcp::Admit(fds[0], "198.18.0.10:7461", nullptr,
                                     static_cast<baton::transport::Protection>(size % 3), deadline);
    if (admitted.ok()) std::abort();  // a proof over a fresh nonce cannot be in the input
    close(fds[0]);
    close(fds[1]);
  }
  if (Prepare(data, size, fds)) {
    (void)baton::transport::tcp::Introduce(
        fds[0], "198.18.0.11:7461", "198.18.0.10:7461", baton::transport::kNoHandshakeKey,
        static_cast<baton::transport::Protection>(size % 3), deadline, [] { return false; });
    close(fds[0]);
    close(fds[1]);
  }
  return 0;
}
