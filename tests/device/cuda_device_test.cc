#include "device/cuda_device.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "common/status_macros.h"
#include "common/unix_socket.h"
#include "device/device.h"
#include "transport/memory.h"

// device::Device on CUDA: memory allocated here and mapped by another process (VMM descriptors
// over a socket with SCM_RIGHTS, one and two segments), cudaMalloc memory shared by legacy IPC
// from an offset inside it, memory that cannot be shared (managed, cudaMallocAsync), an IPC event
// recorded here and queried there, a stream held by WaitValue until the host stores the word
// (with wrap-around), the kernels, and the errors of bad arguments.
//
// The other process is this binary, started again (posix_spawn, so nothing of this process's
// CUDA state is inherited: CUDA does not survive fork) to run CudaDeviceChild.DISABLED_Serve,
// which does nothing in a normal run.
//
// Without a CUDA driver or GPU every test skips, naming why, except OpensOrSaysWhy, which checks
// the reason; with BATON_REQUIRE_GPU=1 in the environment (the GPU machine's check) a missing
// device fails instead.

extern char** environ;

namespace baton::device {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kRoleVariable[] = "BATON_CUDA_DEVICE_TEST_ROLE";
constexpr char kSocketVariable[] = "BATON_CUDA_DEVICE_TEST_SOCKET";
constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr size_t kMiB = size_t{1} << 20;

bool GpuRequired() {
  const char* value = std::getenv("BATON_REQUIRE_GPU");
  return value != nullptr && std::string(value) != "" && std::string(value) != "0";
}

absl::StatusOr<std::unique_ptr<Device>>& Cuda() {
  static auto* device = new absl::StatusOr<std::unique_ptr<Device>>(NewCudaDevice());
  return *device;
}

#define BATON_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                              \
    if (!Cuda().ok()) {                                                             \
      if (GpuRequired()) FAIL() << "BATON_REQUIRE_GPU is set: " << Cuda().status(); \
      GTEST_SKIP() << "no usable CUDA device: " << Cuda().status();                 \
    }                                                                               \
  } while (0)

Device& Gpu() { return **Cuda(); }

absl::Status CudaCheck(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error)));
}

// Byte `index` of test pattern `seed`: bytes of different seeds or places differ.
uint8_t PatternByte(uint32_t seed, uint64_t index) {
  return static_cast<uint8_t>(((index + 1) * 2654435761u + uint64_t{seed} * 40503u) >> 13);
}

std::vector<uint8_t> Pattern(uint32_t seed, uint64_t first, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = PatternByte(seed, first + i);
  return out;
}

// Copies to device memory and waits until it is there (a pageable upload may still be in flight
// when cudaMemcpy returns).
absl::Status Upload(void* dst, const std::vector<uint8_t>& bytes) {
  BATON_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyDefault), "cudaMemcpy"));
  return CudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

absl::StatusOr<std::vector<uint8_t>> Download(const void* src, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  BATON_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDefault), "cudaMemcpy"));
  return out;
}

// "" when equal, else where they first differ.
std::string FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return absl::StrCat(got.size(), " bytes, not ", want.size());
  const auto [at, _] = std::mismatch(got.begin(), got.end(), want.begin());
  if (at == got.end()) return "";
  const size_t index = at - got.begin();
  return absl::StrCat("byte ", index, " is ", static_cast<int>(got[index]), ", not ",
                      static_cast<int>(want[index]));
}

// Checks that device memory at `data` holds bytes [first, first + bytes) of pattern `seed`.
absl::Status CheckPattern(const void* data, uint32_t seed, uint64_t first, size_t bytes) {
  BATON_ASSIGN_OR_RETURN(std::vector<uint8_t> got, Download(data, bytes));
  const std::string difference = FirstDifference(got, Pattern(seed, first, bytes));
  if (difference.empty()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("pattern ", seed, " at offset ", first, ": ", difference));
}

// --------------------------------------------------------------------------------------------
// The other process and what the two send each other.

// An ExportedMemory (its descriptors follow, one message each), the bytes the importer checks
// (offsets from the mapping's start) and the bytes it then writes.
struct ImportRequest {
  uint32_t kind = 0;
  std::array<uint8_t, 16> uuid{};
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t buffer_id = 0;
  uint32_t segments = 0;
  std::array<uint64_t, kMaxSegments> segment_sizes{};
  std::array<uint8_t, kIpcHandleBytes> ipc_handle{};
  uint64_t check_offset = 0;
  uint64_t check_bytes = 0;
  uint32_t check_seed = 0;
  uint64_t write_offset = 0;
  uint64_t write_bytes = 0;
  uint32_t write_seed = 0;
};

// What the child answers: a status, and for event queries whether the event is done.
struct Reply {
  int32_t code = 0;  // absl::StatusCode
  int32_t done = 0;
  std::array<char, 1024> message{};
};

absl::Status SendReply(int socket, const absl::Status& status, bool done = false) {
  Reply reply;
  reply.code = static_cast<int32_t>(status.code());
  reply.done = done ? 1 : 0;
  const size_t length = std::min(status.message().size(), reply.message.size() - 1);
  std::memcpy(reply.message.data(), status.message().data(), length);
  return SendPacket(socket, &reply, sizeof(reply));
}

// The child's next reply; its status as the error, or whether the event is done.
absl::StatusOr<bool> ReceiveReply(int socket) {
  Reply reply;
  int fd = -1;
  BATON_ASSIGN_OR_RETURN(const size_t length,
                         RecvPacket(socket, &reply, sizeof(reply), &fd, absl::Now() + kTimeout));
  UniqueFd unexpected(fd);
  if (length != sizeof(reply)) {
    return absl::UnavailableError(absl::StrCat("the child sent ", length, " bytes, not a reply"));
  }
  reply.message.back() = '\0';
  if (reply.code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply.code),
                        absl::StrCat("child: ", reply.message.data()));
  }
  return reply.done != 0;
}

absl::Status SendExport(int socket, const ExportedMemory& memory, ImportRequest request) {
  request.kind = static_cast<uint32_t>(memory.kind);
  request.uuid = memory.device_uuid;
  request.base = memory.base;
  request.size = memory.size;
  request.buffer_id = memory.buffer_id;
  request.segments = static_cast<uint32_t>(memory.segment_fds.size());
  if (request.segments > kMaxSegments || memory.segment_sizes.size() != request.segments) {
    return absl::InvalidArgumentError("malformed export");
  }
  std::copy(memory.segment_sizes.begin(), memory.segment_sizes.end(),
            request.segment_sizes.begin());
  request.ipc_handle = memory.ipc_handle;
  BATON_RETURN_IF_ERROR(SendPacket(socket, &request, sizeof(request)));
  for (uint32_t i = 0; i < request.segments; ++i) {
    BATON_RETURN_IF_ERROR(SendPacket(socket, &i, sizeof(i), memory.segment_fds[i].get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExportedMemory> ReceiveExport(int socket, ImportRequest& request) {
  int fd = -1;
  BATON_ASSIGN_OR_RETURN(const size_t length, RecvPacket(socket, &request, sizeof(request), &fd,
                                                         absl::Now() + kTimeout));
  UniqueFd unexpected(fd);
  if (length != sizeof(request) || request.segments > kMaxSegments) {
    return absl::InvalidArgumentError(absl::StrCat("a request of ", length, " bytes"));
  }
  ExportedMemory memory;
  memory.kind = static_cast<ShareKind>(request.kind);
  memory.device_uuid = request.uuid;
  memory.base = request.base;
  memory.size = request.size;
  memory.buffer_id = request.buffer_id;
  memory.ipc_handle = request.ipc_handle;
  for (uint32_t i = 0; i < request.segments; ++i) {
    uint32_t index = 0;
    int segment_fd = -1;
    BATON_RETURN_IF_ERROR(
        RecvPacket(socket, &index, sizeof(index), &segment_fd, absl::Now() + kTimeout).status());
    UniqueFd owned(segment_fd);
    if (index != i || !owned.valid()) {
      return absl::InvalidArgumentError(absl::StrCat("segment ", i, " came without descriptor"));
    }
    memory.segment_fds.push_back(std::move(owned));
    memory.segment_sizes.push_back(request.segment_sizes[i]);
  }
  return memory;
}

// Role "import": maps the memory, checks what the parent wrote, writes back, unmaps.
absl::Status ServeImport(Device& device, int socket) {
  ImportRequest request;
  BATON_ASSIGN_OR_RETURN(ExportedMemory memory, ReceiveExport(socket, request));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> mapping, device.Import(std::move(memory)));
  if (mapping->size() != request.size) {
    return absl::InternalError(
        absl::StrCat("mapped ", mapping->size(), " bytes of ", request.size));
  }
  auto* data = static_cast<uint8_t*>(mapping->data());
  BATON_RETURN_IF_ERROR(CheckPattern(data + request.check_offset, request.check_seed,
                                     request.check_offset, request.check_bytes));
  return Upload(data + request.write_offset,
                Pattern(request.write_seed, request.write_offset, request.write_bytes));
}

// Role "event": opens the parent's event and answers each 'q' with a query, until 'x'.
absl::Status ServeEvent(Device& device, int socket) {
  EventHandle handle;
  int fd = -1;
  BATON_ASSIGN_OR_RETURN(
      const size_t length,
      RecvPacket(socket, handle.bytes.data(), handle.bytes.size(), &fd, absl::Now() + kTimeout));
  handle.fd.Reset(fd);
  if (length != handle.bytes.size()) return absl::InvalidArgumentError("short event handle");
  absl::StatusOr<std::unique_ptr<Event>> event = device.OpenIpcEvent(std::move(handle));
  BATON_RETURN_IF_ERROR(SendReply(socket, event.status()));
  BATON_RETURN_IF_ERROR(event.status());
  for (;;) {
    char command = 0;
    int unexpected = -1;
    BATON_RETURN_IF_ERROR(
        RecvPacket(socket, &command, sizeof(command), &unexpected, absl::Now() + kTimeout)
            .status());
    UniqueFd closed(unexpected);
    if (command != 'q') return absl::OkStatus();
    const absl::StatusOr<bool> done = (*event)->Query();
    BATON_RETURN_IF_ERROR(SendReply(socket, done.status(), done.value_or(false)));
  }
}

// This binary in another process, serving `role` on a SOCK_SEQPACKET socket.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(absl::string_view role) {
    int fds[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) != 0) return BATON_ERRNO_STATUS("socketpair");
    UniqueFd mine(fds[0]);
    UniqueFd theirs(fds[1]);  // inherited by the child (no close-on-exec)
    BATON_POSIX_RETURN_IF_ERROR(fcntl(mine.get(), F_SETFD, FD_CLOEXEC));

    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const absl::string_view variable(*entry);
      // GTEST_OUTPUT and friends would make the child overwrite the parent's reports.
      if (absl::StartsWith(variable, "GTEST_") ||
          absl::StartsWith(variable, "BATON_CUDA_DEVICE_TEST_")) {
        continue;
      }
      environment.emplace_back(variable);
    }
    environment.push_back(absl::StrCat(kRoleVariable, "=", role));
    environment.push_back(absl::StrCat(kSocketVariable, "=", theirs.get()));
    std::vector<char*> envp;
    envp.reserve(environment.size() + 1);
    for (std::string& variable : environment) envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::string program = "/proc/self/exe";
    std::string filter = "--gtest_filter=CudaDeviceChild.DISABLED_Serve";
    std::string disabled = "--gtest_also_run_disabled_tests";
    std::array<char*, 4> argv = {program.data(), filter.data(), disabled.data(), nullptr};

    pid_t pid = -1;
    const int error =
        posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (error != 0) return ErrnoStatus(error, "posix_spawn", __FILE__, __LINE__);
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, std::move(mine)));
  }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    socket_.Reset(-1);  // a child still waiting for a message sees the end and exits
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  int socket() const { return socket_.get(); }

  // Waits for the child to exit; its exit status (0: its test passed).
  absl::StatusOr<int> Wait() {
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return BATON_ERRNO_STATUS("waitpid");
    pid_ = -1;
    if (!WIFEXITED(status)) return absl::InternalError(absl::StrCat("child status ", status));
    return WEXITSTATUS(status);
  }

 private:
  ChildProcess(pid_t pid, UniqueFd socket) : pid_(pid), socket_(std::move(socket)) {}

  pid_t pid_;
  UniqueFd socket_;
};

// Maps `memory` in another process, which checks and writes as `request` says; returns once it
// has unmapped it again.
absl::Status ImportInChild(const ExportedMemory& memory, const ImportRequest& request) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child, ChildProcess::Start("import"));
  BATON_RETURN_IF_ERROR(SendExport(child->socket(), memory, request));
  BATON_RETURN_IF_ERROR(ReceiveReply(child->socket()).status());
  BATON_ASSIGN_OR_RETURN(const int exit_status, child->Wait());
  if (exit_status != 0) return absl::InternalError(absl::StrCat("child exit ", exit_status));
  return absl::OkStatus();
}

// The child's side: runs only when started by ChildProcess. Roles: "import" (ServeImport),
// "event" (ServeEvent), "probe" (replies with NewCudaDevice's status).
TEST(CudaDeviceChild, DISABLED_Serve) {
  const char* role = std::getenv(kRoleVariable);
  const char* socket_text = std::getenv(kSocketVariable);
  if (role == nullptr || socket_text == nullptr) GTEST_SKIP() << "run by ChildProcess only";
  const int socket = std::atoi(socket_text);
  absl::StatusOr<std::unique_ptr<Device>> device = NewCudaDevice();
  if (absl::string_view(role) == "probe") {  // says whether it has a device, nothing more
    EXPECT_TRUE(SendReply(socket, device.status()).ok());
    return;
  }
  absl::Status status = device.status();
  if (status.ok()) {
    if (absl::string_view(role) == "import") {
      status = ServeImport(**device, socket);
    } else if (absl::string_view(role) == "event") {
      status = ServeEvent(**device, socket);
    } else {
      status = absl::InvalidArgumentError(absl::StrCat("unknown role ", role));
    }
  }
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(SendReply(socket, status).ok());
}

// --------------------------------------------------------------------------------------------
// Helpers of the parent's tests.

// cudaMalloc memory, freed on destruction.
class CudaMallocBuffer {
 public:
  explicit CudaMallocBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&data_, bytes), cudaSuccess); }
  CudaMallocBuffer(const CudaMallocBuffer&) = delete;
  CudaMallocBuffer& operator=(const CudaMallocBuffer&) = delete;
  ~CudaMallocBuffer() { cudaFree(data_); }
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
};

// A stream of its own, destroyed on destruction.
class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(stream_); }
  StreamHandle get() const { return stream_; }
  cudaStream_t cuda() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A page of anonymous host memory registered with RegisterHost, whose first word streams wait
// on. The destructor stores `release` first, so that no stream waits for ever when a test fails.
class WaitWord {
 public:
  explicit WaitWord(uint32_t initial) {
    page_ = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(page_, MAP_FAILED);
    word_ = new (page_) std::atomic<uint32_t>(initial);
    absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
        Gpu().RegisterHost(page_, kPageBytes);
    EXPECT_TRUE(registration.ok()) << registration.status();
    if (registration.ok()) registration_ = *std::move(registration);
  }
  WaitWord(const WaitWord&) = delete;
  WaitWord& operator=(const WaitWord&) = delete;
  ~WaitWord() {
    word_->store(release_);
    cudaDeviceSynchronize();
    registration_.reset();
    munmap(page_, kPageBytes);
  }

  std::atomic<uint32_t>* word() const { return word_; }
  uint8_t* page() const { return static_cast<uint8_t*>(page_); }
  void set_release(uint32_t value) { release_ = value; }

  static constexpr size_t kPageBytes = 4096;

 private:
  void* page_ = nullptr;
  std::atomic<uint32_t>* word_ = nullptr;
  std::unique_ptr<HostRegistration> registration_;
  uint32_t release_ = 0;
};

// The driver calls the multi-segment test needs to build VMM memory as PyTorch's expandable
// segments do (loaded at run time, like the library).
struct SegmentDriver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

template <typename Function>
bool LoadDriverFunction(const char* name, Function* function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &address, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return false;
  }
  *function = reinterpret_cast<Function>(address);
  return true;
}

bool LoadSegmentDriver(SegmentDriver& driver) {
  return LoadDriverFunction("cuMemCreate", &driver.create) &&
         LoadDriverFunction("cuMemRelease", &driver.release) &&
         LoadDriverFunction("cuMemAddressReserve", &driver.reserve) &&
         LoadDriverFunction("cuMemAddressFree", &driver.free) &&
         LoadDriverFunction("cuMemMap", &driver.map) &&
         LoadDriverFunction("cuMemUnmap", &driver.unmap) &&
         LoadDriverFunction("cuMemSetAccess", &driver.set_access);
}

// `segments` physical allocations of `segment_bytes` on device 0, mapped back to back at the
// start of a reservation one segment longer (so the walk finds the end); released on
// destruction.
class SegmentedMemory {
 public:
  SegmentedMemory(const SegmentDriver& driver, size_t segments, size_t segment_bytes)
      : driver_(driver), segment_bytes_(segment_bytes), reserved_((segments + 1) * segment_bytes) {
    EXPECT_EQ(driver_.reserve(&base_, reserved_, segment_bytes, 0, 0), CUDA_SUCCESS);
    CUmemAllocationProp properties{};
    properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    properties.location.id = 0;
    for (size_t i = 0; i < segments; ++i) {
      CUmemGenericAllocationHandle handle = 0;
      const CUresult created = driver_.create(&handle, segment_bytes, &properties, 0);
      EXPECT_EQ(created, CUDA_SUCCESS);
      if (created != CUDA_SUCCESS) break;
      const CUresult mapped = driver_.map(base_ + i * segment_bytes, segment_bytes, 0, handle, 0);
      driver_.release(handle);  // the mapping keeps the memory
      EXPECT_EQ(mapped, CUDA_SUCCESS);
      if (mapped != CUDA_SUCCESS) break;
      ++mapped_;
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(driver_.set_access(base_, mapped_ * segment_bytes, &access, 1), CUDA_SUCCESS);
  }
  SegmentedMemory(const SegmentedMemory&) = delete;
  SegmentedMemory& operator=(const SegmentedMemory&) = delete;
  ~SegmentedMemory() {
    for (size_t i = 0; i < mapped_; ++i) driver_.unmap(base_ + i * segment_bytes_, segment_bytes_);
    if (base_ != 0) driver_.free(base_, reserved_);
  }

  uint8_t* data() const {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver's addresses are integers
    return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base_));
  }
  size_t size() const { return mapped_ * segment_bytes_; }

 private:
  const SegmentDriver& driver_;
  const size_t segment_bytes_;
  const size_t reserved_;
  CUdeviceptr base_ = 0;
  size_t mapped_ = 0;
};

// --------------------------------------------------------------------------------------------
// The tests.

TEST(CudaDevice, OpensOrSaysWhy) {
  const absl::StatusOr<std::unique_ptr<Device>>& device = Cuda();
  if (device.ok()) {
    EXPECT_GE((*device)->count(), 1);
    EXPECT_THAT((*device)->Describe(), StartsWith("cuda ("));
    return;
  }
  if (GpuRequired()) FAIL() << "BATON_REQUIRE_GPU is set: " << device.status();
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition) << device.status();
  EXPECT_THAT(device.status().message(), HasSubstr("CUDA"));
  std::printf("without a GPU: %s\n", device.status().ToString().c_str());
}

// The other process of the tests below starts, answers and exits; without a GPU it says why
// not, as this one does.
TEST(CudaDevice, AnotherProcessOpensTheSameDevices) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start("probe");
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Status there = ReceiveReply((*child)->socket()).status();
  EXPECT_EQ(there.code(), Cuda().status().code()) << there;
  absl::StatusOr<int> exit_status = (*child)->Wait();
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 0);
}

TEST(CudaDevice, RejectsBadArguments) {
  BATON_SKIP_WITHOUT_GPU();
  EXPECT_EQ(Gpu().Allocate(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gpu().Allocate(1, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gpu().Allocate(1, Gpu().count()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gpu().NewKernels(Gpu().count()).status().code(), absl::StatusCode::kInvalidArgument);

  std::array<uint8_t, 64> host{};
  EXPECT_FALSE(Gpu().IsDeviceMemory(host.data(), host.size()));
  EXPECT_EQ(Gpu().Export(host.data(), host.size()).status().code(), absl::StatusCode::kNotFound);
  std::atomic<uint32_t> unregistered{0};
  EXPECT_EQ(Gpu().WaitValue(nullptr, &unregistered, 1).code(), absl::StatusCode::kInvalidArgument);

  // The smallest allocation is one granule; its export names the GPU.
  absl::StatusOr<std::unique_ptr<Allocation>> granule = Gpu().Allocate(1, 0);
  ASSERT_TRUE(granule.ok()) << granule.status();
  const size_t granularity = (*granule)->size();
  absl::StatusOr<ExportedMemory> exported = Gpu().Export((*granule)->data(), 1);
  ASSERT_TRUE(exported.ok()) << exported.status();

  ExportedMemory unknown_gpu;
  unknown_gpu.kind = ShareKind::kLegacyIpc;
  unknown_gpu.size = granularity;
  EXPECT_EQ(Gpu().Import(std::move(unknown_gpu)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A descriptor that is not CUDA memory, and a size that is not a whole number of granules.
  for (const size_t size : {granularity, granularity + 1}) {
    ExportedMemory not_cuda;
    not_cuda.kind = ShareKind::kVmm;
    not_cuda.device_uuid = exported->device_uuid;
    not_cuda.size = size;
    not_cuda.segment_sizes = {size};
    not_cuda.segment_fds.emplace_back(memfd_create("not_cuda", MFD_CLOEXEC));
    ASSERT_TRUE(not_cuda.segment_fds[0].valid());
    ASSERT_EQ(ftruncate(not_cuda.segment_fds[0].get(), static_cast<off_t>(size)), 0);
    const absl::Status status = Gpu().Import(std::move(not_cuda)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << size << ": " << status;
  }

  ExportedMemory bad_handle;
  bad_handle.kind = ShareKind::kLegacyIpc;
  bad_handle.device_uuid = exported->device_uuid;
  bad_handle.size = granularity;
  bad_handle.ipc_handle.fill(0xAB);
  const absl::Status status = Gpu().Import(std::move(bad_handle)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(CudaDevice, AllocationIsMappedByAnotherProcess) {
  BATON_SKIP_WITHOUT_GPU();
  int device_before = -1;
  ASSERT_EQ(cudaGetDevice(&device_before), cudaSuccess);
  constexpr size_t kBytes = 3 * kMiB + 1;
  absl::StatusOr<std::unique_ptr<Allocation>> allocation = Gpu().Allocate(kBytes, 0);
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  int device_after = -1;
  ASSERT_EQ(cudaGetDevice(&device_after), cudaSuccess);
  EXPECT_EQ(device_after, device_before);

  auto* data = static_cast<uint8_t*>((*allocation)->data());
  const size_t size = (*allocation)->size();
  ASSERT_GE(size, kBytes);
  EXPECT_TRUE(Gpu().IsDeviceMemory(data, size));
  ASSERT_TRUE(Upload(data, Pattern(1, 0, size)).ok());

  // From a pointer inside: the whole allocation, one segment.
  absl::StatusOr<ExportedMemory> exported = Gpu().Export(data + 4096, 100);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->kind, ShareKind::kVmm);
  EXPECT_EQ(exported->base, reinterpret_cast<uintptr_t>(data));
  EXPECT_EQ(exported->size, size);
  EXPECT_NE(exported->buffer_id, 0u);
  ASSERT_EQ(exported->segment_fds.size(), 1u);
  EXPECT_TRUE(exported->segment_fds[0].valid());
  EXPECT_EQ(exported->segment_sizes, std::vector<uint64_t>{size});

  constexpr size_t kWritten = 64 * size_t{1024};
  ImportRequest request;
  request.check_offset = 0;
  request.check_bytes = size;
  request.check_seed = 1;
  request.write_offset = 4096;
  request.write_bytes = kWritten;
  request.write_seed = 2;
  const absl::Status imported = ImportInChild(*exported, request);
  ASSERT_TRUE(imported.ok()) << imported;
  EXPECT_TRUE(CheckPattern(data, 1, 0, 4096).ok());
  const absl::Status written = CheckPattern(data + 4096, 2, 4096, kWritten);
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_TRUE(CheckPattern(data + 4096 + kWritten, 1, 4096 + kWritten, 4096).ok());
}

TEST(CudaDevice, MultiSegmentVmmMemoryIsExportedSegmentBySegment) {
  BATON_SKIP_WITHOUT_GPU();
  SegmentDriver driver;
  ASSERT_TRUE(LoadSegmentDriver(driver));
  absl::StatusOr<std::unique_ptr<Allocation>> granule = Gpu().Allocate(1, 0);
  ASSERT_TRUE(granule.ok()) << granule.status();
  const size_t segment = (*granule)->size();
  SegmentedMemory memory(driver, 2, segment);
  ASSERT_EQ(memory.size(), 2 * segment);
  ASSERT_TRUE(Upload(memory.data(), Pattern(7, 0, memory.size())).ok());

  absl::StatusOr<ExportedMemory> exported = Gpu().Export(memory.data() + segment - 16, 32);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->kind, ShareKind::kVmm);
  EXPECT_EQ(exported->base, reinterpret_cast<uintptr_t>(memory.data()));
  EXPECT_EQ(exported->size, 2 * segment);
  EXPECT_EQ(exported->segment_sizes, (std::vector<uint64_t>{segment, segment}));
  ASSERT_EQ(exported->segment_fds.size(), 2u);

  // The importer maps the segments back to back: reads and writes cross the boundary.
  ImportRequest request;
  request.check_offset = segment - 4096;
  request.check_bytes = 8192;
  request.check_seed = 7;
  request.write_offset = segment - 100;
  request.write_bytes = 200;
  request.write_seed = 8;
  const absl::Status imported = ImportInChild(*exported, request);
  ASSERT_TRUE(imported.ok()) << imported;
  const absl::Status written = CheckPattern(memory.data() + segment - 100, 8, segment - 100, 200);
  EXPECT_TRUE(written.ok()) << written;

  // The reservation goes on unmapped: a range past the second segment is refused.
  const absl::Status past_end = Gpu().Export(memory.data() + 2 * segment - 16, 32).status();
  EXPECT_EQ(past_end.code(), absl::StatusCode::kFailedPrecondition) << past_end;
  EXPECT_THAT(past_end.message(), HasSubstr("runs past"));
}

TEST(CudaDevice, CudaMallocMemoryIsSharedByLegacyIpcFromAnOffset) {
  BATON_SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = 8 * kMiB;
  uint64_t first_buffer_id = 0;
  {
    CudaMallocBuffer buffer(kBytes);
    ASSERT_NE(buffer.data(), nullptr);
    ASSERT_TRUE(Upload(buffer.data(), Pattern(3, 0, kBytes)).ok());
    EXPECT_TRUE(Gpu().IsDeviceMemory(buffer.data() + 8192, 4096));

    absl::StatusOr<ExportedMemory> exported = Gpu().Export(buffer.data() + 8192, 4096);
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->kind, ShareKind::kLegacyIpc);
    EXPECT_EQ(exported->base, reinterpret_cast<uintptr_t>(buffer.data()));
    EXPECT_GE(exported->size, kBytes);
    EXPECT_NE(exported->buffer_id, 0u);
    EXPECT_TRUE(exported->segment_fds.empty());
    first_buffer_id = exported->buffer_id;
    absl::StatusOr<uint64_t> id = Gpu().BufferId(buffer.data() + kBytes - 1);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, first_buffer_id);
    int host = 0;
    EXPECT_EQ(Gpu().BufferId(&host).status().code(), absl::StatusCode::kNotFound);

    const absl::Status past_end = Gpu().Export(buffer.data() + exported->size - 1, 2).status();
    EXPECT_EQ(past_end.code(), absl::StatusCode::kFailedPrecondition) << past_end;

    ImportRequest request;
    request.check_offset = 8192;
    request.check_bytes = 4096;
    request.check_seed = 3;
    request.write_offset = 65536;
    request.write_bytes = 4096;
    request.write_seed = 4;
    const absl::Status imported = ImportInChild(*exported, request);  // closed when it returns
    ASSERT_TRUE(imported.ok()) << imported;
    const absl::Status written = CheckPattern(buffer.data() + 65536, 4, 65536, 4096);
    EXPECT_TRUE(written.ok()) << written;
  }
  // A new allocation (perhaps at the same address) has a new buffer id.
  CudaMallocBuffer again(kBytes);
  absl::StatusOr<ExportedMemory> exported = Gpu().Export(again.data(), 1);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_NE(exported->buffer_id, first_buffer_id);
  EXPECT_EQ(*Gpu().BufferId(again.data()), exported->buffer_id);
}

TEST(CudaDevice, UnshareableDeviceMemoryIsRefusedForStaging) {
  BATON_SKIP_WITHOUT_GPU();
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, kMiB), cudaSuccess);
  EXPECT_TRUE(Gpu().IsDeviceMemory(managed, kMiB));
  const absl::Status managed_export = Gpu().Export(managed, kMiB).status();
  EXPECT_EQ(managed_export.code(), absl::StatusCode::kFailedPrecondition) << managed_export;
  cudaFree(managed);

  void* pooled = nullptr;
  ASSERT_EQ(cudaMallocAsync(&pooled, kMiB, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_TRUE(Gpu().IsDeviceMemory(pooled, kMiB));
  const absl::Status pooled_export = Gpu().Export(pooled, kMiB).status();
  EXPECT_EQ(pooled_export.code(), absl::StatusCode::kFailedPrecondition) << pooled_export;
  EXPECT_THAT(pooled_export.message(), HasSubstr("stage it"));
  cudaFreeAsync(pooled, nullptr);
  cudaStreamSynchronize(nullptr);
}

TEST(CudaDevice, WaitValueHoldsTheStreamUntilTheWordArrives) {
  BATON_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<Allocation>> source = Gpu().Allocate(4, 0);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(Upload((*source)->data(), {0x12, 0x34, 0x56, 0x78}).ok());
  Stream stream;
  // Destroyed first: whatever happens, the stream is released before its memory goes.
  WaitWord wait(0xFFFFFFF0u);  // the count wraps before it reaches the value
  wait.set_release(0x10);
  uint8_t* landing = wait.page() + 64;  // registered, so the copy behind the wait is async

  // Overlapping registrations are refused.
  EXPECT_EQ(Gpu().RegisterHost(wait.page() + 128, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(Gpu().WaitValue(stream.get(), wait.word(), 0x10).ok());
  ASSERT_TRUE(Gpu().CopyAsync(landing, (*source)->data(), 4, stream.get()).ok());
  EXPECT_EQ(cudaStreamQuery(stream.cuda()), cudaErrorNotReady);
  wait.word()->store(0x0F);  // (int32_t)(0x0F - 0x10) < 0: still held
  EXPECT_EQ(cudaStreamQuery(stream.cuda()), cudaErrorNotReady);
  cudaGetLastError();
  EXPECT_EQ(std::vector<uint8_t>(landing, landing + 4), std::vector<uint8_t>(4, 0));

  wait.word()->store(0x10);
  const absl::Status synchronized = Gpu().Synchronize(stream.get());
  ASSERT_TRUE(synchronized.ok()) << synchronized;
  EXPECT_EQ(std::vector<uint8_t>(landing, landing + 4),
            (std::vector<uint8_t>{0x12, 0x34, 0x56, 0x78}));
}

TEST(CudaDevice, IpcEventIsQueriedInAnotherProcess) {
  BATON_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<Event>> event = Gpu().CreateIpcEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  absl::StatusOr<EventHandle> handle = (*event)->Export();
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_FALSE(handle->fd.valid());
  absl::StatusOr<bool> never_recorded = (*event)->Query();
  ASSERT_TRUE(never_recorded.ok()) << never_recorded.status();
  EXPECT_TRUE(*never_recorded);

  // The recorded work waits for the host: the event cannot be done before the store.
  Stream stream;
  WaitWord wait(0);  // destroyed first: releases the stream whatever happens
  wait.set_release(1);
  ASSERT_TRUE(Gpu().WaitValue(stream.get(), wait.word(), 1).ok());
  ASSERT_TRUE((*event)->Record(stream.get()).ok());

  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start("event");
  ASSERT_TRUE(child.ok()) << child.status();
  const int socket = (*child)->socket();
  ASSERT_TRUE(SendPacket(socket, handle->bytes.data(), handle->bytes.size()).ok());
  const absl::StatusOr<bool> opened = ReceiveReply(socket);
  ASSERT_TRUE(opened.ok()) << opened.status();

  const char query = 'q';
  ASSERT_TRUE(SendPacket(socket, &query, 1).ok());
  absl::StatusOr<bool> done = ReceiveReply(socket);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(*done);
  absl::StatusOr<bool> done_here = (*event)->Query();
  ASSERT_TRUE(done_here.ok()) << done_here.status();
  EXPECT_FALSE(*done_here);

  wait.word()->store(1);
  ASSERT_TRUE(Gpu().Synchronize(stream.get()).ok());
  ASSERT_TRUE(SendPacket(socket, &query, 1).ok());
  done = ReceiveReply(socket);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);

  const char exit = 'x';
  ASSERT_TRUE(SendPacket(socket, &exit, 1).ok());
  ASSERT_TRUE(ReceiveReply(socket).ok());
  absl::StatusOr<int> exit_status = (*child)->Wait();
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 0);
}

TEST(CudaDevice, CopiesAndKernelsWorkOnAllocations) {
  BATON_SKIP_WITHOUT_GPU();
  constexpr size_t kCount = 1000;
  std::vector<float> a(kCount);
  std::vector<float> b(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(3 * i + 1);
  }
  absl::StatusOr<std::unique_ptr<Allocation>> dst = Gpu().Allocate(kCount * sizeof(float), 0);
  absl::StatusOr<std::unique_ptr<Allocation>> src = Gpu().Allocate(kCount * sizeof(float), 0);
  ASSERT_TRUE(dst.ok() && src.ok());
  Stream stream;
  ASSERT_TRUE(Gpu().CopyAsync((*dst)->data(), a.data(), kCount * sizeof(float), stream.get()).ok());
  ASSERT_TRUE(Gpu().CopyAsync((*src)->data(), b.data(), kCount * sizeof(float), stream.get()).ok());
  ASSERT_TRUE(Gpu().Synchronize(stream.get()).ok());

  absl::StatusOr<std::unique_ptr<DeviceKernels>> kernels = Gpu().NewKernels(0);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  EXPECT_EQ((*kernels)->memory(), transport::MemoryKind::kDevice);
  (*kernels)->ReduceInto(collective::DataType::kFloat32, collective::ReduceOp::kSum, (*dst)->data(),
                         (*src)->data(), kCount);
  ASSERT_TRUE((*kernels)->last_error().ok()) << (*kernels)->last_error();

  std::vector<float> sum(kCount);
  ASSERT_TRUE(
      Gpu().CopyAsync(sum.data(), (*dst)->data(), kCount * sizeof(float), stream.get()).ok());
  ASSERT_TRUE(Gpu().Synchronize(stream.get()).ok());
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(sum[i], static_cast<float>(4 * i + 1)) << "element " << i;
  }
}

}  // namespace
}  // namespace baton::device
