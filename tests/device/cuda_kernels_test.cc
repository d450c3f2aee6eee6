#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/cuda/kernels.h"
#include "device/data_type.h"
#include "device/half.h"
#include "device/kernels.h"
#include "tests/collective/collective_test_support.h"

// The device kernels against the host kernels (HostKernels(), reduce.h), element by element:
// every type x op x size (0, sizes that are not multiples of a vector or a block, sizes that make
// every thread loop) x number of sources, aligned and misaligned, dst apart from or one of the
// sources; on exact inputs (tests/collective/collective_test_support.h) and on random bits (the
// same IEEE operations in the same order round the same way, NaN aside); Divide; Copy with
// overlapping ranges; Zero; the sticky error.
//
// Without a CUDA device or driver every test skips, naming why; with BATON_REQUIRE_GPU=1 in the
// environment (the GPU machine's check) a missing device fails instead.
//
// Algorithms over device buffers (RingAllReduce with these kernels) need a transport that moves
// device memory; none does yet, so only the kernels are tested here.

namespace baton::device::cuda {
namespace {

// The collective tests' exact inputs and sweep.
namespace test = ::baton::collective::test;

bool GpuRequired() {
  const char* value = std::getenv("BATON_REQUIRE_GPU");
  return value != nullptr && std::string(value) != "" && std::string(value) != "0";
}

// The kernels on device 0, or why there are none.
absl::StatusOr<std::unique_ptr<CudaKernels>>& Device() {
  static auto* kernels = new absl::StatusOr<std::unique_ptr<CudaKernels>>(NewCudaKernels(0));
  return *kernels;
}

#define BATON_SKIP_WITHOUT_GPU()                                                      \
  do {                                                                                \
    if (!Device().ok()) {                                                             \
      if (GpuRequired()) FAIL() << "BATON_REQUIRE_GPU is set: " << Device().status(); \
      GTEST_SKIP() << "no CUDA device or driver: " << Device().status();              \
    }                                                                                 \
  } while (0)

CudaKernels& Gpu() { return **Device(); }

// Device memory of `bytes` (plus `offset` bytes in front, to misalign), freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset = 0) : bytes_(bytes), offset_(offset) {
    const cudaError_t error = cudaMalloc(&base_, bytes + offset + 1);
    EXPECT_EQ(error, cudaSuccess) << cudaGetErrorString(error);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(base_); }

  std::byte* data() const { return static_cast<std::byte*>(base_) + offset_; }

  void Upload(const std::vector<std::byte>& bytes) const {
    ASSERT_LE(bytes.size(), bytes_);
    ASSERT_EQ(cudaMemcpy(data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    // A pageable upload may still be in flight when cudaMemcpy returns; the kernels' stream
    // does not wait for the legacy stream.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<std::byte> Download(size_t bytes) const {
    std::vector<std::byte> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  size_t offset_;
};

// The value of element `i` as a double, for NaN and zero checks and for messages.
double ValueAt(DataType type, const std::vector<std::byte>& bytes, size_t i) {
  const std::byte* p = bytes.data() + i * DataTypeSize(type);
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (type) {
    case DataType::kInt8:
      return get(int8_t{});
    case DataType::kUint8:
      return get(uint8_t{});
    case DataType::kInt32:
      return get(int32_t{});
    case DataType::kUint32:
      return get(uint32_t{});
    case DataType::kInt64:
      return static_cast<double>(get(int64_t{}));
    case DataType::kUint64:
      return static_cast<double>(get(uint64_t{}));
    case DataType::kFloat16:
      return HalfToFloat(get(uint16_t{}));
    case DataType::kBfloat16:
      return Bfloat16ToFloat(get(uint16_t{}));
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
    case DataType::kFp8E4M3:
      return Fp8E4M3ToFloat(get(uint8_t{}));
    case DataType::kFp8E5M2:
      return Fp8E5M2ToFloat(get(uint8_t{}));
  }
  return 0;
}

// Checks every element: the bits must be equal, except that two NaNs match (float32 and float64
// NaN payloads are the hardware's) and, for min and max, +0 and -0 match (reduce.h allows
// either). Reports the first few differences.
void ExpectSameElements(DataType type, ReduceOp op, const std::vector<std::byte>& want,
                        const std::vector<std::byte>& got, size_t count) {
  ASSERT_EQ(want.size(), got.size());
  const size_t element = DataTypeSize(type);
  const bool either_zero = op == ReduceOp::kMin || op == ReduceOp::kMax;
  int reported = 0;
  size_t differing = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(want.data() + i * element, got.data() + i * element, element) == 0) continue;
    const double w = ValueAt(type, want, i);
    const double g = ValueAt(type, got, i);
    if (test::IsFloat(type) && std::isnan(w) && std::isnan(g)) continue;
    if (test::IsFloat(type) && either_zero && w == 0 && g == 0) continue;
    ++differing;
    if (reported++ < 5) {
      ADD_FAILURE() << DataTypeName(type) << " element " << i << " of " << count << ": host " << w
                    << ", device " << g;
    }
  }
  EXPECT_EQ(differing, 0u) << "elements that differ from the host kernels";
}

// The host kernels' and the device kernels' ReduceMany on the same inputs. `offset_elements`
// misaligns every buffer; `dst_source` < 0 reduces into a separate buffer, else into that source.
void CompareReduceMany(DataType type, ReduceOp op,
                       const std::vector<std::vector<std::byte>>& inputs, size_t count,
                       size_t offset_elements, int dst_source) {
  SCOPED_TRACE(absl::StrCat(DataTypeName(type), " ", ReduceOpName(op), " count ", count,
                            " sources ", inputs.size(), " offset ", offset_elements, " dst_source ",
                            dst_source));
  const size_t bytes = count * DataTypeSize(type);
  const size_t offset = offset_elements * DataTypeSize(type);

  std::vector<std::vector<std::byte>> host = inputs;
  std::vector<std::byte> host_out(bytes, std::byte{0x5A});
  std::vector<const void*> host_srcs;
  host_srcs.reserve(host.size());
  for (const auto& input : host) host_srcs.push_back(input.data());
  void* host_dst = dst_source < 0 ? host_out.data() : host[dst_source].data();
  HostKernels().ReduceMany(type, op, host_dst, host_srcs, count);
  const std::vector<std::byte>& want = dst_source < 0 ? host_out : host[dst_source];

  std::vector<std::unique_ptr<DeviceBuffer>> device;
  std::vector<const void*> device_srcs;
  for (const auto& input : inputs) {
    device.push_back(std::make_unique<DeviceBuffer>(bytes, offset));
    device.back()->Upload(input);
    device_srcs.push_back(device.back()->data());
  }
  DeviceBuffer device_out(bytes, offset);
  device_out.Upload(std::vector<std::byte>(bytes, std::byte{0x5A}));
  const DeviceBuffer& result = dst_source < 0 ? device_out : *device[dst_source];
  Gpu().ReduceMany(type, op, result.data(), device_srcs, count);
  ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
  ExpectSameElements(type, op, want, result.Download(bytes), count);
}

// Sizes: 0; under one 16-byte vector; odd; not a multiple of a vector or of 512 threads; and
// more than 2 CTAs x 132 SMs x 512 threads x one vector, so that every thread loops.
constexpr size_t kCounts[] = {0, 1, 3, 17, 1000, 4096 + 5, (1u << 20) + 3};

struct TypeOp {
  DataType type;
  ReduceOp op;
};

std::vector<TypeOp> AllTypeOps() {
  std::vector<TypeOp> cases;
  for (DataType type : test::kAllTypes) {
    for (ReduceOp op : test::kAllOps) cases.push_back({type, op});
  }
  return cases;
}

class CudaKernelsTest : public testing::TestWithParam<TypeOp> {
 protected:
  void SetUp() override { BATON_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaKernelsTest, ReduceManyMatchesHostOnExactInputs) {
  const auto [type, op] = GetParam();
  for (size_t count : kCounts) {
    for (int sources : {1, 2, 3, 8}) {
      const auto inputs = test::ReduceInputs(type, op, sources, count);
      CompareReduceMany(type, op, inputs, count, 0, -1);
      if (count > 4096) continue;                         // the variants below on small sizes only
      CompareReduceMany(type, op, inputs, count, 1, -1);  // the scalar path
      CompareReduceMany(type, op, inputs, count, 0, 0);   // in place, into source 0
      CompareReduceMany(type, op, inputs, count, 0, sources - 1);  // into the last source
    }
  }
}

TEST_P(CudaKernelsTest, ReduceManyMatchesHostOnRandomBits) {
  const auto [type, op] = GetParam();
  for (size_t count : {size_t{4096 + 5}, size_t{(1u << 18) + 1}}) {
    std::vector<std::vector<std::byte>> inputs;
    inputs.reserve(5);
    for (int r = 0; r < 5; ++r) {
      inputs.push_back(test::RandomBytes(count * DataTypeSize(type), r,
                                         static_cast<uint64_t>(type) << 8 | static_cast<int>(op)));
    }
    CompareReduceMany(type, op, inputs, count, 0, -1);
    CompareReduceMany(type, op, {inputs[0], inputs[1]}, count, 0, -1);
  }
}

TEST_P(CudaKernelsTest, ReduceIntoMatchesHost) {
  const auto [type, op] = GetParam();
  for (size_t count : kCounts) {
    SCOPED_TRACE(absl::StrCat(DataTypeName(type), " ", ReduceOpName(op), " count ", count));
    const size_t bytes = count * DataTypeSize(type);
    const auto inputs = test::ReduceInputs(type, op, 2, count);
    std::vector<std::byte> want = inputs[0];
    HostKernels().ReduceInto(type, op, want.data(), inputs[1].data(), count);
    DeviceBuffer dst(bytes), src(bytes);
    dst.Upload(inputs[0]);
    src.Upload(inputs[1]);
    Gpu().ReduceInto(type, op, dst.data(), src.data(), count);
    ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
    ExpectSameElements(type, op, want, dst.Download(bytes), count);

    // dst == src: op(x, x).
    std::vector<std::byte> self = inputs[1];
    HostKernels().ReduceInto(type, op, self.data(), self.data(), count);
    Gpu().ReduceInto(type, op, src.data(), src.data(), count);
    ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
    ExpectSameElements(type, op, self, src.Download(bytes), count);
  }
}

std::string TypeOpName(const testing::TestParamInfo<TypeOp>& info) {
  return absl::StrCat(DataTypeName(info.param.type), "_", ReduceOpName(info.param.op));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, CudaKernelsTest, testing::ValuesIn(AllTypeOps()),
                         TypeOpName);

class CudaKernelsTypeTest : public testing::TestWithParam<DataType> {
 protected:
  void SetUp() override { BATON_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaKernelsTypeTest, DivideMatchesHost) {
  const DataType type = GetParam();
  for (size_t count : kCounts) {
    for (int divisor : {1, 3, 7, 200}) {
      SCOPED_TRACE(absl::StrCat(DataTypeName(type), " count ", count, " divisor ", divisor));
      const size_t bytes = count * DataTypeSize(type);
      // Sums as avg leaves them (exact inputs summed over `divisor` ranks), and random bits.
      for (bool random : {false, true}) {
        std::vector<std::byte> data =
            random ? test::RandomBytes(bytes, divisor, static_cast<uint64_t>(type))
                   : test::ReduceInput(type, ReduceOp::kAvg, 1, divisor, count);
        DeviceBuffer device(bytes);
        device.Upload(data);
        HostKernels().Divide(type, data.data(), count, divisor);
        Gpu().Divide(type, device.data(), count, divisor);
        ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
        ExpectSameElements(type, ReduceOp::kAvg, data, device.Download(bytes), count);
      }
    }
  }
}

// avg as the algorithms do it: reduce as sum, then divide by the number of ranks.
TEST_P(CudaKernelsTypeTest, AvgIsSumThenDivide) {
  const DataType type = GetParam();
  constexpr int kRanks = 3;
  const size_t count = 4096 + 5;
  const size_t bytes = count * DataTypeSize(type);
  const auto inputs = test::ReduceInputs(type, ReduceOp::kAvg, kRanks, count);
  std::vector<std::byte> want(bytes);
  std::vector<const void*> host_srcs;
  host_srcs.reserve(inputs.size());
  for (const auto& input : inputs) host_srcs.push_back(input.data());
  HostKernels().ReduceMany(type, ReduceOp::kAvg, want.data(), host_srcs, count);
  HostKernels().Divide(type, want.data(), count, kRanks);

  std::vector<std::unique_ptr<DeviceBuffer>> device;
  std::vector<const void*> device_srcs;
  for (const auto& input : inputs) {
    device.push_back(std::make_unique<DeviceBuffer>(bytes));
    device.back()->Upload(input);
    device_srcs.push_back(device.back()->data());
  }
  DeviceBuffer out(bytes);
  Gpu().ReduceMany(type, ReduceOp::kAvg, out.data(), device_srcs, count);
  Gpu().Divide(type, out.data(), count, kRanks);
  ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
  ExpectSameElements(type, ReduceOp::kAvg, want, out.Download(bytes), count);
}

std::string TypeName(const testing::TestParamInfo<DataType>& info) {
  return absl::StrCat(DataTypeName(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaKernelsTypeTest, testing::ValuesIn(test::kAllTypes),
                         TypeName);

class CudaKernelsMemoryTest : public testing::Test {
 protected:
  void SetUp() override { BATON_SKIP_WITHOUT_GPU(); }
};

TEST_F(CudaKernelsMemoryTest, NamesDeviceMemory) {
  EXPECT_EQ(Gpu().memory(), MemoryKind::kDevice);
  EXPECT_EQ(Gpu().device(), 0);
  EXPECT_NE(Gpu().stream(), nullptr);
}

TEST_F(CudaKernelsMemoryTest, CopyDisjoint) {
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{(1u << 20) + 3}}) {
    SCOPED_TRACE(absl::StrCat("bytes ", bytes));
    const auto data = test::RandomBytes(bytes, 1, bytes);
    DeviceBuffer src(bytes, 1), dst(bytes, 3);
    src.Upload(data);
    dst.Upload(std::vector<std::byte>(bytes, std::byte{0x5A}));
    Gpu().Copy(dst.data(), src.data(), bytes);
    ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
    EXPECT_EQ(dst.Download(bytes), data);
  }
}

// Overlapping ranges in both directions, at distances that take one piece, a few pieces, and
// the temporary buffer; against memmove on a host copy of the whole buffer.
TEST_F(CudaKernelsMemoryTest, CopyOverlappingIsMemmove) {
  for (size_t bytes : {size_t{64}, size_t{4096 + 7}, size_t{(1u << 20) + 3}}) {
    for (size_t distance : {size_t{1}, size_t{7}, bytes / 16, bytes / 3, bytes - 1}) {
      for (bool up : {false, true}) {
        SCOPED_TRACE(absl::StrCat("bytes ", bytes, " distance ", distance, up ? " up" : " down"));
        const size_t total = bytes + distance;
        auto host = test::RandomBytes(total, 2, total);
        DeviceBuffer device(total);
        device.Upload(host);
        const size_t src = up ? 0 : distance;
        const size_t dst = up ? distance : 0;
        std::memmove(host.data() + dst, host.data() + src, bytes);
        Gpu().Copy(device.data() + dst, device.data() + src, bytes);
        ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
        const auto got = device.Download(total);
        EXPECT_EQ(test::FirstDifference(host, got, 1), -1);
      }
    }
  }
}

TEST_F(CudaKernelsMemoryTest, ZeroSetsOnlyItsRange) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096 + 7}, size_t{(1u << 20) + 3}}) {
    SCOPED_TRACE(absl::StrCat("bytes ", bytes));
    const size_t total = bytes + 32;
    auto host = test::RandomBytes(total, 3, total);
    DeviceBuffer device(total);
    device.Upload(host);
    std::memset(host.data() + 16, 0, bytes);
    Gpu().Zero(device.data() + 16, bytes);
    ASSERT_TRUE(Gpu().last_error().ok()) << Gpu().last_error();
    EXPECT_EQ(device.Download(total), host);
  }
}

// Its own kernels, so that the shared ones stay error-free: an error is kept, logged, and makes
// later calls do nothing.
TEST_F(CudaKernelsMemoryTest, ErrorsAreStickyAndStopLaterWork) {
  auto kernels = NewCudaKernels(0);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  CudaKernels& gpu = **kernels;
  DeviceBuffer buffer(64);
  buffer.Upload(std::vector<std::byte>(64, std::byte{1}));
  std::vector<const void*> too_many(CudaKernels::kMaxSources + 1, buffer.data());
  gpu.ReduceMany(DataType::kUint8, ReduceOp::kSum, buffer.data(), too_many, 64);
  EXPECT_EQ(gpu.last_error().code(), absl::StatusCode::kInvalidArgument) << gpu.last_error();
  gpu.Zero(buffer.data(), 64);  // skipped
  EXPECT_EQ(buffer.Download(64), std::vector<std::byte>(64, std::byte{1}));
  EXPECT_EQ(gpu.last_error().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaKernelsFactoryTest, FailsClearlyWithoutADevice) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess && count > 0) {
    auto beyond = NewCudaKernels(count);
    EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument) << beyond.status();
    auto negative = NewCudaKernels(-1);
    EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  auto kernels = NewCudaKernels(0);
  ASSERT_FALSE(kernels.ok());
  EXPECT_EQ(kernels.status().code(), absl::StatusCode::kFailedPrecondition) << kernels.status();
  EXPECT_NE(kernels.status().message().find("cudaGetDeviceCount"), absl::string_view::npos)
      << kernels.status();
}

}  // namespace
}  // namespace baton::device::cuda
