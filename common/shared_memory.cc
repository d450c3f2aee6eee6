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
absl::StatusOr<void*> MapFd(int fd, size_t size) {
  void* data = mmap(nullptr, size == 0 ? 1 : size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of shared memory");
  return data;
}

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(size_t size, const char* label) {
  const int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return BATON_ERRNO_STATUS("memfd_create");
  // At least one byte: mapping a zero-length object is an error.
  if (ftruncate(fd, static_cast<off_t>(size == 0 ? 1 : size)) != 0) {
    absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("ftruncate of shared memory to ", size));
    close(fd);
    return status;
  }
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    absl::Status status = BATON_ERRNO_STATUS("sealing shared memory");
    close(fd);
    return status;
  }
  absl::StatusOr<void*> data = MapFd(fd, size);
  if (!data.ok()) {
    close(fd);
    return data.status();
  }
  return std::unique_ptr<SharedMemory>(new SharedMemory(*data, size, fd));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Map(int fd, size_t size) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return BATON_ERRNO_STATUS("fstat of a passed descriptor");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("the passed descriptor is not shared memory (a memfd)");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(
        "the passed shared memory is not sealed against shrinking (F_SEAL_SHRINK)");
  }
  if (static_cast<uint64_t>(st.st_size) < size) {
    return absl::InvalidArgumentError(absl::StrCat("the passed shared memory holds ", st.st_size,
                                                   " bytes, fewer than the ", size, " registered"));
  }
  absl::StatusOr<void*> data = MapFd(fd, size);
  if (!data.ok()) return data.status();
  return std::unique_ptr<SharedMemory>(new SharedMemory(*data, size, -1));
}

void SharedMemory::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

SharedMemory::~SharedMemory() {
  munmap(data_, size_ == 0 ? 1 : size_);
  CloseFd();
}

}  // namespace baton
