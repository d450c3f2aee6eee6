#include "device/fake_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "device/fake_stream.h"

namespace baton::device::fake {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::atomic<uint64_t> next_buffer_id{1};

}  // namespace

std::array<uint8_t, 16> UuidOf(int ordinal) {
  std::array<uint8_t, 16> uuid{};
  std::memcpy(uuid.data(), kUuidPrefix.data(), kUuidPrefix.size());
  uuid[14] = static_cast<uint8_t>('0' + ordinal / 10);
  uuid[15] = static_cast<uint8_t>('0' + ordinal % 10);
  return uuid;
}

size_t PageBytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

uint64_t RoundUpToPage(uint64_t bytes) {
  const uint64_t page = PageBytes();
  return (bytes + page - 1) / page * page;
}

std::string Address(uintptr_t address) { return absl::StrCat("0x", absl::Hex(address)); }
std::string Address(const void* ptr) { return Address(reinterpret_cast<uintptr_t>(ptr)); }

uint64_t NextBufferId() { return next_buffer_id.fetch_add(1, std::memory_order_relaxed); }

absl::StatusOr<UniqueFd> CreateSealedMemfd(const char* name, uint64_t bytes) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return BATON_ERRNO_STATUS("memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return BATON_ERRNO_STATUS(absl::StrCat("ftruncate of a ", name, " memfd to ", bytes));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, kSeals) != 0) {
    return BATON_ERRNO_STATUS(absl::StrCat("sealing a ", name, " memfd"));
  }
  return fd;
}

absl::StatusOr<UniqueFd> DupCloexec(int fd) {
  UniqueFd copy(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) return BATON_ERRNO_STATUS("duplicating a fake device descriptor");
  return copy;
}

absl::Status CheckSealedMemfd(int fd, uint64_t bytes, absl::string_view what) {
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(what, " has no descriptor"));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "'s descriptor cannot be examined: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "'s descriptor is not a memfd"));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "'s descriptor is not a memfd (it has no seals)"));
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "'s memfd is not sealed against shrinking (F_SEAL_SHRINK)"));
  }
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "'s memfd holds ", st.st_size, " bytes, fewer than its ", bytes));
  }
  return absl::OkStatus();
}

// The reservation keeps other mappings out of the gaps while the segments fill it.
absl::StatusOr<void*> MapContiguous(const std::vector<int>& fds, const std::vector<uint64_t>& sizes,
                                    uint64_t total) {
  void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return BATON_ERRNO_STATUS("reserving a fake device address range");
  uint64_t offset = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    void* at = static_cast<char*>(base) + offset;
    if (mmap(at, sizes[i], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[i], 0) ==
        MAP_FAILED) {
      absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("mapping fake device segment ", i));
      munmap(base, total);
      return status;
    }
    offset += sizes[i];
  }
  return base;
}

Registry& Registry::Get() {
  static Registry* const registry = new Registry;  // never destroyed: streams may outlive main
  return *registry;
}

absl::StatusOr<ExportedMemory> Registry::Export(const void* ptr, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  const auto it = FindRegion(ptr);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat(Address(ptr), " is not fake device memory of this process"));
  }
  const Region& region = it->second;
  const uintptr_t base = it->first;
  if (bytes > End(it) - reinterpret_cast<uintptr_t>(ptr)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", bytes, " bytes at ", Address(ptr), " run past the end of their allocation (",
        region.size, " bytes at ", Address(base), ")"));
  }
  if (region.kind == Kind::kUnshareable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the fake device memory at ", Address(base),
        " cannot be shared with another process (as cudaMallocAsync pool memory); stage it"));
  }
  if (region.kind == Kind::kMapping) {
    return absl::FailedPreconditionError(
        absl::StrCat("the fake device memory at ", Address(base),
                     " was imported from another process; the host fake does not export it"));
  }
  ExportedMemory exported;
  exported.kind = ShareKind::kVmm;
  exported.device_uuid = UuidOf(region.ordinal);
  exported.base = it->first;
  exported.size = region.size;
  exported.buffer_id = region.buffer_id;
  exported.segment_sizes = region.segment_sizes;
  for (const UniqueFd& fd : region.segment_fds) {
    BATON_ASSIGN_OR_RETURN(UniqueFd copy, DupCloexec(fd.get()));
    exported.segment_fds.push_back(std::move(copy));
  }
  return exported;
}

absl::Status Registry::AddHostRange(const void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  // The first range that ends after `begin` is the only one that may overlap.
  auto next = host_ranges_.upper_bound(begin);
  if (next != host_ranges_.begin()) {
    const auto previous = std::prev(next);
    if (previous->first + previous->second > begin) next = previous;
  }
  if (next != host_ranges_.end() && next->first < begin + bytes) {
    // As cuMemHostRegister (cudaErrorHostMemoryAlreadyRegistered).
    return absl::AlreadyExistsError(absl::StrCat("host memory at ", Address(data), " (", bytes,
                                                 " bytes) overlaps memory already registered at ",
                                                 Address(next->first)));
  }
  host_ranges_[begin] = bytes;
  return absl::OkStatus();
}

bool Registry::IsRegisteredHost(const void* data, size_t bytes) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  auto it = host_ranges_.upper_bound(begin);
  if (it == host_ranges_.begin()) return false;
  --it;
  return begin - it->first < it->second && bytes <= it->second - (begin - it->first);
}

StreamImpl* Registry::DefaultStream() {
  const pid_t pid = getpid();
  if (default_stream_ == nullptr || default_stream_pid_ != pid) {
    // A parent's stream has no thread in a forked child: leave it (destroying it would join a
    // thread that is not there) and start one of our own.
    default_stream_ = new StreamImpl(/*listed=*/false);
    default_stream_pid_ = pid;
  }
  return default_stream_;
}

ListedRange::~ListedRange() {
  Registry::Get().RemoveRegion(data_);
  munmap(data_, size_);
}

}  // namespace baton::device::fake
