// A local user who maps as much as the daemon lets it: thousands of one-page buffers, sparse
// sealed memfds of terabytes that cost it nothing. Each limit refuses with RESOURCE_EXHAUSTED
// naming itself, and a job within its limits still opens sessions, registers, joins and runs
// its collectives; closing the attacker's sessions gives their share back. (The test runs as
// one uid: the per-uid and total limits across uids are in tests/daemon/session_registry_test.cc.)

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/session_protocol.h"
#include "common/unix_socket.h"
#include "tests/integration/test_cluster.h"
#include "tests/testing/raw_session.h"

namespace baton {
namespace {

using testing::MustConnect;
using testing::RawSession;
using testing::TestCluster;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr int kBuffersPerSession = 64;
constexpr int kBuffersPerUid = 160;

// A sealed memfd of `bytes` that holds no memory: the client never touches it.
class SparseMemfd {
 public:
  explicit SparseMemfd(uint64_t bytes)
      : fd_(memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING)) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0) << "errno " << errno;
    EXPECT_EQ(fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  }
  ~SparseMemfd() { close(fd_); }
  SparseMemfd(const SparseMemfd&) = delete;
  SparseMemfd& operator=(const SparseMemfd&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

absl::StatusOr<std::unique_ptr<RawSession>> Open(const TestCluster& cluster) {
  return RawSession::Connect(cluster.socket(0));
}

// Registers `bytes` of `fd` in `session`.
absl::StatusOr<uint64_t> Register(RawSession& session, int fd, uint64_t bytes) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegister);
  request.size = bytes;
  absl::StatusOr<session::Reply> reply = session.Exchange(request, fd);
  if (!reply.ok()) return reply.status();
  return reply->buffer_id;
}

// Registers `fd` (of `bytes`) again and again, at most `most` times, until refused: how many
// were accepted, and the refusal (OK if none came).
struct Filled {
  int accepted = 0;
  absl::Status refused;
};
Filled FillWith(RawSession& session, int fd, uint64_t bytes, int most) {
  Filled filled;
  for (int i = 0; i < most; ++i) {
    absl::StatusOr<uint64_t> id = Register(session, fd, bytes);
    if (!id.ok()) {
      filled.refused = id.status();
      break;
    }
    ++filled.accepted;
  }
  return filled;
}

// Ends a session and waits (at most 10 s) until the daemon has closed it: then its buffers are
// unmapped.
void CloseAndWait(std::unique_ptr<RawSession> session) {
  shutdown(session->fd(), SHUT_WR);
  session::Reply stale;
  int stray = -1;
  while (true) {
    absl::StatusOr<size_t> got =
        RecvPacket(session->fd(), &stale, sizeof(stale), &stray, absl::Now() + absl::Seconds(10));
    if (stray >= 0) close(stray);
    stray = -1;
    if (!got.ok() || *got == 0) break;
  }
}

// A job of two ranks on the daemon: each connects, allocates (registers) its buffer, joins and
// all-reduces 1024 floats; the sums must be right.
void RunJob(const TestCluster& cluster) {
  std::unique_ptr<Client> root = MustConnect(cluster.socket(0));
  ASSERT_NE(root, nullptr);
  StatusOr<std::string> id = root->CreateCommId();
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr size_t kCount = 1024;
  testing::RunRanks(
      cluster, *id, 2, [](int) { return 0; },
      [&](int rank, Communicator& comm, Client& client) {
        StatusOr<void*> memory = client.Allocate(kCount * sizeof(float));
        ASSERT_TRUE(memory.ok()) << "rank " << rank << ": " << memory.status();
        auto* data = static_cast<float*>(*memory);
        for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank + i);
        Status status = comm.AllReduce(data, data, kCount, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_TRUE(status.ok()) << "rank " << rank << ": " << status;
        EXPECT_TRUE(testing::ElementsAre(data, kCount, [](size_t i) { return 1 + 2 * i; }));
        EXPECT_TRUE(comm.Destroy().ok());
      });
}

void ExpectRefusedBy(const absl::Status& status, const std::string& limit) {
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("(" + limit + " = "), std::string::npos) << status;
}

TEST(MemoryLimitsTest, ALocalUserFillingItsLimitsIsRefusedByNameAndOthersCarryOn) {
  TestCluster cluster(1, {absl::StrCat("--max_buffers_per_session=", kBuffersPerSession),
                          absl::StrCat("--max_buffers_per_uid=", kBuffersPerUid)});
  ASSERT_TRUE(cluster.ok());

  // One-page buffers, as fast as they go: the session's limit stops them.
  absl::StatusOr<std::unique_ptr<RawSession>> pages = Open(cluster);
  ASSERT_TRUE(pages.ok()) << pages.status();
  SparseMemfd page(kPage);
  Filled filled = FillWith(**pages, page.fd(), kPage, 10 * kBuffersPerSession);
  EXPECT_EQ(filled.accepted, kBuffersPerSession);
  ExpectRefusedBy(filled.refused, "max_buffers_per_session");

  // Terabytes of sparse memory (the default limits: 2 TiB a session, 4 TiB a uid): 128 TiB at
  // once, then 1 TiB at a time.
  absl::StatusOr<std::unique_ptr<RawSession>> sparse = Open(cluster);
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  SparseMemfd huge(128 * kTiB);
  ExpectRefusedBy(Register(**sparse, huge.fd(), 128 * kTiB).status(),
                  "max_mapped_bytes_per_session");
  SparseMemfd tebibyte(kTiB);
  filled = FillWith(**sparse, tebibyte.fd(), kTiB, 100);
  EXPECT_EQ(filled.accepted, 2);
  ExpectRefusedBy(filled.refused, "max_mapped_bytes_per_session");

  // Sessions within their limits still do everything a job needs.
  RunJob(cluster);

  // The uid's bytes: another session gets what is left of the uid's 4 TiB (2 TiB less the
  // one-page buffers), which is one more TiB, and no more.
  absl::StatusOr<std::unique_ptr<RawSession>> more_sparse = Open(cluster);
  ASSERT_TRUE(more_sparse.ok()) << more_sparse.status();
  filled = FillWith(**more_sparse, tebibyte.fd(), kTiB, 100);
  EXPECT_EQ(filled.accepted, 1);
  ExpectRefusedBy(filled.refused, "max_mapped_bytes_per_uid");
  CloseAndWait(*std::move(more_sparse));

  // The uid's buffers: more sessions of one-page buffers until its limit stops them.
  std::vector<std::unique_ptr<RawSession>> filling;
  absl::Status refused;
  for (int s = 0; s < 10 && refused.ok(); ++s) {
    absl::StatusOr<std::unique_ptr<RawSession>> session = Open(cluster);
    ASSERT_TRUE(session.ok()) << session.status();
    refused = FillWith(**session, page.fd(), kPage, kBuffersPerSession).refused;
    filling.push_back(*std::move(session));
  }
  ExpectRefusedBy(refused, "max_buffers_per_uid");

  // Closing the attacker's sessions gives their share back: the job runs again.
  CloseAndWait(*std::move(pages));
  for (std::unique_ptr<RawSession>& session : filling) CloseAndWait(std::move(session));
  RunJob(cluster);
  absl::StatusOr<std::unique_ptr<RawSession>> after = Open(cluster);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(Register(**after, page.fd(), kPage).ok());
}

}  // namespace
}  // namespace baton
