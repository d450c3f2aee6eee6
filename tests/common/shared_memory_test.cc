#include "common/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

namespace baton {
namespace {

TEST(SharedMemoryTest, BothMappingsSeeTheSameBytes) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> created = SharedMemory::Create(4096, "test");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_GE((*created)->fd(), 0);
  absl::StatusOr<std::unique_ptr<SharedMemory>> mapped = SharedMemory::Map((*created)->fd(), 4096);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->fd(), -1);  // a mapping does not keep the caller's descriptor
  std::memcpy((*created)->data(), "hello", 6);
  EXPECT_STREQ(static_cast<const char*>((*mapped)->data()), "hello");
  (*created)->CloseFd();
  EXPECT_EQ((*created)->fd(), -1);
  std::memcpy((*mapped)->data(), "world", 6);  // both mappings outlive the descriptor
  EXPECT_STREQ(static_cast<const char*>((*created)->data()), "world");
  // A zero-byte buffer still has an address.
  absl::StatusOr<std::unique_ptr<SharedMemory>> empty = SharedMemory::Create(0, "test");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_NE((*empty)->data(), nullptr);
  EXPECT_TRUE(SharedMemory::Map((*empty)->fd(), 0).ok());
}

TEST(SharedMemoryTest, CreatedMemoryCannotShrinkOrGrow) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> created = SharedMemory::Create(8192, "test");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_NE(ftruncate((*created)->fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate((*created)->fd(), 1 << 20), 0);
  // The seals themselves are sealed.
  EXPECT_NE(fcntl((*created)->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0);
}

TEST(SharedMemoryTest, MapRefusesWhatCouldShrinkUnderItOrIsTooSmall) {
  // A memfd without the shrink seal: its owner could truncate it and make accesses fault.
  const int unsealed = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  absl::StatusOr<std::unique_ptr<SharedMemory>> mapped = SharedMemory::Map(unsealed, 4096);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mapped.status().message().find("F_SEAL_SHRINK"), std::string::npos) << mapped.status();
  // Sealed, but smaller than claimed.
  ASSERT_EQ(fcntl(unsealed, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  mapped = SharedMemory::Map(unsealed, 8192);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mapped.status().message().find("fewer than the 8192"), std::string::npos);
  EXPECT_TRUE(SharedMemory::Map(unsealed, 4096).ok());
  close(unsealed);
  // A regular file cannot be sealed; a pipe is not memory at all.
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), 4096), 0);
  EXPECT_EQ(SharedMemory::Map(fileno(file), 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::fclose(file);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(SharedMemory::Map(pipe_fds[0], 1).status().code(), absl::StatusCode::kInvalidArgument);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace baton
