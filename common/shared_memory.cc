#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton {
namespace {

// Maps `size` bytes of fd (at least one page, so that zero-size buffers still get an address).
absl::StatusOr<void*> MapFd(int fd, size_t size, const std::string& name) {
  void* data = mmap(nullptr, size == 0 ? 1 : size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS(absl::StrCat("mmap of ", name));
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(const std::string& name,
                                                                   size_t size) {
  if (name.empty() || name[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory name '", name, "' must start with '/'"));
  }
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return BATON_ERRNO_STATUS(absl::StrCat("shm_open(", name, ")"));
  // ftruncate to at least one byte: mapping a zero-length object is an error.
  if (ftruncate(fd, static_cast<off_t>(size == 0 ? 1 : size)) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("ftruncate of ", name));
    close(fd);
    shm_unlink(name.c_str());
    return status;
  }
  absl::StatusOr<void*> data = MapFd(fd, size, name);
  close(fd);
  if (!data.ok()) {
    shm_unlink(name.c_str());
    return data.status();
  }
  return std::unique_ptr<SharedMemory>(new SharedMemory(name, *data, size, true));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Open(const std::string& name,
                                                                 size_t size) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory name '", name, "' must be '/' followed by a plain name"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return BATON_ERRNO_STATUS(absl::StrCat("shm_open(", name, ")"));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("fstat of ", name));
    close(fd);
    return status;
  }
  if (static_cast<size_t>(st.st_size) < size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared memory ", name, " holds ", st.st_size,
                                                   " bytes, fewer than the ", size, " registered"));
  }
  absl::StatusOr<void*> data = MapFd(fd, size, name);
  close(fd);
  if (!data.ok()) return data.status();
  return std::unique_ptr<SharedMemory>(new SharedMemory(name, *data, size, false));
}

void SharedMemory::Unlink() {
  if (owns_name_) {
    shm_unlink(name_.c_str());
    owns_name_ = false;
  }
}

SharedMemory::~SharedMemory() {
  munmap(data_, size_ == 0 ? 1 : size_);
  Unlink();
}

}  // namespace baton
