// libFuzzer target: the daemon's side of the session socket, as any local process that can reach
// it speaks it. The input is a sequence of datagrams, each with descriptors attached or not (a
// sealed memfd, an unsealed one, two at once). Each is decoded by DecodeSessionRequest as the
// connection's state stands, and sent to a real SessionServer on a temporary socket, which must
// answer exactly as the decoder says: the decoder's error, then a closed connection; an open that
// works; a registration or release that works or is refused with a reason. Nothing may crash,
// hang, or leave a descriptor, session or connection behind once the client hangs up.
//
// An input is records of [control][length][length bytes]. Control bits 0-1: descriptors (none, a
// sealed memfd, an unsealed one, two sealed ones); bits 2-3: the memfd's size (1, 4096, 65536
// bytes or empty); bit 4: the bytes follow a valid magic and version (so that the fuzzer spends
// its time past them) rather than being the whole datagram.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/session_protocol.h"
#include "common/unix_socket.h"
#include "daemon/session_messages.h"
#include "daemon/session_registry.h"
#include "daemon/session_server.h"
#include "spdlog/spdlog.h"

namespace {

using baton::daemon::DecodeSessionRequest;
using baton::daemon::SessionOpen;
using baton::daemon::SessionRegister;
using baton::daemon::SessionRelease;
using baton::daemon::SessionRequest;

// Aborts (which libFuzzer reports, keeping the input) naming the broken expectation.
#define CHECK_OR_ABORT(condition)                                                   \
  do {                                                                              \
    if (!(condition)) {                                                             \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                 \
    }                                                                               \
  } while (false)

// A budget for any one answer: far beyond what the server takes, well within -timeout=10.
constexpr absl::Duration kAnswerWithin = absl::Seconds(3);

// Descriptors of sockets and memfds open in this process: the server's listening socket, and
// whatever an input's connections and registrations left behind. (Other kinds come and go with
// the sanitizers' and libFuzzer's own work, such as the pipes to a symbolizer.)
int SocketsAndMemfds() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (target.starts_with("socket:") || target.starts_with("/memfd:")) ++count;
  }
  return count;
}

// One server for the whole run: starting one per input would cost more than the input.
struct Fixture {
  Fixture() {
    spdlog::set_level(spdlog::level::off);
    baton::daemon::SessionServerOptions options;
    options.path = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                "/baton-session-fuzz.", getpid(), ".sock");
    options.node_name = "fuzz-node";
    // At most a few buffers per session, so that inputs reach the limit.
    registry = std::make_unique<baton::daemon::SessionRegistry>(
        baton::daemon::SessionLimits{1 << 20, 1 << 20, 4});
    absl::StatusOr<std::unique_ptr<baton::daemon::SessionServer>> started =
        baton::daemon::SessionServer::Start(options, registry.get(), [](uint64_t) {});
    CHECK_OR_ABORT(started.ok());
    server = *std::move(started);
    path = options.path;
    descriptors = SocketsAndMemfds();
  }

  // Waits until the server has dropped every connection and session of the last input, and
  // closed their descriptors (it counts a connection gone just before it closes it).
  void Settle() const {
    const absl::Time deadline = absl::Now() + kAnswerWithin;
    while (server->sessions() + server->pending() > 0 || registry->Count() > 0 ||
           SocketsAndMemfds() != descriptors) {
      CHECK_OR_ABORT(absl::Now() < deadline);
      std::this_thread::yield();  // the server is about to close them: do not sleep a tick
    }
  }

  std::unique_ptr<baton::daemon::SessionRegistry> registry;
  std::unique_ptr<baton::daemon::SessionServer> server;
  std::string path;
  int descriptors = 0;  // SocketsAndMemfds() between inputs
};

Fixture& TheFixture() {
  // One server for the run, stopped at its exit() (before LeakSanitizer looks).
  static Fixture* const fixture = [] {
    auto* created = new Fixture();
    std::atexit([] { delete fixture; });
    return created;
  }();
  return *fixture;
}

// A memfd of `size` bytes, sealed against shrinking or not.
int MakeMemfd(size_t size, bool sealed) {
  const int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK_OR_ABORT(fd >= 0);
  CHECK_OR_ABORT(ftruncate(fd, static_cast<off_t>(size)) == 0);
  if (sealed) CHECK_OR_ABORT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  return fd;
}

// Sends `datagram` with two descriptors: SendPacket attaches at most one.
bool SendWithTwo(int socket, std::span<const std::byte> datagram, int a, int b) {
  iovec iov{const_cast<std::byte*>(datagram.data()), datagram.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {a, b};
  std::memcpy(CMSG_DATA(header), fds, sizeof(fds));
  return sendmsg(socket, &message, MSG_NOSIGNAL) == static_cast<ssize_t>(datagram.size());
}

class Connection {
 public:
  explicit Connection(const std::string& path) {
    absl::StatusOr<int> fd = baton::ConnectUnix(path);
    CHECK_OR_ABORT(fd.ok());
    fd_ = *fd;
  }
  ~Connection() { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  bool has_session = false;

  // The server's next datagram: a reply, or nullopt once it has closed the connection.
  std::optional<baton::session::Reply> Receive() const {
    baton::session::Reply reply;
    int stray = -1;
    absl::StatusOr<size_t> got =
        baton::RecvPacket(fd_, &reply, sizeof(reply), &stray, absl::Now() + kAnswerWithin);
    CHECK_OR_ABORT(stray < 0);  // the server never sends descriptors
    CHECK_OR_ABORT(got.ok());   // no answer within the budget: the server hangs
    if (*got == 0) return std::nullopt;
    CHECK_OR_ABORT(*got == sizeof(reply));
    CHECK_OR_ABORT(reply.message[sizeof(reply.message) - 1] == '\0');
    return reply;
  }

 private:
  int fd_ = -1;
};

// Sends one datagram on `connection` and checks the server's answer against the decoder's.
// Returns false once the server has closed the connection.
bool Exchange(Connection& connection, std::span<const std::byte> datagram, int descriptors,
              uint8_t control) {
  const absl::StatusOr<SessionRequest> decoded =
      DecodeSessionRequest(datagram, descriptors, connection.has_session);
  static constexpr size_t kSizes[] = {1, 4096, 65536, 0};
  const size_t memfd_bytes = kSizes[(control >> 2) & 3];
  bool sent;
  if (descriptors == 2) {
    const int a = MakeMemfd(memfd_bytes, true);
    const int b = MakeMemfd(memfd_bytes, true);
    sent = SendWithTwo(connection.fd(), datagram, a, b);
    close(a);
    close(b);
  } else {
    const int fd = descriptors == 1 ? MakeMemfd(memfd_bytes, (control & 3) == 1) : -1;
    sent = baton::SendPacket(connection.fd(), datagram.data(), datagram.size(), fd).ok();
    if (fd >= 0) close(fd);
  }
  // A send fails only on a connection the server has closed, which the receive below sees too.
  std::optional<baton::session::Reply> reply = connection.Receive();
  if (!sent) {
    CHECK_OR_ABORT(!reply.has_value());
    return false;
  }
  // What the receive refuses (longer than a request) is closed without an answer, and so is an
  // empty datagram (which reads as the end of the connection); what the decoder refuses (two
  // descriptors where one is allowed, say) is answered with its error, then closed.
  if (datagram.empty() || datagram.size() > sizeof(baton::session::Request)) {
    CHECK_OR_ABORT(!reply.has_value());
    return false;
  }
  CHECK_OR_ABORT(reply.has_value());
  if (!decoded.ok()) {
    CHECK_OR_ABORT(reply->code == static_cast<int32_t>(decoded.status().code()));
    CHECK_OR_ABORT(!connection.Receive().has_value());
    return false;
  }
  const auto code = static_cast<absl::StatusCode>(reply->code);
  if (std::holds_alternative<SessionOpen>(*decoded)) {
    // No allow-list and no session limit within reach: an open works.
    CHECK_OR_ABORT(code == absl::StatusCode::kOk && reply->session_id != 0 &&
                   std::strlen(reply->token) == 32 &&
                   std::strcmp(reply->node_name, "fuzz-node") == 0);
    connection.has_session = true;
  } else if (const auto* registration = std::get_if<SessionRegister>(&*decoded)) {
    const bool fits = (control & 3) == 1 && registration->size <= memfd_bytes;
    CHECK_OR_ABORT(code == absl::StatusCode::kOk || code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kResourceExhausted);
    // Refused only for a reason: unsealed or too small memory, or the session's buffer limit.
    if (code == absl::StatusCode::kOk) CHECK_OR_ABORT(fits && reply->buffer_id != 0);
    if (fits && code != absl::StatusCode::kOk) {
      CHECK_OR_ABORT(code == absl::StatusCode::kResourceExhausted);
    }
  } else if (std::holds_alternative<baton::daemon::SessionRegisterDevice>(*decoded) ||
             std::holds_alternative<baton::daemon::SessionRegisterEvents>(*decoded)) {
    // This server has no device: refused for that, or for the session's buffer limit first.
    CHECK_OR_ABORT(code == absl::StatusCode::kFailedPrecondition ||
                   code == absl::StatusCode::kResourceExhausted);
  } else {
    CHECK_OR_ABORT(std::holds_alternative<SessionRelease>(*decoded));
    CHECK_OR_ABORT(code == absl::StatusCode::kOk || code == absl::StatusCode::kNotFound);
  }
  return true;
}

// Seed inputs: whole conversations, so that a short run starts past the framing.
constexpr uint8_t kValidHeader = 0x10;
constexpr uint8_t kSealedMemfd = 0x01;
constexpr uint8_t kPage = 0x04;  // a memfd of 4096 bytes

// A record whose bytes follow a valid header: a request of `type` with `size` and `buffer_id`.
std::string Record(uint8_t control, baton::session::RequestType type, uint64_t size = 0,
                   uint64_t buffer_id = 0, const std::string& name = "") {
  baton::session::Request request;
  request.type = static_cast<uint32_t>(type);
  request.size = size;
  request.buffer_id = buffer_id;
  std::memcpy(request.client_name, name.data(), std::min(name.size(), sizeof(request.client_name)));
  const char* from = reinterpret_cast<const char*>(&request) + 8;
  // A record holds at most 255 bytes: the rest of the request reads as zeros.
  const size_t length = std::min<size_t>(sizeof(request) - 8, 255);
  std::string record = {static_cast<char>(control | kValidHeader), static_cast<char>(length)};
  return record + std::string(from, length);
}

std::vector<std::pair<std::string, std::string>> Seeds() {
  using baton::session::RequestType;
  const std::string open = Record(0, RequestType::kOpen, 0, 0, "fuzz");
  return {
      {"open", open},
      {"register-release", open + Record(kSealedMemfd | kPage, RequestType::kRegister, 4096) +
                               Record(0, RequestType::kRelease, 0, 1)},
      {"register-unsealed", open + Record(0x02 | kPage, RequestType::kRegister, 4096)},
      {"register-without-memfd", open + Record(0, RequestType::kRegister, 4096)},
      {"before-open", Record(0, RequestType::kRelease, 0, 1) + open},
      {"junk", std::string("\x00\x04junk", 6)},
  };
}

}  // namespace

// With BATON_FUZZ_SEEDS naming the corpus directory (scripts/fuzz.sh), writes the seed inputs
// there before libFuzzer reads it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("BATON_FUZZ_SEEDS"); dir != nullptr && *dir != '\0') {
    for (const auto& [name, input] : Seeds()) {
      std::ofstream(absl::StrCat(dir, "/seed-", name), std::ios::binary) << input;
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& fixture = TheFixture();
  {
    // Connected when the next datagram goes out, so that every connection the server accepted
    // has been served (and counted) by the time the input ends.
    std::unique_ptr<Connection> connection;
    size_t at = 0;
    while (at + 2 <= size) {
      const uint8_t control = data[at];
      const size_t length = std::min<size_t>(data[at + 1], size - at - 2);
      const uint8_t* bytes = data + at + 2;
      at += 2 + length;
      std::vector<std::byte> datagram;
      if ((control & 0x10) != 0) {
        // A valid magic and version, then the input from `type` on, zero-filled to a request.
        baton::session::Request request;
        std::memset(reinterpret_cast<char*>(&request) + 8, 0, sizeof(request) - 8);
        std::memcpy(reinterpret_cast<char*>(&request) + 8, bytes,
                    std::min(length, sizeof(request) - 8));
        const auto* raw = reinterpret_cast<const std::byte*>(&request);
        datagram.assign(raw, raw + sizeof(request));
      } else {
        const auto* raw = reinterpret_cast<const std::byte*>(bytes);
        datagram.assign(raw, raw + length);
      }
      const int descriptors = (control & 3) == 0 ? 0 : (control & 3) == 3 ? 2 : 1;
      if (connection == nullptr) connection = std::make_unique<Connection>(fixture.path);
      if (!Exchange(*connection, datagram, descriptors, control)) connection.reset();
    }
  }
  fixture.Settle();
  return 0;
}
