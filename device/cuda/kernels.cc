#include "device/cuda/kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/probe.h"
#include "device/cuda/reduce_kernels.h"
#include "device/cuda/scoped_device.h"
#include "spdlog/spdlog.h"

namespace baton::device::cuda {
namespace {

static_assert(CudaKernels::kMaxSources == internal::kMaxReduceSources);

// Overlapping copies go in pieces no longer than the distance between the ranges (each piece
// then reads nothing that an earlier or the same piece wrote) while that takes at most this many
// copies; closer ranges go through a temporary buffer.
constexpr size_t kMaxOverlapPieces = 16;

// Two CTAs of 512 threads per SM keep a reduction memory-bound (../shared/reference/gpu.md 3.2).
constexpr int kBlocksPerSm = 2;

absl::Status LaunchStatus(internal::LaunchError error, absl::string_view what) {
  return CudartStatus(static_cast<cudaError_t>(error), what, __FILE__, __LINE__);
}

class StreamKernels final : public CudaKernels {
 public:
  StreamKernels(int device, cudaStream_t stream, bool owns_stream, int max_blocks)
      : device_(device), stream_(stream), owns_stream_(owns_stream), max_blocks_(max_blocks) {}
  StreamKernels(const StreamKernels&) = delete;
  StreamKernels& operator=(const StreamKernels&) = delete;

  ~StreamKernels() override {
    if (!owns_stream_) return;
    ScopedDevice scoped;
    if (scoped.Enter(device_).ok()) cudaStreamDestroy(stream_);
  }

  MemoryKind memory() const override { return MemoryKind::kDevice; }
  int device() const override { return device_; }
  CUstream_st* stream() const override { return stream_; }
  absl::Status last_error() const override {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    if (count == 0) return;
    const void* srcs[] = {dst, src};  // dst[i] = op(dst[i], src[i]), as reduce.h folds
    Run("ReduceInto", [&] {
      return LaunchStatus(
          internal::LaunchReduce(type, op, dst, srcs, 2, count, max_blocks_, stream_),
          "reduce kernel launch");
    });
  }

  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    if (count == 0) return;
    if (srcs.empty() || srcs.size() > static_cast<size_t>(kMaxSources)) {
      Keep(absl::InvalidArgumentError(absl::StrCat("ReduceMany on device memory takes 1 to ",
                                                   kMaxSources, " sources, not ", srcs.size())));
      return;
    }
    Run("ReduceMany", [&] {
      return LaunchStatus(
          internal::LaunchReduce(type, op, dst, srcs.data(), static_cast<int>(srcs.size()), count,
                                 max_blocks_, stream_),
          "reduce kernel launch");
    });
  }

  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    if (count == 0) return;
    if (divisor <= 0) {
      Keep(absl::InvalidArgumentError(absl::StrCat("Divide by ", divisor, ": must be positive")));
      return;
    }
    Run("Divide", [&] {
      return LaunchStatus(internal::LaunchDivide(type, data, count, divisor, max_blocks_, stream_),
                          "divide kernel launch");
    });
  }

  void Copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes == 0 || dst == src) return;
    Run("Copy", [&] { return EnqueueCopy(dst, src, bytes); });
  }

  void Zero(void* dst, size_t bytes) const override {
    if (bytes == 0) return;
    Run("Zero", [&]() -> absl::Status {
      BATON_CUDART_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, stream_));
      return absl::OkStatus();
    });
  }

 private:
  // Runs `enqueue` on the kernels' device and waits for the stream; keeps the first error.
  template <typename Enqueue>
  void Run(absl::string_view what, Enqueue enqueue) const {
    if (!last_error().ok()) return;
    const absl::Status status = [&]() -> absl::Status {
      ScopedDevice scoped;
      BATON_RETURN_IF_ERROR(scoped.Enter(device_));
      BATON_RETURN_IF_ERROR(enqueue());
      BATON_CUDART_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      return absl::OkStatus();
    }();
    if (!status.ok()) {
      Keep(Annotate(status, what));  // CudartStatus cleared the thread's last error
    }
  }

  // cudaMemcpyAsync requires disjoint ranges; Kernels::Copy allows overlap (memmove).
  absl::Status EnqueueCopy(void* dst, const void* src, size_t bytes) const {
    auto* to = static_cast<char*>(dst);
    const auto* from = static_cast<const char*>(src);
    const auto to_address = reinterpret_cast<uintptr_t>(to);
    const auto from_address = reinterpret_cast<uintptr_t>(from);
    const uintptr_t distance =
        to_address > from_address ? to_address - from_address : from_address - to_address;
    if (distance >= bytes) {
      BATON_CUDART_RETURN_IF_ERROR(
          cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_));
      return absl::OkStatus();
    }
    if ((bytes + distance - 1) / distance <= kMaxOverlapPieces) {
      // Moving down: lowest piece first; moving up: highest piece first.
      for (size_t done = 0; done < bytes;) {
        const size_t piece = std::min<size_t>(distance, bytes - done);
        const size_t offset = to_address < from_address ? done : bytes - done - piece;
        BATON_CUDART_RETURN_IF_ERROR(
            cudaMemcpyAsync(to + offset, from + offset, piece, cudaMemcpyDeviceToDevice, stream_));
        done += piece;
      }
      return absl::OkStatus();
    }
    void* temporary = nullptr;
    BATON_CUDART_RETURN_IF_ERROR(cudaMallocAsync(&temporary, bytes, stream_));
    const cudaError_t in =
        cudaMemcpyAsync(temporary, from, bytes, cudaMemcpyDeviceToDevice, stream_);
    const cudaError_t out =
        in == cudaSuccess ? cudaMemcpyAsync(to, temporary, bytes, cudaMemcpyDeviceToDevice, stream_)
                          : cudaSuccess;
    const cudaError_t freed = cudaFreeAsync(temporary, stream_);
    BATON_CUDART_RETURN_IF_ERROR(in);
    BATON_CUDART_RETURN_IF_ERROR(out);
    BATON_CUDART_RETURN_IF_ERROR(freed);
    return absl::OkStatus();
  }

  void Keep(absl::Status status) const {
    spdlog::error("CUDA kernels on device {}: {}", device_, status.ToString());
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(status);
  }

  const int device_;
  const cudaStream_t stream_;
  const bool owns_stream_;
  const int max_blocks_;
  mutable absl::Mutex mu_;
  mutable absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Checks that the node has a CUDA driver and `device`, makes it current (restored on return)
// and returns its grid cap.
absl::StatusOr<int> PrepareDevice(int device, ScopedDevice& scoped) {
  BATON_ASSIGN_OR_RETURN(const int count, CountGpus());
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist: the node has ", count));
  }
  BATON_RETURN_IF_ERROR(scoped.Enter(device));
  int sms = 0;
  BATON_CUDART_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(1, sms) * kBlocksPerSm;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaKernels>> NewCudaKernels(int device) {
  ScopedDevice scoped;
  BATON_ASSIGN_OR_RETURN(const int max_blocks, PrepareDevice(device, scoped));
  cudaStream_t stream = nullptr;
  BATON_CUDART_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::make_unique<StreamKernels>(device, stream, /*owns_stream=*/true, max_blocks);
}

absl::StatusOr<std::unique_ptr<CudaKernels>> NewCudaKernels(int device, CUstream_st* stream) {
  ScopedDevice scoped;
  BATON_ASSIGN_OR_RETURN(const int max_blocks, PrepareDevice(device, scoped));
  int stream_device = -1;
  BATON_CUDART_RETURN_IF_ERROR(cudaStreamGetDevice(stream, &stream_device));
  if (stream_device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stream belongs to CUDA device ", stream_device, ", not ", device));
  }
  return std::make_unique<StreamKernels>(device, stream, /*owns_stream=*/false, max_blocks);
}

}  // namespace baton::device::cuda
