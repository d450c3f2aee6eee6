#include "device/host_fake.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "device/device.h"
#include "device/fake_event.h"
#include "device/fake_memory.h"
#include "device/fake_stream.h"

namespace baton::device {
namespace {

using fake::Address;
using fake::CheckSealedMemfd;
using fake::Completion;
using fake::CompletionGuard;
using fake::CreateSealedMemfd;
using fake::FakeAllocation;
using fake::FakeHostRegistration;
using fake::FakeMapping;
using fake::FutexWait;
using fake::kUuidPrefix;
using fake::MapContiguous;
using fake::NewFakeEvent;
using fake::NextBufferId;
using fake::OpenFakeEvent;
using fake::PageBytes;
using fake::Reached;
using fake::Registry;
using fake::RoundUpToPage;
using fake::StreamImpl;

constexpr char kMemoryName[] = "baton-fake-gpu";
constexpr int kMaxDevices = 99;
// The fake's "device" holds at most this much per allocation; it also keeps sizes far from
// overflow.
constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 40;

// WaitValue spins this long (yielding), then sleeps on the futex in slices this long: another
// process may store the word without a wake, so a slice bounds how late the store is seen.
constexpr absl::Duration kWaitSpin = absl::Microseconds(20);
constexpr absl::Duration kWaitSlice = absl::Milliseconds(1);

class FakeKernels final : public DeviceKernels {
 public:
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    HostKernels().ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    HostKernels().ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    HostKernels().Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    HostKernels().Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override { HostKernels().Zero(dst, bytes); }
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

  absl::StatusOr<std::unique_ptr<Event>> CreateIpcEvent() override { return NewFakeEvent(); }
  absl::StatusOr<std::unique_ptr<Event>> OpenIpcEvent(EventHandle handle) override {
    return OpenFakeEvent(std::move(handle));
  }

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
  region.buffer_id = NextBufferId();
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
  region.buffer_id = NextBufferId();
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
  region.buffer_id = NextBufferId();
  return std::make_unique<FakeMapping>(data, total, std::move(region));
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

}  // namespace baton::device
