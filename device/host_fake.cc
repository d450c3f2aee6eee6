#include "device/host_fake.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace baton::device {
namespace {

constexpr char kMemoryName[] = "baton-fake-gpu";
constexpr char kEventName[] = "baton-fake-event";
// Device i's uuid: these 14 bytes, then i as two decimal digits.
constexpr absl::string_view kUuidPrefix = "baton-fake-gpu";
constexpr int kMaxDevices = 99;
// The fake's "device" holds at most this much per allocation; it also keeps sizes far from
// overflow.
constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 40;
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// WaitValue spins this long (yielding), then sleeps on the futex in slices this long: another
// process may store the word without a wake, so a slice bounds how late the store is seen.
constexpr absl::Duration kWaitSpin = absl::Microseconds(20);
constexpr absl::Duration kWaitSlice = absl::Milliseconds(1);

// The handle bytes of an exported event start with this tag.
constexpr absl::string_view kEventTag = "baton-fake-event";
constexpr uint64_t kEventMagic = 0x544e5645454b4146;  // "FAKEEVNT"
constexpr uint32_t kEventVersion = 1;

std::atomic<uint64_t> next_buffer_id{1};
std::atomic<uint64_t> dropped_operations{0};

size_t PageBytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

uint64_t RoundUpToPage(uint64_t bytes) {
  const uint64_t page = PageBytes();
  return (bytes + page - 1) / page * page;
}

// The stream-memory-operation condition: the count may wrap (cuStreamWaitValue32 GEQ).
bool Reached(uint32_t word, uint32_t value) { return static_cast<int32_t>(word - value) >= 0; }

// Words are shared between processes: the futex operations are the non-private ones.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

std::string Address(uintptr_t address) { return absl::StrCat("0x", absl::Hex(address)); }
std::string Address(const void* ptr) { return Address(reinterpret_cast<uintptr_t>(ptr)); }

std::array<uint8_t, 16> UuidOf(int ordinal) {
  std::array<uint8_t, 16> uuid{};
  std::memcpy(uuid.data(), kUuidPrefix.data(), kUuidPrefix.size());
  uuid[14] = static_cast<uint8_t>('0' + ordinal / 10);
  uuid[15] = static_cast<uint8_t>('0' + ordinal % 10);
  return uuid;
}

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

// Checks that `fd` can be mapped for `bytes` without ever faulting: a memfd (or other shmem
// file) sealed against shrinking and at least that large. `what` names it in errors.
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

// Maps the segments back to back in one reserved range, as cuMemMap does inside one
// cuMemAddressReserve: the reservation keeps other mappings out of the gaps while it fills.
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

// Told once a closure has run, or was dropped without running.
class Completion {
 public:
  void Finish(bool ran) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    ran_ = ran;
  }
  // Returns whether the closure ran.
  bool Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&finished_));
    return ran_;
  }

 private:
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ran_ ABSL_GUARDED_BY(mu_) = false;
};

// Kept by a closure: finishes its Completion when the closure is destroyed, run or dropped.
class CompletionGuard {
 public:
  explicit CompletionGuard(std::shared_ptr<Completion> completion)
      : completion_(std::move(completion)) {}
  ~CompletionGuard() { completion_->Finish(ran_); }
  CompletionGuard(const CompletionGuard&) = delete;
  CompletionGuard& operator=(const CompletionGuard&) = delete;
  void MarkRan() { ran_ = true; }

 private:
  std::shared_ptr<Completion> completion_;
  bool ran_ = false;
};

class StreamImpl;

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

  static Registry& Get() {
    static Registry* const registry = new Registry;  // never destroyed: streams may outlive main
    return *registry;
  }

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

class StreamImpl final : public FakeStream {
 public:
  // A listed stream is known to the registry while it lives (NewStream); the default stream is
  // not listed: the registry finds it by nullptr.
  explicit StreamImpl(bool listed) : listed_(listed) {
    if (listed_) Registry::Get().AddStream(this);
    thread_ = std::thread([this] { Run(); });
  }

  ~StreamImpl() override {
    if (listed_) Registry::Get().RemoveStream(this);
    stopping_.store(true, std::memory_order_release);
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
    std::deque<std::function<void()>> left;
    {
      absl::MutexLock lock(&mu_);
      left.swap(queue_);
    }
    const uint64_t dropped = left.size() + abandoned_.load(std::memory_order_relaxed);
    left.clear();  // Synchronize calls waiting on dropped work learn it here
    if (dropped > 0) {
      dropped_operations.fetch_add(dropped, std::memory_order_relaxed);
      spdlog::warn("host fake: a stream was destroyed with {} operation(s) not done; dropped",
                   dropped);
    }
  }

  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;

  StreamHandle handle() const override { return const_cast<StreamImpl*>(this); }

  void Enqueue(std::function<void()> work) override {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
  }

  size_t pending() const override {
    absl::MutexLock lock(&mu_);
    return queue_.size() + (running_ ? 1 : 0);
  }

  // True once destruction began: waits give up (AbandonWait) instead of blocking it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  void AbandonWait() { abandoned_.fetch_add(1, std::memory_order_relaxed); }

 private:
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  void Run() {
    SetThreadName("fake-stream");
    while (true) {
      std::function<void()> work;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &StreamImpl::HasWorkOrStop));
        if (stop_) return;
        work = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      work();
      {
        absl::MutexLock lock(&mu_);
        running_ = false;
      }
      // `work` is destroyed last: a CompletionGuard in it tells Synchronize that all is done.
    }
  }

  const bool listed_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> abandoned_{0};
  std::thread thread_;
};

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
  ~ListedRange() {
    Registry::Get().RemoveRegion(data_);
    munmap(data_, size_);
  }
  ListedRange(const ListedRange&) = delete;
  ListedRange& operator=(const ListedRange&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void* data_;
  uint64_t size_;
};

class FakeAllocation final : public Allocation {
 public:
  FakeAllocation(void* data, uint64_t size, Registry::Region region)
      : range_(data, size, std::move(region)) {}
  void* data() const override { return range_.data(); }
  size_t size() const override { return range_.size(); }

 private:
  ListedRange range_;
};

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

// The event's page: `recorded` counts Record calls, `completed` is the highest count whose
// captured work is done. Both wrap; Query compares them as the stream waits compare.
struct EventPage {
  uint64_t magic = kEventMagic;
  uint32_t version = kEventVersion;
  uint32_t reserved = 0;
  std::atomic<uint32_t> recorded{0};
  std::atomic<uint32_t> completed{0};
};

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "event words are shared between processes");

// An event's mapped page, shared by the event and the work it enqueued (an event destroyed
// while its record is queued is fine in CUDA too).
class EventMemory {
 public:
  EventMemory(void* data, size_t size) : data_(data), size_(size) {}
  ~EventMemory() { munmap(data_, size_); }
  EventMemory(const EventMemory&) = delete;
  EventMemory& operator=(const EventMemory&) = delete;
  EventPage* page() const { return static_cast<EventPage*>(data_); }

 private:
  void* data_;
  size_t size_;
};

class FakeEvent final : public Event {
 public:
  // `fd` is the page's memfd for a created event, invalid for an opened one.
  FakeEvent(std::shared_ptr<EventMemory> memory, UniqueFd fd)
      : memory_(std::move(memory)), fd_(std::move(fd)) {}

  absl::StatusOr<EventHandle> Export() const override {
    if (!fd_.valid()) {
      return absl::FailedPreconditionError(
          "an opened event cannot be exported again; export the event where it was created");
    }
    EventHandle handle;
    std::memcpy(handle.bytes.data(), kEventTag.data(), kEventTag.size());
    BATON_ASSIGN_OR_RETURN(handle.fd, DupCloexec(fd_.get()));
    return handle;
  }

  absl::Status Record(StreamHandle stream) override {
    return Registry::Get().Enqueue(stream, [this](StreamImpl&) {
      EventPage* page = memory_->page();
      const uint32_t count = page->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
      return [memory = memory_, count] {
        std::atomic<uint32_t>& completed = memory->page()->completed;
        // Raise, never lower: records from two streams (or processes) may finish out of order.
        uint32_t seen = completed.load(std::memory_order_relaxed);
        while (!Reached(seen, count) &&
               !completed.compare_exchange_weak(seen, count, std::memory_order_acq_rel)) {
        }
        FutexWake(&completed);
      };
    });
  }

  absl::StatusOr<bool> Query() override {
    const EventPage* page = memory_->page();
    const uint32_t recorded = page->recorded.load(std::memory_order_acquire);
    return Reached(page->completed.load(std::memory_order_acquire), recorded);
  }

 private:
  const std::shared_ptr<EventMemory> memory_;
  const UniqueFd fd_;
};

class FakeHostRegistration final : public HostRegistration {
 public:
  explicit FakeHostRegistration(const void* data) : data_(data) {}
  ~FakeHostRegistration() override { Registry::Get().RemoveHostRange(data_); }
  FakeHostRegistration(const FakeHostRegistration&) = delete;
  FakeHostRegistration& operator=(const FakeHostRegistration&) = delete;

 private:
  const void* data_;
};

class FakeKernels final : public DeviceKernels {
 public:
  transport::MemoryKind memory() const override { return transport::MemoryKind::kDevice; }
  void ReduceInto(collective::DataType type, collective::ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    collective::HostKernels().ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(collective::DataType type, collective::ReduceOp op, void* dst,
                  std::span<const void* const> srcs, size_t count) const override {
    collective::HostKernels().ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(collective::DataType type, void* data, size_t count, int divisor) const override {
    collective::HostKernels().Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    collective::HostKernels().Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override { collective::HostKernels().Zero(dst, bytes); }
  absl::Status last_error() const override { return absl::OkStatus(); }
};

class HostFakeDeviceImpl final : public HostFakeDevice {
 public:
  explicit HostFakeDeviceImpl(int devices) : devices_(devices) {}

  std::string Describe() const override {
    return absl::StrCat("host fake (", devices_, devices_ == 1 ? " device)" : " devices)");
  }
  int count() const override { return devices_; }

  absl::StatusOr<std::unique_ptr<Allocation>> Allocate(size_t bytes, int ordinal) override {
    return AllocateSegmented({bytes}, ordinal);
  }

  absl::StatusOr<std::unique_ptr<Allocation>> AllocateSegmented(std::vector<size_t> segment_sizes,
                                                                int ordinal) override;
  absl::StatusOr<std::unique_ptr<Allocation>> AllocateUnshareable(size_t bytes,
                                                                  int ordinal) override;

  bool IsDeviceMemory(const void* ptr, size_t bytes) const override {
    return Registry::Get().IsDeviceMemory(ptr, bytes);
  }
  absl::StatusOr<uint64_t> BufferId(const void* ptr) const override {
    return Registry::Get().BufferId(ptr);
  }
  absl::StatusOr<ExportedMemory> Export(const void* ptr, size_t bytes) override {
    return Registry::Get().Export(ptr, bytes);
  }
  absl::StatusOr<std::unique_ptr<Mapping>> Import(ExportedMemory memory) override;

  absl::StatusOr<std::unique_ptr<Event>> CreateIpcEvent() override;
  absl::StatusOr<std::unique_ptr<Event>> OpenIpcEvent(EventHandle handle) override;

  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* data, size_t bytes) override;
  absl::Status WaitValue(StreamHandle stream, const std::atomic<uint32_t>* word,
                         uint32_t value) override;
  absl::Status Synchronize(StreamHandle stream) override;
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override;

  absl::StatusOr<std::unique_ptr<DeviceKernels>> NewKernels(int ordinal) override {
    BATON_RETURN_IF_ERROR(CheckOrdinal(ordinal));
    return std::make_unique<FakeKernels>();
  }

  std::unique_ptr<FakeStream> NewStream() override {
    return std::make_unique<StreamImpl>(/*listed=*/true);
  }

 private:
  absl::Status CheckOrdinal(int ordinal) const {
    if (ordinal < 0 || ordinal >= devices_) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ordinal ", ordinal, " is not one of the host fake's ", devices_));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int> OrdinalOf(const std::array<uint8_t, 16>& uuid) const;

  const int devices_;
};

absl::StatusOr<std::unique_ptr<Allocation>> HostFakeDeviceImpl::AllocateSegmented(
    std::vector<size_t> segment_sizes, int ordinal) {
  BATON_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  if (segment_sizes.empty() || segment_sizes.size() > kMaxSegments) {
    return absl::InvalidArgumentError(absl::StrCat("an allocation has 1 to ", kMaxSegments,
                                                   " segments, not ", segment_sizes.size()));
  }
  Registry::Region region;
  region.kind = Registry::Kind::kAllocation;
  region.ordinal = ordinal;
  uint64_t total = 0;
  for (const size_t bytes : segment_sizes) {
    if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of device memory");
    if (bytes > kMaxAllocationBytes - total) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the host fake allocates at most ", kMaxAllocationBytes, " bytes at once"));
    }
    const uint64_t rounded = RoundUpToPage(bytes);
    total += rounded;
    region.segment_sizes.push_back(rounded);
  }
  std::vector<int> fds;
  for (const uint64_t bytes : region.segment_sizes) {
    BATON_ASSIGN_OR_RETURN(UniqueFd fd, CreateSealedMemfd(kMemoryName, bytes));
    fds.push_back(fd.get());
    region.segment_fds.push_back(std::move(fd));
  }
  BATON_ASSIGN_OR_RETURN(void* data, MapContiguous(fds, region.segment_sizes, total));
  region.size = total;
  region.buffer_id = next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<FakeAllocation>(data, total, std::move(region));
}

absl::StatusOr<std::unique_ptr<Allocation>> HostFakeDeviceImpl::AllocateUnshareable(size_t bytes,
                                                                                    int ordinal) {
  BATON_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of device memory");
  if (bytes > kMaxAllocationBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host fake allocates at most ", kMaxAllocationBytes, " bytes at once"));
  }
  const uint64_t size = RoundUpToPage(bytes);
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of unshareable fake device memory");
  Registry::Region region;
  region.size = size;
  region.kind = Registry::Kind::kUnshareable;
  region.ordinal = ordinal;
  region.buffer_id = next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<FakeAllocation>(data, size, std::move(region));
}

absl::StatusOr<int> HostFakeDeviceImpl::OrdinalOf(const std::array<uint8_t, 16>& uuid) const {
  const absl::string_view bytes(reinterpret_cast<const char*>(uuid.data()), uuid.size());
  if (bytes.substr(0, kUuidPrefix.size()) == kUuidPrefix) {
    const char tens = bytes[14];
    const char ones = bytes[15];
    if (tens >= '0' && tens <= '9' && ones >= '0' && ones <= '9') {
      const int ordinal = (tens - '0') * 10 + (ones - '0');
      if (ordinal < devices_) return ordinal;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the export names GPU ", absl::BytesToHexString(bytes),
                   ", which is not one of the host fake's ", devices_, " devices"));
}

absl::StatusOr<std::unique_ptr<Mapping>> HostFakeDeviceImpl::Import(ExportedMemory memory) {
  if (memory.kind == ShareKind::kLegacyIpc) {
    return absl::InvalidArgumentError("the host fake has no legacy IPC (it exports VMM memory)");
  }
  if (memory.kind != ShareKind::kVmm) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown share kind ", static_cast<uint32_t>(memory.kind)));
  }
  BATON_ASSIGN_OR_RETURN(const int ordinal, OrdinalOf(memory.device_uuid));
  const size_t segments = memory.segment_sizes.size();
  if (segments == 0 || segments > kMaxSegments) {
    return absl::InvalidArgumentError(
        absl::StrCat("an export has 1 to ", kMaxSegments, " segments, not ", segments));
  }
  if (memory.segment_fds.size() != segments) {
    return absl::InvalidArgumentError(absl::StrCat("an export of ", segments, " segments has ",
                                                   memory.segment_fds.size(), " descriptors"));
  }
  uint64_t total = 0;
  std::vector<int> fds;
  for (size_t i = 0; i < segments; ++i) {
    const uint64_t bytes = memory.segment_sizes[i];
    if (bytes == 0 || bytes % PageBytes() != 0 || bytes > kMaxAllocationBytes - total) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment ", i, " of an export has ", bytes,
                       " bytes: not a positive multiple of the page size, or too many"));
    }
    total += bytes;
    BATON_RETURN_IF_ERROR(CheckSealedMemfd(memory.segment_fds[i].get(), bytes,
                                           absl::StrCat("segment ", i, " of an export")));
    fds.push_back(memory.segment_fds[i].get());
  }
  if (total != memory.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("an export of ", memory.size, " bytes has segments of ", total, " in all"));
  }
  BATON_ASSIGN_OR_RETURN(void* data, MapContiguous(fds, memory.segment_sizes, total));
  // The mapping holds the memory; the descriptors close when `memory` goes.
  Registry::Region region;
  region.size = total;
  region.kind = Registry::Kind::kMapping;
  region.ordinal = ordinal;
  region.buffer_id = next_buffer_id.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<FakeMapping>(data, total, std::move(region));
}

absl::StatusOr<std::unique_ptr<Event>> HostFakeDeviceImpl::CreateIpcEvent() {
  BATON_ASSIGN_OR_RETURN(UniqueFd fd, CreateSealedMemfd(kEventName, PageBytes()));
  void* data = mmap(nullptr, PageBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of a fake event");
  new (data) EventPage();
  return std::make_unique<FakeEvent>(std::make_shared<EventMemory>(data, PageBytes()),
                                     std::move(fd));
}

absl::StatusOr<std::unique_ptr<Event>> HostFakeDeviceImpl::OpenIpcEvent(EventHandle handle) {
  const absl::string_view tag(reinterpret_cast<const char*>(handle.bytes.data()), kEventTag.size());
  if (tag != kEventTag) {
    return absl::InvalidArgumentError("the event handle is not one of the host fake's");
  }
  BATON_RETURN_IF_ERROR(CheckSealedMemfd(handle.fd.get(), PageBytes(), "the event handle"));
  struct stat st {};
  if (fstat(handle.fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != PageBytes()) {
    return absl::InvalidArgumentError("the event handle's memfd is not one page");
  }
  void* data = mmap(nullptr, PageBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, handle.fd.get(), 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of an opened fake event");
  auto memory = std::make_shared<EventMemory>(data, PageBytes());
  const EventPage* page = memory->page();
  if (page->magic != kEventMagic || page->version != kEventVersion) {
    return absl::InvalidArgumentError("the event handle's page does not hold a host fake event");
  }
  return std::make_unique<FakeEvent>(std::move(memory), UniqueFd());
}

absl::StatusOr<std::unique_ptr<HostRegistration>> HostFakeDeviceImpl::RegisterHost(void* data,
                                                                                   size_t bytes) {
  if (data == nullptr || bytes == 0 ||
      bytes > std::numeric_limits<uintptr_t>::max() - reinterpret_cast<uintptr_t>(data)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register ", bytes, " bytes of host memory at ", Address(data)));
  }
  BATON_RETURN_IF_ERROR(Registry::Get().AddHostRange(data, bytes));
  return std::make_unique<FakeHostRegistration>(data);
}

absl::Status HostFakeDeviceImpl::WaitValue(StreamHandle stream, const std::atomic<uint32_t>* word,
                                           uint32_t value) {
  if (word == nullptr || reinterpret_cast<uintptr_t>(word) % alignof(std::atomic<uint32_t>) != 0 ||
      !Registry::Get().IsRegisteredHost(word, sizeof(*word))) {
    // As cuStreamWaitValue32, which takes only registered host memory.
    return absl::InvalidArgumentError(absl::StrCat(
        "the word at ", Address(word), " is not an aligned word of registered host memory"));
  }
  return Registry::Get().Enqueue(stream, [word, value](StreamImpl& on) {
    return [&on, word, value] {
      if (SpinUntil(kWaitSpin, /*busy=*/absl::ZeroDuration(), [word, value] {
            return Reached(word->load(std::memory_order_acquire), value);
          })) {
        return;
      }
      while (true) {
        const uint32_t seen = word->load(std::memory_order_acquire);
        if (Reached(seen, value)) return;
        if (on.stopping()) {
          on.AbandonWait();
          return;
        }
        FutexWait(word, seen, kWaitSlice);
      }
    };
  });
}

absl::Status HostFakeDeviceImpl::Synchronize(StreamHandle stream) {
  auto completion = std::make_shared<Completion>();
  BATON_RETURN_IF_ERROR(Registry::Get().Enqueue(stream, [&completion](StreamImpl&) {
    return [guard = std::make_shared<CompletionGuard>(completion)] { guard->MarkRan(); };
  }));
  if (!completion->Wait()) {
    return absl::AbortedError("the stream was destroyed before the work enqueued on it was done");
  }
  return absl::OkStatus();
}

absl::Status HostFakeDeviceImpl::CopyAsync(void* dst, const void* src, size_t bytes,
                                           StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (dst == nullptr || src == nullptr || (d < s + bytes && s < d + bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy ", bytes, " bytes from ", Address(src), " to ", Address(dst)));
  }
  return Registry::Get().Enqueue(
      stream, [dst, src, bytes](StreamImpl&) { return [=] { std::memcpy(dst, src, bytes); }; });
}

}  // namespace

std::unique_ptr<HostFakeDevice> NewHostFakeDevice(HostFakeOptions options) {
  return std::make_unique<HostFakeDeviceImpl>(std::clamp(options.devices, 0, kMaxDevices));
}

uint64_t HostFakeDroppedOperations() { return dropped_operations.load(std::memory_order_relaxed); }

}  // namespace baton::device
