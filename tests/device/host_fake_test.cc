#include "device/host_fake.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "common/unix_socket.h"

namespace baton::device {
namespace {

using ::testing::HasSubstr;

constexpr size_t kPage = 4096;
constexpr absl::Duration kTimeout = absl::Seconds(20);

// Polls `done` every millisecond until it returns true (true) or kTimeout passes (false).
template <typename Done>
bool Eventually(Done done) {
  const absl::Time deadline = absl::Now() + kTimeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

uint8_t PatternByte(uint8_t seed, size_t i) { return static_cast<uint8_t>(seed + i * 7 + i / 251); }

void Fill(void* data, size_t bytes, uint8_t seed) {
  auto* out = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) out[i] = PatternByte(seed, i);
}

bool Holds(const void* data, size_t bytes, uint8_t seed) {
  const auto* in = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    if (in[i] != PatternByte(seed, i)) return false;
  }
  return true;
}

// A copy of `memory` whose descriptors are duplicates (the original keeps its own).
ExportedMemory Copy(const ExportedMemory& memory) {
  ExportedMemory copy;
  copy.kind = memory.kind;
  copy.device_uuid = memory.device_uuid;
  copy.base = memory.base;
  copy.size = memory.size;
  copy.buffer_id = memory.buffer_id;
  copy.segment_sizes = memory.segment_sizes;
  for (const UniqueFd& fd : memory.segment_fds) {
    copy.segment_fds.emplace_back(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
  }
  copy.ipc_handle = memory.ipc_handle;
  return copy;
}

// A sealed (or not) memfd of `bytes`.
UniqueFd Memfd(size_t bytes, int seals) {
  UniqueFd fd(memfd_create("host-fake-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid() || ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return UniqueFd();
  if (seals != 0 && fcntl(fd.get(), F_ADD_SEALS, seals) != 0) return UniqueFd();
  return fd;
}

// Receives one message that carries no descriptor (one that comes anyway is closed).
absl::StatusOr<size_t> RecvMessage(int socket, void* data, size_t capacity) {
  int fd = -1;
  absl::StatusOr<size_t> got = RecvPacket(socket, data, capacity, &fd, absl::Now() + kTimeout);
  UniqueFd unexpected(fd);
  return got;
}

// An exported allocation as it travels between the test's processes: this header, then one
// message per segment carrying its descriptor (SendPacket passes one descriptor per message).
struct WireExport {
  uint32_t kind = 0;
  uint32_t segments = 0;
  std::array<uint8_t, 16> device_uuid{};
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t buffer_id = 0;
  uint64_t segment_sizes[kMaxSegments] = {};
};

absl::Status SendExport(int socket, const ExportedMemory& memory) {
  WireExport wire;
  wire.kind = static_cast<uint32_t>(memory.kind);
  wire.segments = static_cast<uint32_t>(memory.segment_fds.size());
  wire.device_uuid = memory.device_uuid;
  wire.base = memory.base;
  wire.size = memory.size;
  wire.buffer_id = memory.buffer_id;
  for (size_t i = 0; i < memory.segment_sizes.size() && i < kMaxSegments; ++i) {
    wire.segment_sizes[i] = memory.segment_sizes[i];
  }
  absl::Status status = SendPacket(socket, &wire, sizeof(wire));
  for (size_t i = 0; status.ok() && i < memory.segment_fds.size(); ++i) {
    const uint32_t index = static_cast<uint32_t>(i);
    status = SendPacket(socket, &index, sizeof(index), memory.segment_fds[i].get());
  }
  return status;
}

absl::StatusOr<ExportedMemory> RecvExport(int socket) {
  const absl::Time deadline = absl::Now() + kTimeout;
  WireExport wire;
  absl::StatusOr<size_t> got = RecvMessage(socket, &wire, sizeof(wire));
  if (!got.ok()) return got.status();
  if (*got != sizeof(wire) || wire.segments > kMaxSegments) {
    return absl::DataLossError("a short or bad export header");
  }
  ExportedMemory memory;
  memory.kind = static_cast<ShareKind>(wire.kind);
  memory.device_uuid = wire.device_uuid;
  memory.base = wire.base;
  memory.size = wire.size;
  memory.buffer_id = wire.buffer_id;
  memory.segment_sizes.assign(wire.segment_sizes, wire.segment_sizes + wire.segments);
  for (uint32_t i = 0; i < wire.segments; ++i) {
    uint32_t index = 0;
    int fd = -1;
    got = RecvPacket(socket, &index, sizeof(index), &fd, deadline);
    UniqueFd owned(fd);
    if (!got.ok()) return got.status();
    if (index != i || !owned.valid()) return absl::DataLossError("a segment without descriptor");
    memory.segment_fds.push_back(std::move(owned));
  }
  return memory;
}

// A connected SOCK_SEQPACKET pair: [0] for the parent, [1] for the child.
struct SocketPair {
  SocketPair() {
    int fds[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0) {
      parent.Reset(fds[0]);
      child.Reset(fds[1]);
    }
  }
  UniqueFd parent;
  UniqueFd child;
};

// Forks a child that runs `body` (no gtest assertions there: it reports by exit code) and exits
// with what it returns.
template <typename Body>
pid_t ForkChild(Body body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

// The child's exit code; -1 (after killing it) if it does not exit within kTimeout.
int WaitForChild(pid_t pid) {
  int status = 0;
  const bool exited = Eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; });
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What a stream's "kernel" waits for: open once Open() is called, or at the latest when the gate
// goes. Declared after the stream, it keeps a failing test from leaving the stream's thread
// blocked (the stream's destructor would wait for it).
class Gate {
 public:
  Gate() = default;
  ~Gate() { Open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void Open() {
    absl::MutexLock lock(&state_->mu);
    state_->open = true;
  }
  std::function<void()> Kernel() const {
    return [state = state_] {
      absl::MutexLock lock(&state->mu);
      state->mu.Await(absl::Condition(&state->open));
    };
  }

 private:
  // absl::Mutex, not absl::Notification, which ThreadSanitizer does not see (tests/CMakeLists.txt).
  struct State {
    absl::Mutex mu;
    bool open ABSL_GUARDED_BY(mu) = false;
  };
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

// One page of MAP_SHARED anonymous memory, inherited by forked children.
class SharedPage {
 public:
  SharedPage()
      : data_(mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {}
  ~SharedPage() {
    if (data_ != MAP_FAILED) munmap(data_, kPage);
  }
  SharedPage(const SharedPage&) = delete;
  SharedPage& operator=(const SharedPage&) = delete;
  bool ok() const { return data_ != MAP_FAILED; }
  void* data() const { return data_; }
  // A zeroed word at byte `offset`.
  std::atomic<uint32_t>* Word(size_t offset) const {
    return new (static_cast<char*>(data_) + offset) std::atomic<uint32_t>(0);
  }

 private:
  void* data_;
};

TEST(HostFakeTest, DescribesAndCountsItsDevices) {
  EXPECT_EQ(NewHostFakeDevice()->Describe(), "host fake (1 device)");
  EXPECT_EQ(NewHostFakeDevice()->count(), 1);
  std::unique_ptr<HostFakeDevice> three = NewHostFakeDevice({.devices = 3});
  EXPECT_EQ(three->Describe(), "host fake (3 devices)");
  EXPECT_EQ(three->count(), 3);
  EXPECT_EQ(NewHostFakeDevice({.devices = -1})->count(), 0);
  // What OpenDevice("fake") returns.
  std::unique_ptr<Device> as_device = NewHostFakeDevice();
  EXPECT_EQ(as_device->count(), 1);
}

TEST(HostFakeTest, AllocateRoundsToPagesAndChecksItsArguments) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice({.devices = 2});
  absl::StatusOr<std::unique_ptr<Allocation>> one = device->Allocate(1, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->size(), kPage);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*one)->data()) % kPage, 0u);
  absl::StatusOr<std::unique_ptr<Allocation>> more = device->Allocate(kPage + 1, 0);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ((*more)->size(), 2 * kPage);
  EXPECT_EQ(device->Allocate(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->Allocate(1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->Allocate(1, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->Allocate(std::numeric_limits<size_t>::max(), 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(device->AllocateUnshareable(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->AllocateSegmented({}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->AllocateSegmented({kPage, 0}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      device->AllocateSegmented(std::vector<size_t>(kMaxSegments + 1, kPage), 0).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(HostFakeTest, KnowsItsMemoryFromHostMemory) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(3 * kPage, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  char* data = static_cast<char*>((*allocation)->data());
  EXPECT_TRUE(device->IsDeviceMemory(data, 3 * kPage));
  EXPECT_TRUE(device->IsDeviceMemory(data + 3 * kPage - 1, 1));
  EXPECT_TRUE(device->IsDeviceMemory(data + kPage, 0));
  EXPECT_FALSE(device->IsDeviceMemory(data, 3 * kPage + 1));
  EXPECT_FALSE(device->IsDeviceMemory(data + 3 * kPage, 1));
  std::vector<char> host(64);
  EXPECT_FALSE(device->IsDeviceMemory(host.data(), host.size()));
  // The state is the process's: another fake device sees the same memory, as CUDA's users do.
  EXPECT_TRUE(NewHostFakeDevice()->IsDeviceMemory(data, kPage));
  allocation->reset();
  EXPECT_FALSE(device->IsDeviceMemory(data, 1));
}

TEST(HostFakeTest, ExportAndImportInOneProcessShareTheBytes) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(3 * kPage + 100, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  const size_t size = (*allocation)->size();
  ASSERT_EQ(size, 4 * kPage);
  Fill((*allocation)->data(), size, 1);

  absl::StatusOr<ExportedMemory> exported = device->Export((*allocation)->data(), size);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->kind, ShareKind::kVmm);
  EXPECT_EQ(exported->base, reinterpret_cast<uintptr_t>((*allocation)->data()));
  EXPECT_EQ(exported->size, size);
  EXPECT_NE(exported->buffer_id, 0u);
  ASSERT_EQ(exported->segment_sizes, std::vector<uint64_t>{size});
  ASSERT_EQ(exported->segment_fds.size(), 1u);
  EXPECT_EQ(fcntl(exported->segment_fds[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  const std::string uuid(exported->device_uuid.begin(), exported->device_uuid.end());
  EXPECT_EQ(uuid, "baton-fake-gpu00");

  absl::StatusOr<std::unique_ptr<Mapping>> mapping = device->Import(*std::move(exported));
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_NE((*mapping)->data(), (*allocation)->data());
  EXPECT_EQ((*mapping)->size(), size);
  EXPECT_EQ((*mapping)->ordinal(), 0);
  EXPECT_TRUE(Holds((*mapping)->data(), size, 1));
  Fill((*mapping)->data(), size, 2);
  EXPECT_TRUE(Holds((*allocation)->data(), size, 2));

  // A mapping is device memory while it is mapped, and is not exported again.
  void* mapped = (*mapping)->data();
  EXPECT_TRUE(device->IsDeviceMemory(mapped, size));
  EXPECT_EQ(device->Export(mapped, size).status().code(), absl::StatusCode::kFailedPrecondition);
  mapping->reset();
  EXPECT_FALSE(device->IsDeviceMemory(mapped, 1));
  // The allocation is untouched by the mapping's end.
  EXPECT_TRUE(Holds((*allocation)->data(), size, 2));
}

TEST(HostFakeTest, ExportFindsTheAllocationOfAnInteriorPointer) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice({.devices = 2});
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(3 * kPage, 1);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  char* data = static_cast<char*>((*allocation)->data());
  data[kPage + 8] = 42;

  absl::StatusOr<ExportedMemory> exported = device->Export(data + kPage + 8, 100);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->base, reinterpret_cast<uintptr_t>(data));
  EXPECT_EQ(exported->size, 3 * kPage);
  EXPECT_EQ(exported->device_uuid[15], '1');
  absl::StatusOr<std::unique_ptr<Mapping>> mapping = device->Import(*std::move(exported));
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_EQ((*mapping)->ordinal(), 1);
  // base + k maps to data() + k.
  EXPECT_EQ(static_cast<char*>((*mapping)->data())[kPage + 8], 42);

  // The whole tail fits; one byte more runs past the end.
  EXPECT_TRUE(device->Export(data + 2 * kPage, kPage).ok());
  absl::StatusOr<ExportedMemory> past = device->Export(data + 2 * kPage, kPage + 1);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(past.status().message(), HasSubstr("past the end"));
  // Host memory is not found at all.
  std::vector<char> host(64);
  EXPECT_EQ(device->Export(host.data(), host.size()).status().code(), absl::StatusCode::kNotFound);
}

TEST(HostFakeTest, SegmentedAllocationsExportOneDescriptorPerSegment) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation =
      device->AllocateSegmented({kPage, 2 * kPage, 100}, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  const size_t size = (*allocation)->size();
  ASSERT_EQ(size, 4 * kPage);
  Fill((*allocation)->data(), size, 3);

  absl::StatusOr<ExportedMemory> exported = device->Export((*allocation)->data(), size);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->segment_sizes, (std::vector<uint64_t>{kPage, 2 * kPage, kPage}));
  ASSERT_EQ(exported->segment_fds.size(), 3u);
  absl::StatusOr<std::unique_ptr<Mapping>> mapping = device->Import(*std::move(exported));
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_TRUE(Holds((*mapping)->data(), size, 3));
  // Writes across the segment boundaries land in the right segments.
  char* mapped = static_cast<char*>((*mapping)->data());
  std::memset(mapped + kPage - 8, 0x5a, 16);
  std::memset(mapped + 3 * kPage - 8, 0xa5, 16);
  const char* data = static_cast<const char*>((*allocation)->data());
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(data[kPage - 8 + i], 0x5a);
    EXPECT_EQ(static_cast<uint8_t>(data[3 * kPage - 8 + i]), 0xa5);
  }
}

TEST(HostFakeTest, UnshareableMemoryIsDeviceMemoryThatCannotBeExported) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->AllocateUnshareable(100, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  EXPECT_EQ((*allocation)->size(), kPage);
  EXPECT_TRUE(device->IsDeviceMemory((*allocation)->data(), 100));
  absl::StatusOr<ExportedMemory> exported = device->Export((*allocation)->data(), 100);
  EXPECT_EQ(exported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(exported.status().message(), HasSubstr("stage"));
}

TEST(HostFakeTest, FreedAndReallocatedMemoryGetsANewBufferId) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(kPage, 0);
    ASSERT_TRUE(allocation.ok()) << allocation.status();
    absl::StatusOr<ExportedMemory> exported = device->Export((*allocation)->data(), kPage);
    ASSERT_TRUE(exported.ok()) << exported.status();
    for (const uint64_t id : ids) EXPECT_NE(exported->buffer_id, id);
    ids.push_back(exported->buffer_id);
    // Two exports of one live allocation agree, and BufferId of any byte of it says the same.
    EXPECT_EQ(device->Export((*allocation)->data(), 1)->buffer_id, exported->buffer_id);
    absl::StatusOr<uint64_t> id =
        device->BufferId(static_cast<std::byte*>((*allocation)->data()) + kPage - 1);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, exported->buffer_id);
  }
  int host = 0;
  EXPECT_TRUE(absl::IsNotFound(device->BufferId(&host).status()));
}

TEST(HostFakeTest, ImportRefusesWhatDoesNotDescribeFakeDeviceMemory) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(2 * kPage, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  absl::StatusOr<ExportedMemory> good = device->Export((*allocation)->data(), 2 * kPage);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE(device->Import(Copy(*good)).ok());

  auto refused = [&](ExportedMemory memory, const char* message) {
    absl::StatusOr<std::unique_ptr<Mapping>> mapping = device->Import(std::move(memory));
    EXPECT_EQ(mapping.status().code(), absl::StatusCode::kInvalidArgument) << mapping.status();
    EXPECT_THAT(mapping.status().message(), HasSubstr(message));
  };
  ExportedMemory legacy = Copy(*good);
  legacy.kind = ShareKind::kLegacyIpc;
  refused(std::move(legacy), "no legacy IPC");
  ExportedMemory unknown_kind = Copy(*good);
  unknown_kind.kind = static_cast<ShareKind>(7);
  refused(std::move(unknown_kind), "share kind");
  ExportedMemory other_gpu = Copy(*good);
  other_gpu.device_uuid[15] = '1';  // device 1 of a one-device fake
  refused(std::move(other_gpu), "not one of");
  ExportedMemory real_gpu = Copy(*good);
  real_gpu.device_uuid.fill(0xab);
  refused(std::move(real_gpu), "not one of");
  ExportedMemory no_segments = Copy(*good);
  no_segments.segment_sizes.clear();
  no_segments.segment_fds.clear();
  refused(std::move(no_segments), "segments");
  ExportedMemory missing_fd = Copy(*good);
  missing_fd.segment_fds.clear();
  refused(std::move(missing_fd), "descriptors");
  ExportedMemory extra_fd = Copy(*good);
  extra_fd.segment_fds.emplace_back(fcntl(good->segment_fds[0].get(), F_DUPFD_CLOEXEC, 0));
  refused(std::move(extra_fd), "descriptors");
  ExportedMemory wrong_total = Copy(*good);
  wrong_total.size = kPage;
  refused(std::move(wrong_total), "segments of");
  ExportedMemory odd_segment = Copy(*good);
  odd_segment.segment_sizes[0] = 2 * kPage - 1;
  odd_segment.size = 2 * kPage - 1;
  refused(std::move(odd_segment), "page size");
  ExportedMemory overflow = Copy(*good);
  overflow.segment_sizes = {uint64_t{1} << 63, uint64_t{1} << 63};
  overflow.segment_fds.emplace_back(fcntl(good->segment_fds[0].get(), F_DUPFD_CLOEXEC, 0));
  overflow.size = 0;
  refused(std::move(overflow), "page size");
  // Larger than the memfd: mapping it would fault (SIGBUS) past the end.
  ExportedMemory too_large = Copy(*good);
  too_large.segment_sizes[0] = 3 * kPage;
  too_large.size = 3 * kPage;
  refused(std::move(too_large), "fewer than");
  ExportedMemory no_fd = Copy(*good);
  no_fd.segment_fds[0] = UniqueFd();
  refused(std::move(no_fd), "no descriptor");
  // A memfd its owner could still shrink under the mapping.
  ExportedMemory unsealed = Copy(*good);
  unsealed.segment_fds[0] = Memfd(2 * kPage, 0);
  ASSERT_TRUE(unsealed.segment_fds[0].valid());
  refused(std::move(unsealed), "F_SEAL_SHRINK");
  // Not memory at all.
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd pipe_write(pipe_fds[1]);
  ExportedMemory pipe = Copy(*good);
  pipe.segment_fds[0].Reset(pipe_fds[0]);
  refused(std::move(pipe), "not a memfd");
  // A regular file cannot be sealed.
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), 2 * kPage), 0);
  ExportedMemory regular = Copy(*good);
  regular.segment_fds[0].Reset(fcntl(fileno(file), F_DUPFD_CLOEXEC, 0));
  std::fclose(file);
  refused(std::move(regular), "not a memfd");
  // The good export still works after all that.
  EXPECT_TRUE(device->Import(*std::move(good)).ok());
}

TEST(HostFakeTest, ExportAndImportAcrossProcessesSeeEachOthersWrites) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation =
      device->AllocateSegmented({kPage, 2 * kPage}, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  const size_t size = (*allocation)->size();
  Fill((*allocation)->data(), size, 10);
  absl::StatusOr<ExportedMemory> exported = device->Export((*allocation)->data(), size);
  ASSERT_TRUE(exported.ok()) << exported.status();
  SocketPair sockets;
  ASSERT_TRUE(sockets.parent.valid());

  const pid_t child = ForkChild([&]() -> int {
    sockets.parent.Reset(-1);
    std::unique_ptr<HostFakeDevice> own = NewHostFakeDevice();
    absl::StatusOr<ExportedMemory> received = RecvExport(sockets.child.get());
    if (!received.ok()) return 10;
    if (received->segment_fds.size() != 2) return 11;
    absl::StatusOr<std::unique_ptr<Mapping>> mapping = own->Import(*std::move(received));
    if (!mapping.ok()) return 12;
    if (!Holds((*mapping)->data(), size, 10)) return 13;
    Fill((*mapping)->data(), size, 11);  // the parent checks this after our next message
    // The other way: our own allocation, to the parent.
    absl::StatusOr<std::unique_ptr<Allocation>> mine = own->Allocate(kPage, 0);
    if (!mine.ok()) return 14;
    Fill((*mine)->data(), kPage, 12);
    absl::StatusOr<ExportedMemory> out = own->Export((*mine)->data(), kPage);
    if (!out.ok()) return 15;
    if (!SendExport(sockets.child.get(), *out).ok()) return 16;
    // Until the parent has read it: then its writes must be here.
    char done = 0;
    if (!RecvMessage(sockets.child.get(), &done, 1).ok()) {
      return 17;
    }
    return Holds((*mine)->data(), kPage, 13) ? 0 : 18;
  });
  ASSERT_GT(child, 0);
  sockets.child.Reset(-1);
  ASSERT_TRUE(SendExport(sockets.parent.get(), *exported).ok());
  absl::StatusOr<ExportedMemory> theirs = RecvExport(sockets.parent.get());
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_TRUE(Holds((*allocation)->data(), size, 11));  // written by the child
  absl::StatusOr<std::unique_ptr<Mapping>> mapping = device->Import(*std::move(theirs));
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_TRUE(Holds((*mapping)->data(), kPage, 12));
  Fill((*mapping)->data(), kPage, 13);
  const char done = 1;
  ASSERT_TRUE(SendPacket(sockets.parent.get(), &done, 1).ok());
  EXPECT_EQ(WaitForChild(child), 0);
}

TEST(HostFakeTest, StreamsRunTheirWorkInOrder) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  std::unique_ptr<FakeStream> stream = device->NewStream();
  std::vector<int> order;  // written only by the stream's thread until Synchronize returns
  for (int i = 0; i < 100; ++i) stream->Enqueue([&order, i] { order.push_back(i); });
  ASSERT_TRUE(device->Synchronize(stream->handle()).ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(stream->pending(), 0u);
}

TEST(HostFakeTest, CopyAsyncCopiesInStreamOrder) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(2 * kPage, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  char* data = static_cast<char*>((*allocation)->data());
  std::vector<char> host(kPage);
  Fill(host.data(), kPage, 20);
  std::unique_ptr<FakeStream> stream = device->NewStream();
  Gate gate;
  stream->Enqueue(gate.Kernel());
  ASSERT_TRUE(device->CopyAsync(data, host.data(), kPage, stream->handle()).ok());
  ASSERT_TRUE(device->CopyAsync(data + kPage, data, kPage, stream->handle()).ok());
  // Nothing is copied before the work ahead of the copies is done.
  EXPECT_FALSE(Holds(data, kPage, 20));
  gate.Open();
  ASSERT_TRUE(device->Synchronize(stream->handle()).ok());
  EXPECT_TRUE(Holds(data, kPage, 20));
  EXPECT_TRUE(Holds(data + kPage, kPage, 20));

  // The default stream, through another fake device of the process (the state is shared).
  std::unique_ptr<HostFakeDevice> other = NewHostFakeDevice();
  Fill(host.data(), kPage, 21);
  ASSERT_TRUE(other->CopyAsync(data, host.data(), kPage, nullptr).ok());
  ASSERT_TRUE(device->Synchronize(nullptr).ok());
  EXPECT_TRUE(Holds(data, kPage, 21));
  ASSERT_TRUE(other->CopyAsync(data, host.data(), kPage, stream->handle()).ok());
  ASSERT_TRUE(other->Synchronize(stream->handle()).ok());

  EXPECT_EQ(device->CopyAsync(data, data + 8, 16, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->CopyAsync(nullptr, data, 16, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(device->CopyAsync(nullptr, nullptr, 0, nullptr).ok());
  // A destroyed stream, or anything that never was one, is refused.
  const StreamHandle gone = stream->handle();
  stream.reset();
  EXPECT_EQ(device->CopyAsync(data, host.data(), 1, gone).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->Synchronize(gone).code(), absl::StatusCode::kInvalidArgument);
  int not_a_stream = 0;
  EXPECT_EQ(device->Synchronize(&not_a_stream).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostFakeTest, EventsCaptureTheWorkEnqueuedBeforeRecord) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Event>> event = device->CreateIpcEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(*(*event)->Query());  // never recorded: done

  std::unique_ptr<FakeStream> stream = device->NewStream();
  Gate gate;
  stream->Enqueue(gate.Kernel());
  ASSERT_TRUE((*event)->Record(stream->handle()).ok());
  EXPECT_FALSE(*(*event)->Query());

  absl::StatusOr<EventHandle> handle = (*event)->Export();
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<std::unique_ptr<Event>> opened = device->OpenIpcEvent(*std::move(handle));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_FALSE(*(*opened)->Query());
  EXPECT_EQ((*opened)->Export().status().code(), absl::StatusCode::kFailedPrecondition);

  gate.Open();
  EXPECT_TRUE(Eventually([&] { return *(*event)->Query(); }));
  EXPECT_TRUE(*(*opened)->Query());

  // The opened side may record too, and both sides see it.
  Gate second_gate;
  stream->Enqueue(second_gate.Kernel());
  ASSERT_TRUE((*opened)->Record(stream->handle()).ok());
  EXPECT_FALSE(*(*event)->Query());
  EXPECT_FALSE(*(*opened)->Query());
  second_gate.Open();
  ASSERT_TRUE(device->Synchronize(stream->handle()).ok());
  EXPECT_TRUE(*(*event)->Query());
  EXPECT_TRUE(*(*opened)->Query());

  // A record that is refused captures nothing.
  int not_a_stream = 0;
  EXPECT_EQ((*event)->Record(&not_a_stream).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(*(*event)->Query());
  // The default stream works too.
  ASSERT_TRUE((*event)->Record(nullptr).ok());
  ASSERT_TRUE(device->Synchronize(nullptr).ok());
  EXPECT_TRUE(*(*event)->Query());
}

TEST(HostFakeTest, OpenIpcEventRefusesWhatIsNotAnEvent) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  absl::StatusOr<std::unique_ptr<Event>> event = device->CreateIpcEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  absl::StatusOr<EventHandle> good = (*event)->Export();
  ASSERT_TRUE(good.ok()) << good.status();
  auto with_fd = [&](UniqueFd fd) {
    EventHandle handle;
    handle.bytes = good->bytes;
    handle.fd = std::move(fd);
    return handle;
  };
  auto refused = [&](EventHandle handle) {
    EXPECT_EQ(device->OpenIpcEvent(std::move(handle)).status().code(),
              absl::StatusCode::kInvalidArgument);
  };
  EventHandle wrong_tag = with_fd(UniqueFd(fcntl(good->fd.get(), F_DUPFD_CLOEXEC, 0)));
  wrong_tag.bytes[0] ^= 1;
  refused(std::move(wrong_tag));
  refused(with_fd(UniqueFd()));
  refused(with_fd(Memfd(kPage, 0)));                                // unsealed
  refused(with_fd(Memfd(2 * kPage, F_SEAL_SHRINK | F_SEAL_GROW)));  // not one page
  refused(with_fd(Memfd(kPage, F_SEAL_SHRINK | F_SEAL_GROW)));      // no event in it
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd pipe_write(pipe_fds[1]);
  refused(with_fd(UniqueFd(pipe_fds[0])));
  EXPECT_TRUE(device->OpenIpcEvent(*std::move(good)).ok());
}

// The rank's direction: a child records on its stream, the parent (the daemon) queries.
TEST(HostFakeTest, EventsRecordedInAChildAreQueriedInItsParent) {
#if defined(__SANITIZE_THREAD__)
  // Earlier tests leave the default stream's thread running, and ThreadSanitizer refuses to
  // start threads (the child's stream) in a child of a multi-threaded process.
  GTEST_SKIP() << "ThreadSanitizer: no threads in a child of a multi-threaded process";
#endif
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage shared;  // [0]: the gate the child's "kernel" waits for; [4]: what it wrote
  ASSERT_TRUE(shared.ok());
  std::atomic<uint32_t>* gate = shared.Word(0);
  std::atomic<uint32_t>* result = shared.Word(4);
  SocketPair sockets;
  ASSERT_TRUE(sockets.parent.valid());

  const pid_t child = ForkChild([&]() -> int {
    sockets.parent.Reset(-1);
    std::unique_ptr<HostFakeDevice> own = NewHostFakeDevice();
    std::unique_ptr<FakeStream> stream = own->NewStream();
    absl::StatusOr<std::unique_ptr<Event>> event = own->CreateIpcEvent();
    if (!event.ok()) return 10;
    // A slow kernel: done when the parent opens the gate.
    stream->Enqueue([gate, result] {
      if (Eventually([gate] { return gate->load() != 0; })) result->store(42);
    });
    if (!(*event)->Record(stream->handle()).ok()) return 11;
    // Recorded before the handle leaves, as libbaton records before it publishes.
    absl::StatusOr<EventHandle> handle = (*event)->Export();
    if (!handle.ok()) return 12;
    if (!SendPacket(sockets.child.get(), handle->bytes.data(), handle->bytes.size(),
                    handle->fd.get())
             .ok()) {
      return 13;
    }
    if (!own->Synchronize(stream->handle()).ok()) return 14;
    // Stay until the parent saw the event done (a created event's page outlives us anyway).
    char done = 0;
    if (!RecvMessage(sockets.child.get(), &done, 1).ok()) {
      return 15;
    }
    return result->load() == 42 ? 0 : 16;
  });
  ASSERT_GT(child, 0);
  sockets.child.Reset(-1);
  EventHandle handle;
  int fd = -1;
  absl::StatusOr<size_t> got = RecvPacket(sockets.parent.get(), handle.bytes.data(),
                                          handle.bytes.size(), &fd, absl::Now() + kTimeout);
  handle.fd.Reset(fd);
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<std::unique_ptr<Event>> event = device->OpenIpcEvent(std::move(handle));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_FALSE(*(*event)->Query());  // the child's kernel waits for the gate
  EXPECT_EQ(result->load(), 0u);
  gate->store(1);
  EXPECT_TRUE(Eventually([&] { return *(*event)->Query(); }));
  // Done means the captured work's writes are visible.
  EXPECT_EQ(result->load(), 42u);
  const char done = 1;
  ASSERT_TRUE(SendPacket(sockets.parent.get(), &done, 1).ok());
  EXPECT_EQ(WaitForChild(child), 0);
}

// The other direction, with no thread in the child: the parent records, a child queries.
TEST(HostFakeTest, EventsRecordedInAParentAreQueriedInItsChild) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage shared;  // [0]: the gate the parent's "kernel" waits for; [4]: what it wrote
  ASSERT_TRUE(shared.ok());
  std::atomic<uint32_t>* gate = shared.Word(0);
  std::atomic<uint32_t>* result = shared.Word(4);
  absl::StatusOr<std::unique_ptr<Event>> event = device->CreateIpcEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  absl::StatusOr<EventHandle> handle = (*event)->Export();
  ASSERT_TRUE(handle.ok()) << handle.status();
  SocketPair sockets;
  ASSERT_TRUE(sockets.parent.valid());

  const pid_t child = ForkChild([&]() -> int {
    sockets.parent.Reset(-1);
    std::unique_ptr<HostFakeDevice> own = NewHostFakeDevice();
    absl::StatusOr<std::unique_ptr<Event>> opened = own->OpenIpcEvent(*std::move(handle));
    if (!opened.ok()) return 10;
    absl::StatusOr<bool> done = (*opened)->Query();
    if (!done.ok() || !*done) return 11;  // not recorded yet
    const char ready = 1;
    if (!SendPacket(sockets.child.get(), &ready, 1).ok()) return 12;
    char recorded = 0;
    if (!RecvMessage(sockets.child.get(), &recorded, 1).ok()) return 13;
    done = (*opened)->Query();
    if (!done.ok() || *done) return 14;  // the parent's kernel waits for the gate
    gate->store(1);
    if (!Eventually([&] { return *(*opened)->Query(); })) return 15;
    return result->load() == 42 ? 0 : 16;
  });
  ASSERT_GT(child, 0);
  sockets.child.Reset(-1);
  handle->fd.Reset(-1);
  char ready = 0;
  ASSERT_TRUE(RecvMessage(sockets.parent.get(), &ready, 1).ok());
  std::unique_ptr<FakeStream> stream = device->NewStream();
  stream->Enqueue([gate, result] {
    if (Eventually([gate] { return gate->load() != 0; })) result->store(42);
  });
  ASSERT_TRUE((*event)->Record(stream->handle()).ok());
  const char recorded = 1;
  ASSERT_TRUE(SendPacket(sockets.parent.get(), &recorded, 1).ok());
  EXPECT_EQ(WaitForChild(child), 0);
  EXPECT_TRUE(*(*event)->Query());
}

TEST(HostFakeTest, WaitValueNeedsAWordOfRegisteredHostMemory) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage page;
  ASSERT_TRUE(page.ok());
  std::atomic<uint32_t>* word = page.Word(64);
  EXPECT_EQ(device->WaitValue(nullptr, word, 1).code(), absl::StatusCode::kInvalidArgument);
  {
    absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
        device->RegisterHost(page.data(), kPage);
    ASSERT_TRUE(registration.ok()) << registration.status();
    // CUDA refuses to register memory twice.
    EXPECT_EQ(device->RegisterHost(static_cast<char*>(page.data()) + 128, 8).status().code(),
              absl::StatusCode::kAlreadyExists);
    EXPECT_TRUE(device->WaitValue(nullptr, word, 0).ok());
    EXPECT_EQ(device->WaitValue(nullptr, nullptr, 0).code(), absl::StatusCode::kInvalidArgument);
    const auto* unaligned =
        reinterpret_cast<const std::atomic<uint32_t>*>(static_cast<char*>(page.data()) + 2);
    EXPECT_EQ(device->WaitValue(nullptr, unaligned, 0).code(), absl::StatusCode::kInvalidArgument);
    // The last word of the page is in; a word straddling its end is not.
    const auto* last =
        reinterpret_cast<const std::atomic<uint32_t>*>(static_cast<char*>(page.data()) + kPage);
    EXPECT_EQ(device->WaitValue(nullptr, last, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(device->WaitValue(nullptr, last - 1, 0).ok());
    ASSERT_TRUE(device->Synchronize(nullptr).ok());
  }
  EXPECT_EQ(device->WaitValue(nullptr, word, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->RegisterHost(nullptr, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->RegisterHost(page.data(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostFakeTest, WaitValueReleasesTheStreamOnlyOnceTheWordReachesTheValue) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage page;
  ASSERT_TRUE(page.ok());
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      device->RegisterHost(page.data(), kPage);
  ASSERT_TRUE(registration.ok()) << registration.status();
  std::atomic<uint32_t>* word = page.Word(0);
  std::unique_ptr<FakeStream> stream = device->NewStream();
  std::atomic<int> released{0};

  // Counts wrap: 0xfffffff0 waits for 0xfffffff8, which 2 (past the wrap) has reached.
  word->store(0xfffffff0u);
  ASSERT_TRUE(device->WaitValue(stream->handle(), word, 0xfffffff8u).ok());
  stream->Enqueue([&released] { released.fetch_add(1); });
  EXPECT_EQ(stream->pending(), 2u);
  // Not yet (a window of some slices: the stream must still be held after them).
  word->store(0xfffffff7u);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(released.load(), 0);
  EXPECT_EQ(stream->pending(), 2u);
  // A plain store, no futex wake (as from another process): the sliced wait sees it.
  word->store(2);
  ASSERT_TRUE(Eventually([&] { return released.load() == 1; }));

  // A word half the ring ahead of the value has not reached it; the value itself has.
  word->store(0);
  ASSERT_TRUE(device->WaitValue(stream->handle(), word, 0x80000000u).ok());
  stream->Enqueue([&released] { released.fetch_add(1); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(released.load(), 1);
  word->store(0x80000000u);
  ASSERT_TRUE(Eventually([&] { return released.load() == 2; }));
  EXPECT_TRUE(device->Synchronize(stream->handle()).ok());
}

TEST(HostFakeTest, WaitValueSeesAStoreFromAnotherProcess) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage page;
  ASSERT_TRUE(page.ok());
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      device->RegisterHost(page.data(), kPage);
  ASSERT_TRUE(registration.ok()) << registration.status();
  std::atomic<uint32_t>* word = page.Word(0);
  std::unique_ptr<FakeStream> stream = device->NewStream();
  std::atomic<bool> released{false};
  ASSERT_TRUE(device->WaitValue(stream->handle(), word, 5).ok());
  stream->Enqueue([&released] { released.store(true); });
  // The child only stores (no wake), as a daemon's copy engine or CPU would.
  const pid_t child = ForkChild([word] {
    word->store(5);
    return 0;
  });
  ASSERT_GT(child, 0);
  EXPECT_EQ(WaitForChild(child), 0);
  ASSERT_TRUE(Eventually([&] { return released.load(); }));
  EXPECT_TRUE(device->Synchronize(stream->handle()).ok());
}

TEST(HostFakeTest, DestroyingAStreamDropsAWaitThatWouldNeverEnd) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  SharedPage page;
  ASSERT_TRUE(page.ok());
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      device->RegisterHost(page.data(), kPage);
  ASSERT_TRUE(registration.ok()) << registration.status();
  std::atomic<uint32_t>* word = page.Word(0);
  std::unique_ptr<FakeStream> stream = device->NewStream();
  std::atomic<bool> ran{false};
  ASSERT_TRUE(device->WaitValue(stream->handle(), word, 1).ok());  // nobody stores 1
  stream->Enqueue([&ran] { ran.store(true); });
  // A Synchronize that waits behind the wait learns that the work was dropped.
  absl::Status synchronized;
  std::thread synchronizer(
      [&, handle = stream->handle()] { synchronized = device->Synchronize(handle); });
  ASSERT_TRUE(Eventually([&] { return stream->pending() == 3; }));

  const uint64_t dropped_before = HostFakeDroppedOperations();
  const absl::Time start = absl::Now();
  stream.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  synchronizer.join();
  EXPECT_EQ(synchronized.code(), absl::StatusCode::kAborted) << synchronized;
  EXPECT_FALSE(ran.load());
  // The wait, the closure and the Synchronize's marker.
  EXPECT_EQ(HostFakeDroppedOperations() - dropped_before, 3u);
  // The word may still be stored later: nothing touches it any more.
  word->store(1);
}

TEST(HostFakeTest, KernelsAreTheHostKernelsOnDeviceMemory) {
  std::unique_ptr<HostFakeDevice> device = NewHostFakeDevice();
  EXPECT_EQ(device->NewKernels(1).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<DeviceKernels>> kernels = device->NewKernels(0);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  EXPECT_EQ((*kernels)->memory(), MemoryKind::kDevice);
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = device->Allocate(kPage, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  auto* values = static_cast<float*>((*allocation)->data());  // [0, 4): dst, [4, 8), [8, 12)
  for (int i = 0; i < 4; ++i) {
    values[i] = 1.0f + static_cast<float>(i);
    values[4 + i] = 10.0f * static_cast<float>(i);
    values[8 + i] = 0.5f;
  }
  (*kernels)->ReduceInto(DataType::kFloat32, ReduceOp::kSum, values, values + 4, 4);
  EXPECT_EQ(values[3], 34.0f);
  const void* sources[] = {values, values + 4, values + 8};
  (*kernels)->ReduceMany(DataType::kFloat32, ReduceOp::kMax, values, sources, 4);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[2], 23.0f);
  (*kernels)->Divide(DataType::kFloat32, values, 4, 2);
  EXPECT_EQ(values[2], 11.5f);
  (*kernels)->Copy(values + 8, values, 4 * sizeof(float));
  EXPECT_EQ(values[10], 11.5f);
  (*kernels)->Zero(values, 4 * sizeof(float));
  EXPECT_EQ(values[2], 0.0f);
  EXPECT_TRUE((*kernels)->last_error().ok());
}

}  // namespace
}  // namespace baton::device
