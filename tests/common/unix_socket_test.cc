#include "common/unix_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds_), 0);
  }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  int fds_[2] = {-1, -1};
};

TEST_F(UnixSocketTest, CredentialsComeFromTheKernel) {
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(fds_[0]);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_EQ(peer->uid, getuid());
  EXPECT_EQ(peer->gid, getgid());
}

TEST_F(UnixSocketTest, MessagesAndADescriptorArriveWhole) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_TRUE(SendPacket(fds_[0], "abc", 3, pipe_fds[1]).ok());
  close(pipe_fds[1]);
  char buffer[16] = {};
  int received = -1;
  absl::StatusOr<size_t> got = RecvPacket(fds_[1], buffer, sizeof(buffer), &received);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 3u);
  EXPECT_STREQ(buffer, "abc");
  ASSERT_GE(received, 0);
  ASSERT_EQ(write(received, "x", 1), 1);  // the same pipe
  char x = 0;
  ASSERT_EQ(read(pipe_fds[0], &x, 1), 1);
  EXPECT_EQ(x, 'x');
  close(received);
  close(pipe_fds[0]);
  // Without a descriptor.
  ASSERT_TRUE(SendPacket(fds_[0], "de", 2).ok());
  got = RecvPacket(fds_[1], buffer, sizeof(buffer), &received);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 2u);
  EXPECT_EQ(received, -1);
}

TEST_F(UnixSocketTest, OversizedMessagesExtraDescriptorsAndSilenceAreErrors) {
  char big[64] = {};
  ASSERT_TRUE(SendPacket(fds_[0], big, sizeof(big)).ok());
  char small[8];
  int received = -1;
  EXPECT_EQ(RecvPacket(fds_[1], small, sizeof(small), &received).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing within the deadline.
  EXPECT_EQ(
      RecvPacket(fds_[1], small, sizeof(small), &received, absl::Now() + absl::Milliseconds(50))
          .status()
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  // The peer closed: zero bytes.
  close(fds_[0]);
  fds_[0] = -1;
  absl::StatusOr<size_t> got = RecvPacket(fds_[1], small, sizeof(small), &received);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 0u);
}

TEST(UnixSocketListenTest, ListenConnectAndPathLimits) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/baton-unix-test.", getpid());
  absl::StatusOr<int> listener = ListenUnix(path, 0600);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<int> client = ConnectUnix(path);
  ASSERT_TRUE(client.ok()) << client.status();
  const int server = accept(*listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(server);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->pid, getpid());
  close(server);
  close(*client);
  close(*listener);
  unlink(path.c_str());
  EXPECT_EQ(ConnectUnix(std::string(200, 'x')).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ConnectUnix(path).ok());  // nobody listens
}

}  // namespace
}  // namespace baton
