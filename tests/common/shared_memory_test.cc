#include "common/shared_memory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

std::string UniqueName() { return absl::StrCat("/baton-test.", getpid(), ".", rand()); }

bool NameExists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(SharedMemoryTest, BothMappingsSeeTheSameBytesAndNothingIsLeftBehind) {
  const std::string name = UniqueName();
  absl::StatusOr<std::unique_ptr<SharedMemory>> created = SharedMemory::Create(name, 4096);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<std::unique_ptr<SharedMemory>> opened = SharedMemory::Open(name, 4096);
  ASSERT_TRUE(opened.ok()) << opened.status();
  (*created)->Unlink();
  EXPECT_FALSE(NameExists(name));
  std::memcpy((*created)->data(), "baton", 6);
  EXPECT_STREQ(static_cast<const char*>((*opened)->data()), "baton");
}

TEST(SharedMemoryTest, ErrorsAreClear) {
  const std::string name = UniqueName();
  auto created = SharedMemory::Create(name, 100);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(SharedMemory::Create(name, 100).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(SharedMemory::Open(name, 1 << 20).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Open("/baton-test-absent", 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SharedMemory::Open("../etc/passwd", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  created->reset();
  EXPECT_FALSE(NameExists(name)) << "the creator unlinks on destruction";
}

}  // namespace
}  // namespace baton
