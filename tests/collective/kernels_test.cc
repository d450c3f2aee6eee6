#include "device/kernels.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/direct_all_to_all.h"
#include "collective/doubling_all_reduce.h"
#include "collective/halving_doubling_all_reduce.h"
#include "collective/op_context.h"
#include "collective/ring_all_reduce.h"
#include "collective/ring_reduce.h"
#include "collective/ring_reduce_scatter.h"
#include "collective/segments.h"
#include "collective/tree_all_reduce.h"
#include "tests/collective/collective_test_support.h"

// The algorithms do their element-wise work through ctx.kernels, so that buffers in another kind
// of memory need one more Kernels, not a copy of each algorithm. Each test injects a Kernels that
// forwards to HostKernels() and counts the calls. Run as it is, the results must be right and the
// calls must have happened, once per chunk rather than per element. Run with its sums turned into
// maxima, the results must be the maxima: an element reduced past ctx.kernels would be a sum.

namespace baton::collective {
namespace {

using test::Group;

class CountingKernels final : public device::Kernels {
 public:
  // With `sum_as_max`, every kSum reduction is done as kMax.
  explicit CountingKernels(bool sum_as_max = false) : sum_as_max_(sum_as_max) {}

  transport::MemoryKind memory() const override { return device::HostKernels().memory(); }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    reduce_into.fetch_add(1, std::memory_order_relaxed);
    device::HostKernels().ReduceInto(type, Op(op), dst, src, count);
  }
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    reduce_many.fetch_add(1, std::memory_order_relaxed);
    device::HostKernels().ReduceMany(type, Op(op), dst, srcs, count);
  }
  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    divide.fetch_add(1, std::memory_order_relaxed);
    device::HostKernels().Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    copy.fetch_add(1, std::memory_order_relaxed);
    device::HostKernels().Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override {
    zero.fetch_add(1, std::memory_order_relaxed);
    device::HostKernels().Zero(dst, bytes);
  }

  int64_t reductions() const { return reduce_into.load() + reduce_many.load(); }

  // Mutable: the calls are const, and run in the transport's threads too.
  mutable std::atomic<int64_t> reduce_into{0};
  mutable std::atomic<int64_t> reduce_many{0};
  mutable std::atomic<int64_t> divide{0};
  mutable std::atomic<int64_t> copy{0};
  mutable std::atomic<int64_t> zero{0};

 private:
  ReduceOp Op(ReduceOp op) const {
    return sum_as_max_ && op == ReduceOp::kSum ? ReduceOp::kMax : op;
  }

  const bool sum_as_max_;
};

constexpr DataType kType = DataType::kInt32;
constexpr size_t kCount = size_t{1} << 14;
constexpr size_t kChunkBytes = 1024;  // 256 elements: 64 chunks of the whole buffer
constexpr size_t kChunks = kCount * sizeof(int32_t) / kChunkBytes;

// Runs `body` on `size` participants, each with its own CountingKernels in ctx.kernels.
std::vector<std::unique_ptr<CountingKernels>> RunWithKernels(
    int size, bool sum_as_max, const std::function<absl::Status(int, const OpContext&)>& body) {
  std::vector<std::unique_ptr<CountingKernels>> kernels;
  for (int r = 0; r < size; ++r) kernels.push_back(std::make_unique<CountingKernels>(sum_as_max));
  Group group(size);
  OpContext ctx = test::TestContext(1, absl::Seconds(60));
  ctx.chunk_bytes = kChunkBytes;
  const std::vector<absl::Status> statuses = group.Run(ctx, [&](int r, const OpContext& base) {
    OpContext own = base;
    own.kernels = kernels[r].get();
    return body(r, own);
  });
  for (int r = 0; r < size; ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  return kernels;
}

// An all-reduce that leaves every participant's `data` reduced in place.
using InPlaceAllReduce =
    std::function<absl::Status(const OpContext&, int rank, int size, void* data, size_t count)>;

struct AllReduceCase {
  std::string name;
  int size;
  InPlaceAllReduce run;
  // Participants that reduce at all (a leaf in both trees, or one that hands its buffer over to
  // its pair, folds nothing in).
  std::function<bool(int rank)> reduces = [](int) { return true; };

  friend void PrintTo(const AllReduceCase& c, std::ostream* os) { *os << c.name; }
};

std::vector<AllReduceCase> AllReduceCases() {
  return {
      {"ring", 4,
       [](const OpContext& ctx, int r, int n, void* data, size_t count) {
         return RingAllReduce(ctx, test::RingOf(r, n), data, count, kType, ReduceOp::kSum);
       }},
      {"tree", 5,
       [](const OpContext& ctx, int r, int n, void* data, size_t count) {
         return TreeAllReduce(ctx, test::ParticipantsOf(r, n), data, count, kType, ReduceOp::kSum);
       },
       [](int r) { return r != 1; }},
      {"doubling", 5,
       [](const OpContext& ctx, int r, int n, void* data, size_t count) {
         return DoublingAllReduce(ctx, test::ParticipantsOf(r, n), data, count, kType,
                                  ReduceOp::kSum);
       },
       [](int r) { return r != 0; }},
      {"halving_doubling", 5,
       [](const OpContext& ctx, int r, int n, void* data, size_t count) {
         return HalvingDoublingAllReduce(ctx, test::ParticipantsOf(r, n), data, count, kType,
                                         ReduceOp::kSum);
       },
       [](int r) { return r != 0; }},
  };
}

class KernelsAllReduceTest : public ::testing::TestWithParam<AllReduceCase> {};

TEST_P(KernelsAllReduceTest, ReducesThroughTheInjectedKernelsPerChunk) {
  const AllReduceCase& c = GetParam();
  const auto inputs = test::ReduceInputs(kType, ReduceOp::kSum, c.size, kCount);
  const auto expected = test::SerialReference(inputs, kCount, kType, ReduceOp::kSum);
  auto buffers = inputs;
  const auto kernels = RunWithKernels(c.size, false, [&](int r, const OpContext& ctx) {
    return c.run(ctx, r, c.size, buffers[r].data(), kCount);
  });
  for (int r = 0; r < c.size; ++r) {
    EXPECT_EQ(test::FirstDifference(buffers[r], expected, sizeof(int32_t)), -1) << "rank " << r;
    const int64_t calls = kernels[r]->reductions();
    if (c.reduces(r)) {
      EXPECT_GT(calls, 0) << "rank " << r << " reduced without ctx.kernels";
    } else {
      EXPECT_EQ(calls, 0) << "rank " << r;
    }
    // A call per chunk, never per element: at most a few passes over the buffer's chunks.
    EXPECT_LE(calls, static_cast<int64_t>(4 * kChunks)) << "rank " << r;
  }
}

TEST_P(KernelsAllReduceTest, EveryElementIsReducedByTheInjectedKernels) {
  const AllReduceCase& c = GetParam();
  const auto inputs = test::ReduceInputs(kType, ReduceOp::kSum, c.size, kCount);
  const auto sums = test::SerialReference(inputs, kCount, kType, ReduceOp::kSum);
  const auto maxima = test::SerialReference(inputs, kCount, kType, ReduceOp::kMax);
  ASSERT_NE(sums, maxima);
  auto buffers = inputs;
  RunWithKernels(c.size, true, [&](int r, const OpContext& ctx) {
    return c.run(ctx, r, c.size, buffers[r].data(), kCount);
  });
  for (int r = 0; r < c.size; ++r) {
    EXPECT_EQ(test::FirstDifference(buffers[r], maxima, sizeof(int32_t)), -1)
        << "rank " << r << " has an element not reduced by ctx.kernels";
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, KernelsAllReduceTest, ::testing::ValuesIn(AllReduceCases()),
                         [](const auto& info) { return info.param.name; });

// The ring's reads of several inputs (a daemon's local ranks) and of one participant alone.
TEST(KernelsTest, RingAllReduceOfSeveralInputs) {
  for (int size : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    // Two inputs per participant: the result is the maximum over all 2 * size of them.
    const auto inputs = test::ReduceInputs(kType, ReduceOp::kSum, 2 * size, kCount);
    const auto maxima = test::SerialReference(inputs, kCount, kType, ReduceOp::kMax);
    std::vector<std::vector<std::byte>> results(size, std::vector<std::byte>(inputs[0].size()));
    const auto kernels = RunWithKernels(size, true, [&](int r, const OpContext& ctx) {
      const std::array<const void*, 2> mine = {inputs[2 * r].data(), inputs[2 * r + 1].data()};
      return RingAllReduce(ctx, test::RingOf(r, size), mine, results[r].data(), kCount, kType,
                           ReduceOp::kSum);
    });
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(test::FirstDifference(results[r], maxima, sizeof(int32_t)), -1) << "rank " << r;
      EXPECT_GT(kernels[r]->reduce_many.load(), 0) << "rank " << r;
    }
  }
}

TEST(KernelsTest, RingReduceScatter) {
  constexpr int kSize = 3;
  const auto inputs = test::ReduceInputs(kType, ReduceOp::kSum, kSize, kCount);
  const auto maxima = test::SerialReference(inputs, kCount, kType, ReduceOp::kMax);
  auto buffers = inputs;
  const auto kernels = RunWithKernels(kSize, true, [&](int r, const OpContext& ctx) {
    return RingReduceScatter(ctx, test::RingOf(r, kSize), buffers[r].data(), kCount, kType,
                             ReduceOp::kSum);
  });
  for (int r = 0; r < kSize; ++r) {
    const ElementRange own = SegmentOf(kCount, kSize, r);
    const size_t begin = own.begin * sizeof(int32_t);
    const size_t end = begin + own.length * sizeof(int32_t);
    EXPECT_EQ(std::vector<std::byte>(buffers[r].begin() + begin, buffers[r].begin() + end),
              std::vector<std::byte>(maxima.begin() + begin, maxima.begin() + end))
        << "rank " << r << "'s segment";
    EXPECT_GT(kernels[r]->reductions(), 0) << "rank " << r;
  }
}

TEST(KernelsTest, RingReduce) {
  constexpr int kSize = 3;
  constexpr int kRoot = 1;
  const auto inputs = test::ReduceInputs(kType, ReduceOp::kSum, kSize, kCount);
  const auto maxima = test::SerialReference(inputs, kCount, kType, ReduceOp::kMax);
  auto buffers = inputs;
  const auto kernels = RunWithKernels(kSize, true, [&](int r, const OpContext& ctx) {
    return RingReduce(ctx, test::RingOf(r, kSize), kRoot, buffers[r].data(), kCount, kType,
                      ReduceOp::kSum);
  });
  EXPECT_EQ(test::FirstDifference(buffers[kRoot], maxima, sizeof(int32_t)), -1);
  for (int r = 0; r < kSize; ++r) {
    // The chain starts at root + 1, which only sends.
    EXPECT_EQ(kernels[r]->reductions() > 0, r != (kRoot + 1) % kSize) << "rank " << r;
  }
}

TEST(KernelsTest, DirectAllToAllCopiesItsOwnBlockThroughTheKernels) {
  constexpr int kSize = 3;
  constexpr size_t kBlock = 1000;  // elements per block
  std::vector<std::vector<std::byte>> sends;
  for (int r = 0; r < kSize; ++r) {
    sends.push_back(test::RandomBytes(kSize * kBlock * sizeof(int32_t), r, 99));
  }
  std::vector<std::vector<std::byte>> recvs(kSize, std::vector<std::byte>(sends[0].size()));
  const auto kernels = RunWithKernels(kSize, false, [&](int r, const OpContext& ctx) {
    return DirectAllToAll(ctx, test::ParticipantsOf(r, kSize), sends[r].data(), recvs[r].data(),
                          kBlock, kType);
  });
  const size_t block_bytes = kBlock * sizeof(int32_t);
  for (int r = 0; r < kSize; ++r) {
    for (int from = 0; from < kSize; ++from) {
      const auto sent = sends[from].begin() + static_cast<std::ptrdiff_t>(r * block_bytes);
      const auto got = recvs[r].begin() + static_cast<std::ptrdiff_t>(from * block_bytes);
      EXPECT_EQ(std::vector<std::byte>(got, got + static_cast<std::ptrdiff_t>(block_bytes)),
                std::vector<std::byte>(sent, sent + static_cast<std::ptrdiff_t>(block_bytes)))
          << "rank " << r << "'s block from " << from;
    }
    EXPECT_EQ(kernels[r]->copy.load(), 1) << "rank " << r;
    EXPECT_EQ(kernels[r]->reductions(), 0) << "rank " << r;
  }
}

// The default is the host's kernels.
TEST(KernelsTest, TheContextDefaultsToHostKernels) {
  EXPECT_EQ(OpContext{}.kernels, &device::HostKernels());
  EXPECT_EQ(device::HostKernels().memory(), transport::MemoryKind::kHost);
}

}  // namespace
}  // namespace baton::collective
