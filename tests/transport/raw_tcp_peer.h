#pragma once

// A peer under a TCP transport test's control: raw loopback sockets that speak the frame protocol
// (transport/tcp/frame.h) and the handshake (transport/tcp/handshake_io.h) by hand, to play a
// misbehaving, slow or corrupting peer. The endpoints they talk to have no handshake keys. Also
// what the TCP tests share otherwise: stats, deadlines, payload patterns, and one message down
// each receive path between two endpoints.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/socket.h"
#include "transport/transport.h"

namespace baton::transport {

// `endpoint`'s counters of its link with `peer`; all zero if it has none.
inline LinkStats StatsFor(const Endpoint& endpoint, const std::string& peer) {
  for (const LinkStats& link : endpoint.Stats()) {
    if (link.peer == peer) return link;
  }
  return LinkStats{};
}

inline absl::Time Deadline(absl::Duration timeout = absl::Seconds(30)) {
  return absl::Now() + timeout;
}

inline int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// A loopback socket bound to port 0, optionally listening: a peer under the test's control.
struct RawListener {
  FileDescriptor fd;
  std::string address;
};
inline RawListener BindLoopback(bool listening) {
  RawListener raw{FileDescriptor(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), ""};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(raw.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(raw.fd.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  if (listening) {
    EXPECT_EQ(listen(raw.fd.get(), 16), 0);
  }
  raw.address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  return raw;
}

inline FileDescriptor AcceptWithin(int listener, absl::Duration timeout) {
  pollfd pfd{listener, POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return {};
  return FileDescriptor(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

inline FileDescriptor RawConnect(const std::string& address) {
  FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(PortOf(address)));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

inline void WriteRaw(int fd, ConstByteSpan bytes) {
  std::array<iovec, 1> iov{iovec{const_cast<std::byte*>(bytes.data()), bytes.size()}};
  size_t written = 0;
  ASSERT_TRUE(WriteFull(fd, iov, Deadline(), &written).ok());
}

inline void WriteFrame(int fd, const FrameHeader& header, ConstByteSpan payload) {
  std::array<std::byte, kFrameHeaderBytes> bytes;
  EncodeFrameHeader(header, bytes);
  WriteRaw(fd, bytes);
  WriteRaw(fd, payload);
}

// A credit frame (transport/flow_control.h) as a raw peer's first frame after the handshake, on
// a plain connection: enough credit that the endpoint never waits for more, nor sends by
// rendezvous.
inline CreditPayload GenerousCredit() {
  return EncodeCredit(
      CreditGrant{.epoch = 1, .limit = uint64_t{1} << 50, .eager_max = uint64_t{1} << 40});
}
inline void WriteGrant(int fd) {
  const CreditPayload payload = GenerousCredit();
  WriteFrame(fd, FrameHeader{FrameType::kCredit, Tag{}, payload.size()}, payload);
}

// The connecting side of the handshake, introducing `fd`'s end as `address` to the endpoint
// whose address is `acceptor` (empty: the address `fd` is connected to), with no key (as the
// endpoints here have none).
inline void WriteHello(int fd, const std::string& address, std::string acceptor = "") {
  if (acceptor.empty()) {
    sockaddr_in peer{};
    socklen_t length = sizeof(peer);
    ASSERT_EQ(getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length), 0);
    char host[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, host, sizeof(host));
    acceptor = absl::StrCat(host, ":", ntohs(peer.sin_port));
  }
  const absl::Status introduced =
      tcp::Introduce(fd, address, acceptor, kNoHandshakeKey, /*seal=*/false,
                     Deadline(absl::Seconds(10)), [] { return false; })
          .status();
  EXPECT_TRUE(introduced.ok()) << introduced;
  WriteGrant(fd);
  // The endpoint's first frame, its credit, read here: a raw peer that closed with it unread
  // would reset the connection, and the endpoint could lose what the peer sent before.
  std::array<std::byte, kFrameHeaderBytes + kCreditPayloadBytes> credit;
  size_t read = 0;
  EXPECT_TRUE(ReadFull(fd, credit, Deadline(absl::Seconds(10)), &read).ok());
  absl::StatusOr<FrameHeader> header =
      DecodeFrameHeader(std::span(credit).first<kFrameHeaderBytes>());
  EXPECT_TRUE(header.ok() && header->type == FrameType::kCredit) << "no credit frame first";
}

// The accepting side of the handshake, as the raw listener at `self`, then its grant
// (WriteGrant): the connecting endpoint's address.
inline std::string AcceptHello(int fd, const std::string& self) {
  absl::StatusOr<tcp::Admitted> admitted =
      tcp::Admit(fd, self, nullptr, /*seal=*/false, Deadline(absl::Seconds(10)));
  EXPECT_TRUE(admitted.ok()) << admitted.status();
  if (admitted.ok()) WriteGrant(fd);
  return admitted.ok() ? admitted->peer : "";
}

// The next frame's header, whatever its type (ReadHeader skips flow control).
inline FrameHeader ReadAnyHeader(int fd) {
  std::array<std::byte, kFrameHeaderBytes> bytes;
  size_t read = 0;
  const absl::Status status = ReadFull(fd, bytes, Deadline(absl::Seconds(10)), &read);
  EXPECT_TRUE(status.ok()) << status;
  absl::StatusOr<FrameHeader> header = DecodeFrameHeader(bytes);
  EXPECT_TRUE(header.ok()) << header.status();
  return header.ok() ? *header : FrameHeader{};
}

// The header of the next frame on a plain connection that is not a credit or clear-to-send
// frame (those are read and dropped).
inline FrameHeader ReadHeader(int fd) {
  while (true) {
    const FrameHeader header = ReadAnyHeader(fd);
    if (header.type != FrameType::kCredit && header.type != FrameType::kClearToSend) {
      return header;
    }
    std::array<std::byte, kCreditPayloadBytes> payload;
    size_t read = 0;
    EXPECT_TRUE(ReadFull(fd, std::span(payload).first(header.payload_bytes),
                         Deadline(absl::Seconds(10)), &read)
                    .ok());
  }
}

inline std::string ReadString(int fd, size_t size) {
  std::string text(size, '\0');
  size_t read = 0;
  EXPECT_TRUE(ReadFull(fd, std::as_writable_bytes(std::span(text.data(), text.size())),
                       Deadline(absl::Seconds(10)), &read)
                  .ok());
  return text;
}

// `size` bytes of a pattern that differs with `seed`.
inline std::vector<std::byte> Pattern(size_t size, uint64_t seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed * 17) >> 3);
  return bytes;
}

// Sends three messages of `size` bytes from `from` to `to`, one down each receive path: posted
// before the message is sent; sent first, kept as an unexpected message and copied when the
// receive comes; consumed a piece at a time. Their tags' seq are the next three of `*seq`. Checks
// that each arrives whole.
inline void ExpectEveryReceivePathDelivers(Endpoint& from, Endpoint& to, size_t size,
                                           uint64_t* seq) {
  const std::vector<std::byte> posted_data = Pattern(size, ++*seq);
  std::vector<std::byte> posted_into(size);
  std::unique_ptr<PostedRecv> posted =
      to.PostRecv(from.address(), Tag{.seq = *seq}, posted_into, Deadline(), nullptr);
  ASSERT_TRUE(from.Send(to.address(), Tag{.seq = *seq}, posted_data, Deadline()).ok());
  ASSERT_TRUE(posted->Wait().ok());
  EXPECT_TRUE(posted_into == posted_data);

  const std::vector<std::byte> unexpected_data = Pattern(size, ++*seq);
  ASSERT_TRUE(from.Send(to.address(), Tag{.seq = *seq}, unexpected_data, Deadline()).ok());
  std::vector<std::byte> unexpected_into(size);
  ASSERT_TRUE(to.Recv(from.address(), Tag{.seq = *seq}, unexpected_into, Deadline()).ok());
  EXPECT_TRUE(unexpected_into == unexpected_data);

  const std::vector<std::byte> consumed_data = Pattern(size, ++*seq);
  std::vector<std::byte> consumed_into(size);
  std::unique_ptr<PostedRecv> consumed = to.PostConsume(
      from.address(), Tag{.seq = *seq}, size, Deadline(), [&](size_t offset, ConstByteSpan piece) {
        std::copy(piece.begin(), piece.end(), consumed_into.data() + offset);
      });
  ASSERT_TRUE(from.Send(to.address(), Tag{.seq = *seq}, consumed_data, Deadline()).ok());
  ASSERT_TRUE(consumed->Wait().ok());
  EXPECT_TRUE(consumed_into == consumed_data);
}

// True once the endpoint has closed the raw connection (EOF or reset) within `timeout`; what it
// sent before (its credit frame, say) is read and dropped.
inline bool ClosedWithin(int fd, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    const int64_t wait = absl::ToInt64Milliseconds(until - absl::Now());
    if (wait <= 0 || poll(&pfd, 1, static_cast<int>(wait)) != 1) return false;
    std::array<char, 4096> bytes;
    if (recv(fd, bytes.data(), bytes.size(), 0) <= 0) return true;
  }
}

}  // namespace baton::transport
