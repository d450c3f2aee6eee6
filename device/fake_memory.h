#pragma once

// The host fake's memory (device/host_fake.h) and its process-wide state. "Device memory" is
// sealed memfds mapped MAP_SHARED, back to back in one reserved range per allocation; Registry is
// what CUDA keeps per process: that memory and the mappings of other processes' exports, the
// registered host memory and the streams. Internal to the host fake (target baton_device).
//
// Threads: every function and object here may be used from several threads at once.

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "device/device.h"
#include "device/fake_stream.h"

namespace baton::device::fake {

// Device i's uuid: these 14 bytes, then i as two decimal digits.
inline constexpr absl::string_view kUuidPrefix = "baton-fake-gpu";
std::array<uint8_t, 16> UuidOf(int ordinal);

// The page size; fake device memory comes in whole pages.
size_t PageBytes();
uint64_t RoundUpToPage(uint64_t bytes);

// "0x<hex>", for error messages.
std::string Address(uintptr_t address);
std::string Address(const void* ptr);

// A process-unique buffer id for a new allocation or mapping (never 0, never reused).
uint64_t NextBufferId();

// A close-on-exec memfd named `name` of `bytes`, sealed against shrinking, growing and further
// sealing.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const char* name, uint64_t bytes);

// A close-on-exec duplicate of `fd`.
absl::StatusOr<UniqueFd> DupCloexec(int fd);

// Checks that `fd` can be mapped for `bytes` without ever faulting: a memfd (or other shmem
// file) sealed against shrinking and at least that large. `what` names it in errors, which are
// InvalidArgument.
absl::Status CheckSealedMemfd(int fd, uint64_t bytes, absl::string_view what);

// Maps the segments (`fds[i]`, `sizes[i]` bytes each, `total` in all) back to back in one
// reserved range, as cuMemMap does inside one cuMemAddressReserve; returns its base, for munmap
// of `total` bytes. The descriptors may be closed afterwards.
absl::StatusOr<void*> MapContiguous(const std::vector<int>& fds, const std::vector<uint64_t>& sizes,
                                    uint64_t total);

// What CUDA keeps per process: device memory and imported mappings, registered host memory and
// the streams. Process-wide, so that every HostFakeDevice of a process (the test's, and the one
// libbaton opens) sees the same memory and streams, as every user of CUDA in a process does.
class Registry {
 public:
  // What a range of fake device memory is.
  enum class Kind {
    kAllocation,   // exportable
    kUnshareable,  // device memory that cannot be exported
    kMapping,      // another process's export, mapped here
  };
  struct Region {
    uint64_t size = 0;
    Kind kind = Kind::kAllocation;
    int ordinal = 0;
    uint64_t buffer_id = 0;
    std::vector<uint64_t> segment_sizes;  // kAllocation
    std::vector<UniqueFd> segment_fds;    // kAllocation: what Export duplicates
  };

  // The process's registry.
  static Registry& Get();

  void AddRegion(const void* base, Region region) {
    absl::MutexLock lock(&mu_);
    regions_[reinterpret_cast<uintptr_t>(base)] = std::move(region);
  }
  void RemoveRegion(const void* base) {
    absl::MutexLock lock(&mu_);
    regions_.erase(reinterpret_cast<uintptr_t>(base));
  }
  bool IsDeviceMemory(const void* ptr, size_t bytes) const {
    absl::MutexLock lock(&mu_);
    const auto it = FindRegion(ptr);
    return it != regions_.end() && bytes <= End(it) - reinterpret_cast<uintptr_t>(ptr);
  }
  // Device::Export of the region that holds `ptr`.
  absl::StatusOr<ExportedMemory> Export(const void* ptr, size_t bytes) const;
  absl::StatusOr<uint64_t> BufferId(const void* ptr) const {
    absl::MutexLock lock(&mu_);
    const auto it = FindRegion(ptr);
    if (it == regions_.end()) {
      return absl::NotFoundError(
          absl::StrCat(Address(ptr), " is not fake device memory of this process"));
    }
    return it->second.buffer_id;
  }

  // AlreadyExists for a range that overlaps one added before.
  absl::Status AddHostRange(const void* data, size_t bytes);
  void RemoveHostRange(const void* data) {
    absl::MutexLock lock(&mu_);
    host_ranges_.erase(reinterpret_cast<uintptr_t>(data));
  }
  bool IsRegisteredHost(const void* data, size_t bytes) const;

  void AddStream(const StreamImpl* stream) {
    absl::MutexLock lock(&mu_);
    streams_.insert(stream);
  }
  // Once this returns, no Enqueue reaches `stream`.
  void RemoveStream(const StreamImpl* stream) {
    absl::MutexLock lock(&mu_);
    streams_.erase(stream);
  }
  // Enqueues make(stream) on `handle` (nullptr: the default stream). `make` runs while the
  // stream cannot go away, so what it does at call time (an event's count) happens iff the work
  // is enqueued. InvalidArgument for a handle that is not a live stream.
  template <typename Make>
  absl::Status Enqueue(StreamHandle handle, Make make);

 private:
  Registry() = default;

  std::map<uintptr_t, Region>::const_iterator FindRegion(const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin()) return regions_.end();
    --it;
    return address < End(it) ? it : regions_.end();
  }
  static uintptr_t End(std::map<uintptr_t, Region>::const_iterator it) {
    return it->first + it->second.size;
  }
  StreamImpl* DefaultStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);      // by base address
  std::map<uintptr_t, size_t> host_ranges_ ABSL_GUARDED_BY(mu_);  // by first address
  std::set<const StreamImpl*> streams_ ABSL_GUARDED_BY(mu_);
  // The legacy default stream: started on first use, lives as long as the process. A child
  // forked after it started lacks its thread, so a child starts its own (pid tells).
  StreamImpl* default_stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  pid_t default_stream_pid_ ABSL_GUARDED_BY(mu_) = 0;
};

template <typename Make>
absl::Status Registry::Enqueue(StreamHandle handle, Make make) {
  absl::MutexLock lock(&mu_);
  StreamImpl* stream = nullptr;
  if (handle == nullptr) {
    stream = DefaultStream();
  } else {
    const auto it = streams_.find(static_cast<const StreamImpl*>(handle));
    if (it == streams_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stream ", Address(handle), " is not a live stream of the host fake"));
    }
    stream = const_cast<StreamImpl*>(*it);
  }
  stream->Enqueue(make(*stream));
  return absl::OkStatus();
}

// A range this process mapped and listed as device memory; unlisted, then unmapped, when
// destroyed (unlisted first, so that no Export hands out descriptors of freed memory and no
// later mapping at the same address is mistaken for it).
class ListedRange {
 public:
  ListedRange(void* data, uint64_t size, Registry::Region region) : data_(data), size_(size) {
    Registry::Get().AddRegion(data, std::move(region));
  }
  ~ListedRange();
  ListedRange(const ListedRange&) = delete;
  ListedRange& operator=(const ListedRange&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void* data_;
  uint64_t size_;
};

// Memory of this process (kAllocation or kUnshareable), mapped at `data`.
class FakeAllocation final : public Allocation {
 public:
  FakeAllocation(void* data, uint64_t size, Registry::Region region)
      : range_(data, size, std::move(region)) {}
  void* data() const override { return range_.data(); }
  size_t size() const override { return range_.size(); }

 private:
  ListedRange range_;
};

// Another process's export (kMapping), mapped at `data`.
class FakeMapping final : public Mapping {
 public:
  FakeMapping(void* data, uint64_t size, Registry::Region region)
      : ordinal_(region.ordinal), range_(data, size, std::move(region)) {}
  void* data() const override { return range_.data(); }
  size_t size() const override { return range_.size(); }
  int ordinal() const override { return ordinal_; }

 private:
  const int ordinal_;
  ListedRange range_;
};

// Host memory added to the registry's host ranges; removed by the destructor.
class FakeHostRegistration final : public HostRegistration {
 public:
  explicit FakeHostRegistration(const void* data) : data_(data) {}
  ~FakeHostRegistration() override { Registry::Get().RemoveHostRange(data_); }
  FakeHostRegistration(const FakeHostRegistration&) = delete;
  FakeHostRegistration& operator=(const FakeHostRegistration&) = delete;

 private:
  const void* data_;
};

}  // namespace baton::device::fake
