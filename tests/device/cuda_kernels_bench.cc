// The reduce kernels' memory bandwidth against cudaMemcpy device-to-device on the same buffers,
// on GPU 0 (scripts/gpu_check.sh runs it; docs/gpu.md keeps the results). For each type and
// number of sources k, ReduceMany(dst, k sources) moves (k + 1) * bytes through memory and a
// device-to-device copy of the same bytes moves 2 * bytes; the ratio of the two bandwidths is
// what the reduction costs beyond moving the bytes (target: at least 0.85). Times are CUDA
// events on the kernels' own stream around each call, the median of the repetitions.
//
// Usage: cuda_kernels_bench [--mib=512] [--reps=10]
// Exit status: 0 when it ran (whatever the ratios: a benchmark, not a test), 77 without a GPU,
// 1 on a CUDA error.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda/kernels.h"
#include "device/data_type.h"

namespace baton::device::cuda {
namespace {

constexpr int kSkipped = 77;

bool Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_kernels_bench: %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

// Device memory freed on destruction.
class Buffer {
 public:
  explicit Buffer(size_t bytes) { ok_ = Check(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  bool ok() const { return ok_; }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  bool ok_ = false;
};

// Times `work` (which enqueues on `stream`) with events: the median of `reps` runs after one
// warm-up, in seconds; negative on a CUDA error.
template <typename Work>
double MedianSeconds(cudaStream_t stream, int reps, const Work& work) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  if (!Check(cudaEventCreate(&start), "cudaEventCreate") ||
      !Check(cudaEventCreate(&stop), "cudaEventCreate")) {
    return -1;
  }
  std::vector<double> seconds;
  bool ok = true;
  for (int rep = 0; rep <= reps && ok; ++rep) {
    ok = Check(cudaEventRecord(start, stream), "cudaEventRecord") && work() &&
         Check(cudaEventRecord(stop, stream), "cudaEventRecord") &&
         Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    ok = ok && Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (ok && rep > 0) seconds.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!ok || seconds.empty()) return -1;
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

int Run(size_t bytes, int reps) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda_kernels_bench: no CUDA device or driver: skipped\n");
    return kSkipped;
  }
  cudaDeviceProp properties{};
  if (!Check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties")) return 1;
  cudaStream_t stream = nullptr;
  if (!Check(cudaSetDevice(0), "cudaSetDevice") ||
      !Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
    return 1;
  }
  absl::StatusOr<std::unique_ptr<CudaKernels>> kernels = NewCudaKernels(0, stream);
  if (!kernels.ok()) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", kernels.status().ToString().c_str());
    return 1;
  }
  constexpr int kMaxK = 8;
  std::vector<std::unique_ptr<Buffer>> sources;
  for (int i = 0; i < kMaxK; ++i) {
    sources.push_back(std::make_unique<Buffer>(bytes));
    if (!sources.back()->ok() ||
        !Check(cudaMemsetAsync(sources.back()->data(), 0x11 * (i + 1), bytes, stream),
               "cudaMemset")) {
      return 1;
    }
  }
  Buffer dst(bytes);
  if (!dst.ok()) return 1;

  std::printf("GPU 0: %s; %zu MiB per buffer, median of %d\n", properties.name, bytes >> 20, reps);
  const double copy_s = MedianSeconds(stream, reps, [&] {
    return Check(
        cudaMemcpyAsync(dst.data(), sources[0]->data(), bytes, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync");
  });
  if (copy_s <= 0) return 1;
  const double copy_gbps = 2.0 * static_cast<double>(bytes) / copy_s / 1e9;
  std::printf("cudaMemcpy device-to-device: %.1f GB/s (read + write)\n", copy_gbps);
  std::printf("%-10s %3s %12s %14s %10s\n", "type", "k", "time (us)", "GB/s moved", "vs copy");

  bool met = true;
  for (const DataType type : {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16,
                              DataType::kFp8E4M3, DataType::kInt32}) {
    const size_t count = bytes / DataTypeSize(type);
    for (const int k : {2, 8}) {
      std::vector<const void*> from;
      for (int i = 0; i < k; ++i) from.push_back(sources[i]->data());
      const double reduce_s = MedianSeconds(stream, reps, [&] {
        (*kernels)->ReduceMany(type, ReduceOp::kSum, dst.data(), from, count);
        return (*kernels)->last_error().ok();
      });
      if (reduce_s <= 0) {
        std::fprintf(stderr, "cuda_kernels_bench: %s\n",
                     (*kernels)->last_error().ToString().c_str());
        return 1;
      }
      const double gbps = static_cast<double>(k + 1) * static_cast<double>(bytes) / reduce_s / 1e9;
      const double ratio = gbps / copy_gbps;
      met = met && ratio >= 0.85;
      std::printf("%-10s %3d %12.1f %14.1f %9.2fx\n", std::string(DataTypeName(type)).c_str(), k,
                  reduce_s * 1e6, gbps, ratio);
    }
  }
  std::printf("target (every row at least 0.85x the copy's bandwidth): %s\n",
              met ? "met" : "NOT met");
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace baton::device::cuda

int main(int argc, char** argv) {
  size_t mib = 512;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--mib=", 0) == 0) {
      mib = std::strtoull(arg.c_str() + 6, nullptr, 10);
    } else if (arg.rfind("--reps=", 0) == 0) {
      reps = std::atoi(arg.c_str() + 7);
    } else {
      std::fprintf(stderr, "usage: %s [--mib=512] [--reps=10]\n", argv[0]);
      return 2;
    }
  }
  if (mib == 0 || reps <= 0) {
    std::fprintf(stderr, "cuda_kernels_bench: --mib and --reps must be positive\n");
    return 2;
  }
  return baton::device::cuda::Run(mib << 20, reps);
}
