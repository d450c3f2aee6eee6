// The TCP endpoint's limits on connections still in their handshake hold per source address
// under a global cap, and a dialling endpoint that is turned away at the door tries again until
// its deadline.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

std::unique_ptr<Endpoint> NewEndpoint(int max_pending, int max_pending_per_source) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  // Connections that never say hello hold their place for the whole test.
  options.handshake_timeout = absl::Seconds(60);
  options.max_pending_handshakes = max_pending;
  options.max_pending_handshakes_per_source = max_pending_per_source;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// A connection to `address` from the loopback address `source` (127.0.0.2 is another host as far
// as the endpoint can tell), which says nothing.
FileDescriptor SilentConnection(const std::string& address, const char* source) {
  FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(PortOf(address)));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

// Waits until at least `count` of `fds` have been closed by the other end (10 s at most); how
// many have.
size_t WaitForClosed(const std::vector<FileDescriptor>& fds, size_t count) {
  std::vector<bool> closed(fds.size(), false);
  size_t found = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (found < count && absl::Now() < deadline) {
    std::vector<pollfd> polled;
    for (const FileDescriptor& fd : fds) polled.push_back(pollfd{fd.get(), POLLIN, 0});
    if (poll(polled.data(), polled.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (closed[i] || polled[i].revents == 0) continue;
      char byte;
      if (recv(fds[i].get(), &byte, 1, MSG_DONTWAIT) <= 0) {
        closed[i] = true;
        ++found;
      }
    }
  }
  return found;
}

// One host holding idle connections gets its share of the handshake places and no more: the
// rest of its connections are closed on arrival, and a daemon on another address still gets in.
TEST(TcpLimitsTest, OneSourceCannotTakeEveryHandshakePlace) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*max_pending=*/8, /*per_source=*/2);
  ASSERT_NE(endpoint, nullptr);
  std::vector<FileDescriptor> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(SilentConnection(endpoint->address(), "127.0.0.2"));
  EXPECT_EQ(WaitForClosed(silent, 18), 18u);
  absl::StatusOr<std::unique_ptr<Endpoint>> peer = NewTcpEndpoint(TcpOptions{});
  ASSERT_TRUE(peer.ok()) << peer.status();
  const std::string payload = "through";
  ASSERT_TRUE((*peer)
                  ->Send(endpoint->address(), Tag{.seq = 1},
                         std::as_bytes(std::span(payload.data(), payload.size())), Deadline())
                  .ok());
  std::string received(payload.size(), '\0');
  EXPECT_TRUE(endpoint
                  ->Recv((*peer)->address(), Tag{.seq = 1},
                         std::as_writable_bytes(std::span(received.data(), received.size())),
                         Deadline())
                  .ok());
  EXPECT_EQ(received, payload);
}

// An endpoint with no room for another handshake closes new connections at once; the endpoint
// dialling it tries again, with backoff, and gets in once a place is free, within its deadline.
TEST(TcpLimitsTest, ARefusedDiallerRetriesUntilAPlaceIsFree) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*max_pending=*/1, /*per_source=*/1);
  ASSERT_NE(endpoint, nullptr);
  FileDescriptor holder = SilentConnection(endpoint->address(), "127.0.0.2");
  absl::StatusOr<std::unique_ptr<Endpoint>> peer = NewTcpEndpoint(TcpOptions{});
  ASSERT_TRUE(peer.ok()) << peer.status();
  const std::string payload = "patient";
  auto sent = std::async(std::launch::async, [&] {
    return (*peer)->Send(endpoint->address(), Tag{.seq = 2},
                         std::as_bytes(std::span(payload.data(), payload.size())), Deadline());
  });
  // Let a few attempts be turned away (correct either way), then free the place.
  if (sent.wait_for(std::chrono::milliseconds(300)) != std::future_status::timeout) {
    ADD_FAILURE() << "the send ended while no place was free: " << sent.get();
    return;
  }
  holder = FileDescriptor();
  const absl::Status status = sent.get();
  ASSERT_TRUE(status.ok()) << status;
  std::string received(payload.size(), '\0');
  EXPECT_TRUE(endpoint
                  ->Recv((*peer)->address(), Tag{.seq = 2},
                         std::as_writable_bytes(std::span(received.data(), received.size())),
                         Deadline())
                  .ok());
  EXPECT_EQ(received, payload);
}

// A dialler that is turned away until its deadline fails then, naming the peer.
TEST(TcpLimitsTest, ADiallerTurnedAwayUntilItsDeadlineFailsThen) {
  std::unique_ptr<Endpoint> endpoint = NewEndpoint(/*max_pending=*/1, /*per_source=*/1);
  ASSERT_NE(endpoint, nullptr);
  FileDescriptor holder = SilentConnection(endpoint->address(), "127.0.0.2");
  absl::StatusOr<std::unique_ptr<Endpoint>> peer = NewTcpEndpoint(TcpOptions{});
  ASSERT_TRUE(peer.ok()) << peer.status();
  const absl::Status status =
      (*peer)->Send(endpoint->address(), Tag{.seq = 3}, {}, absl::Now() + absl::Milliseconds(300));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(endpoint->address()), std::string::npos) << status;
}

}  // namespace
}  // namespace baton::transport
