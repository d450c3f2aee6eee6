#include "collective/ring_all_reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "collective/half.h"
#include "collective/reduce.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

// Every rank runs as a thread with its own in-memory endpoint; the results are compared bit for
// bit with a serial reference (ReduceInto over the ranks' inputs in rank order, itself checked in
// reduce_test). Inputs are chosen so that every partial result is exact in the element type:
// integers wrap, which is exact; float sums use small integers whose sums stay within the type's
// exactly representable integers; products use +/-1 and +/-2 (and 0); min and max are exact
// anyway. So the ring's reduction order (which differs per segment) cannot change the result, and
// exact comparison is valid for the narrow float types too.

namespace baton::collective {
namespace {

using ::testing::HasSubstr;
using transport::Endpoint;
using transport::InMemoryFabric;

std::string Address(int rank) { return "rank" + std::to_string(rank); }

// N endpoints on one fabric, alive until the group is destroyed (after every rank has returned:
// a closed endpoint would look like a lost peer to the others).
class Group {
 public:
  explicit Group(int size) : fabric_(transport::NewInMemoryFabric()) {
    for (int r = 0; r < size; ++r) {
      auto endpoint = fabric_->CreateEndpoint(Address(r));
      EXPECT_TRUE(endpoint.ok()) << endpoint.status();
      endpoints_.push_back(std::move(endpoint).value());
    }
  }
  ~Group() { endpoints_.clear(); }

  int size() const { return static_cast<int>(endpoints_.size()); }
  InMemoryFabric& fabric() { return *fabric_; }
  Endpoint* endpoint(int rank) { return endpoints_[rank].get(); }

  static Ring RingOf(int rank, int size) {
    return {rank, size, Address((rank + size - 1) % size), Address((rank + 1) % size)};
  }

  // Runs RingAllReduce on every rank at once (rank r on buffers[r]), through `endpoints` when
  // given (one per rank), and returns each rank's status.
  std::vector<absl::Status> AllReduce(std::vector<std::vector<std::byte>>& buffers, size_t count,
                                      DataType type, ReduceOp op, OpContext ctx,
                                      const std::vector<Endpoint*>& endpoints = {}) {
    std::vector<absl::Status> statuses(size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r, ctx]() mutable {
        ctx.endpoint = endpoints.empty() ? endpoint(r) : endpoints[r];
        statuses[r] = RingAllReduce(ctx, RingOf(r, size()), buffers[r].data(), count, type, op);
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

  // The same out of place: rank r reads inputs[r] and writes outputs[r].
  std::vector<absl::Status> AllReduceOutOfPlace(const std::vector<std::vector<std::byte>>& inputs,
                                                std::vector<std::vector<std::byte>>& outputs,
                                                size_t count, DataType type, ReduceOp op,
                                                OpContext ctx) {
    std::vector<absl::Status> statuses(size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r, ctx]() mutable {
        ctx.endpoint = endpoint(r);
        statuses[r] = RingAllReduce(ctx, RingOf(r, size()), inputs[r].data(), outputs[r].data(),
                                    count, type, op);
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

 private:
  std::unique_ptr<InMemoryFabric> fabric_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool IsFloat(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBfloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64 || type == DataType::kFp8E4M3 || type == DataType::kFp8E5M2;
}

// The largest integer up to which every integer is representable in a float type.
double ExactIntegerLimit(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return 2048;
    case DataType::kBfloat16:
      return 256;
    case DataType::kFp8E4M3:
      return 16;
    case DataType::kFp8E5M2:
      return 8;
    case DataType::kFloat32:
      return 1 << 24;
    default:
      return 1LL << 53;
  }
}

void StoreFloat(DataType type, double value, std::byte* out) {
  auto put = [out](auto v) { std::memcpy(out, &v, sizeof(v)); };
  const auto f = static_cast<float>(value);
  switch (type) {
    case DataType::kFloat16:
      return put(FloatToHalf(f));
    case DataType::kBfloat16:
      return put(FloatToBfloat16(f));
    case DataType::kFp8E4M3:
      return put(FloatToFp8E4M3(f));
    case DataType::kFp8E5M2:
      return put(FloatToFp8E5M2(f));
    case DataType::kFloat32:
      return put(f);
    default:
      return put(value);
  }
}

// Rank `rank`'s input of `count` elements (see the top of the file for why these values).
std::vector<std::byte> Input(DataType type, ReduceOp op, int world_size, int rank, size_t count) {
  const size_t element = DataTypeSize(type);
  std::vector<std::byte> buffer(count * element);
  const uint64_t seed = Mix(static_cast<uint64_t>(rank) << 48 ^ static_cast<uint64_t>(type) << 40 ^
                            static_cast<uint64_t>(op) << 32);
  const auto bound = static_cast<int64_t>(ExactIntegerLimit(type)) / world_size;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = Mix(seed + i);
    std::byte* out = buffer.data() + i * element;
    if (!IsFloat(type)) {
      std::memcpy(out, &bits, element);
      continue;
    }
    double value;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        value = static_cast<double>(static_cast<int64_t>(bits % (2 * bound + 1)) - bound);
        break;
      case ReduceOp::kProd: {
        constexpr double kFactors[] = {1, -1, 2, -2, 1, -1, 2, -2, 1, -1, 2, -2, 1, -1, 2, 0};
        value = kFactors[bits % 16];
        break;
      }
      default:
        value = static_cast<double>(static_cast<int64_t>(bits % 20001) - 10000) / 8;
    }
    StoreFloat(type, value, out);
  }
  return buffer;
}

std::vector<std::byte> SerialReference(const std::vector<std::vector<std::byte>>& inputs,
                                       size_t count, DataType type, ReduceOp op) {
  std::vector<std::byte> result = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    ReduceInto(type, op, result.data(), inputs[r].data(), count);
  }
  return result;
}

// Index of the first element where a and b differ, or -1.
int64_t FirstDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                        size_t element) {
  if (a == b) return -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i / element);
  }
  return static_cast<int64_t>(a.size() / element);
}

// ---- The parameterised sweep ----

enum class CountKind { kZero, kOne, kFewerThanRanks, kOdd, kLarge };

struct RingCase {
  int size;
  CountKind kind;
  DataType type;
  ReduceOp op;

  size_t count() const {
    switch (kind) {
      case CountKind::kZero:
        return 0;
      case CountKind::kOne:
        return 1;
      case CountKind::kFewerThanRanks:
        return static_cast<size_t>(size - 1);
      case CountKind::kOdd:
        return 1001;
      case CountKind::kLarge:
        return (size_t{1} << 20) + 3;
    }
    return 0;
  }

  // Small chunks for most cases, so that steps are cut into many chunks (and chunk sizes that are
  // not a whole number of elements get rounded down); the default for some large cases.
  size_t chunk_bytes() const {
    const size_t element = DataTypeSize(type);
    switch (kind) {
      case CountKind::kZero:
        return OpContext{}.chunk_bytes;
      case CountKind::kOne:
        return 0;  // less than an element: one element per chunk
      case CountKind::kFewerThanRanks:
        return 1;
      case CountKind::kOdd:
        return 7 * element + element / 2;
      case CountKind::kLarge:
        return element >= 4 ? (size_t{64} << 10) + 5 : OpContext{}.chunk_bytes;
    }
    return 0;
  }

  std::string Name() const {
    static constexpr const char* kKinds[] = {"zero", "one", "fewer", "odd", "large"};
    return "n" + std::to_string(size) + "_" + kKinds[static_cast<int>(kind)] + "_" +
           std::string(DataTypeName(type)) + "_" + std::string(ReduceOpName(op));
  }
};

std::vector<RingCase> AllCases() {
  const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                                DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                                DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                DataType::kFloat64, DataType::kFp8E4M3,  DataType::kFp8E5M2};
  const DataType kLargeTypes[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16,
                                  DataType::kBfloat16};
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  std::vector<RingCase> cases;
  for (int size : {1, 2, 3, 4, 7, 8}) {
    for (CountKind kind :
         {CountKind::kZero, CountKind::kOne, CountKind::kFewerThanRanks, CountKind::kOdd}) {
      for (DataType type : kAllTypes) {
        for (ReduceOp op : kOps) cases.push_back({size, kind, type, op});
      }
    }
    for (DataType type : kLargeTypes) {
      for (ReduceOp op : kOps) cases.push_back({size, CountKind::kLarge, type, op});
    }
  }
  return cases;
}

class RingAllReduceSweep : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllReduceSweep, MatchesSerialReference) {
  const RingCase& c = GetParam();
  const size_t count = c.count();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.size; ++r) inputs.push_back(Input(c.type, c.op, c.size, r, count));
  const std::vector<std::byte> expected = SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  OpContext ctx;
  ctx.comm = 0xC0FFEE;
  ctx.seq = 1;
  ctx.deadline = absl::Now() + absl::Seconds(60);
  ctx.chunk_bytes = c.chunk_bytes();
  const std::vector<absl::Status> statuses = group.AllReduce(buffers, count, c.type, c.op, ctx);
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = FirstDifference(buffers[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
  }
}

// Out of place, the schedule and the chunking are the same for every type; what differs is the
// reduction kernel, which reduce_test covers for every type. So: every world size and count, with
// a wide, a narrow float and an integer type, and an arithmetic and a selecting op.
std::vector<RingCase> OutOfPlaceCases() {
  std::vector<RingCase> cases;
  for (const RingCase& c : AllCases()) {
    const bool type =
        c.type == DataType::kFloat32 || c.type == DataType::kFloat16 || c.type == DataType::kInt8;
    const bool op = c.op == ReduceOp::kSum || c.op == ReduceOp::kMax;
    if (type && op) cases.push_back(c);
  }
  return cases;
}

class RingAllReduceOutOfPlaceSweep : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllReduceOutOfPlaceSweep, MatchesSerialReferenceAndLeavesInputsAlone) {
  const RingCase& c = GetParam();
  const size_t count = c.count();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.size; ++r) inputs.push_back(Input(c.type, c.op, c.size, r, count));
  const std::vector<std::vector<std::byte>> original = inputs;
  const std::vector<std::byte> expected = SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  // Outputs start as garbage: every element must be written.
  std::vector<std::vector<std::byte>> outputs(
      c.size, std::vector<std::byte>(count * DataTypeSize(c.type), std::byte{0xA5}));
  OpContext ctx;
  ctx.comm = 0xC0FFEE;
  ctx.seq = 2;
  ctx.deadline = absl::Now() + absl::Seconds(60);
  ctx.chunk_bytes = c.chunk_bytes();
  const std::vector<absl::Status> statuses =
      group.AllReduceOutOfPlace(inputs, outputs, count, c.type, c.op, ctx);
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = FirstDifference(outputs[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
    EXPECT_EQ(inputs[r], original[r]) << "rank " << r << "'s input was written";
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, RingAllReduceSweep,
                         ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return info.param.Name(); });
INSTANTIATE_TEST_SUITE_P(WorldSizesCountsSomeTypesOps, RingAllReduceOutOfPlaceSweep,
                         ::testing::ValuesIn(OutOfPlaceCases()),
                         [](const auto& info) { return info.param.Name(); });

// Several inputs per participant (a daemon's local ranks): the result is the reduction of every
// input of every participant; the first input may be the output itself (an in-place rank).
TEST(RingAllReduceTest, SeveralInputsPerParticipantMatchTheSerialReference) {
  for (int size : {1, 2, 3, 5}) {
    for (int k : {2, 3}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{4}, size_t{1001}, size_t{70001}}) {
        for (DataType type : {DataType::kFloat32, DataType::kInt8}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            for (bool in_place : {false, true}) {
              SCOPED_TRACE(absl::StrCat("size ", size, " inputs ", k, " count ", count, " ",
                                        DataTypeName(type), " ", ReduceOpName(op),
                                        in_place ? " in place" : ""));
              std::vector<std::vector<std::byte>> all;
              for (int i = 0; i < size * k; ++i) all.push_back(Input(type, op, size * k, i, count));
              const std::vector<std::vector<std::byte>> original = all;
              const std::vector<std::byte> expected = SerialReference(all, count, type, op);
              std::vector<std::vector<std::byte>> outputs(
                  size, std::vector<std::byte>(count * DataTypeSize(type), std::byte{0xA5}));
              if (in_place) {
                for (int r = 0; r < size; ++r) outputs[r] = all[r * k];
              }
              Group group(size);
              OpContext ctx;
              ctx.comm = 0xC0FFEE;
              ctx.seq = 3;
              ctx.deadline = absl::Now() + absl::Seconds(60);
              ctx.chunk_bytes = count > 1001 ? (size_t{16} << 10) + 5 : 7 * DataTypeSize(type) + 1;
              std::vector<absl::Status> statuses(size);
              std::vector<std::thread> threads;
              for (int r = 0; r < size; ++r) {
                threads.emplace_back([&, r, ctx]() mutable {
                  ctx.endpoint = group.endpoint(r);
                  std::vector<const void*> inputs;
                  for (int j = 0; j < k; ++j) inputs.push_back(all[r * k + j].data());
                  if (in_place) inputs[0] = outputs[r].data();
                  statuses[r] = RingAllReduce(ctx, Group::RingOf(r, size), inputs,
                                              outputs[r].data(), count, type, op);
                });
              }
              for (std::thread& t : threads) t.join();
              for (int r = 0; r < size; ++r) {
                ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
                const int64_t diff = FirstDifference(outputs[r], expected, DataTypeSize(type));
                EXPECT_EQ(diff, -1) << "rank " << r << " differs at element " << diff;
                for (int j = in_place ? 1 : 0; j < k; ++j) {
                  EXPECT_EQ(all[r * k + j], original[r * k + j]) << "input " << j << " written";
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- Specific behaviour ----

template <typename T>
std::vector<std::byte> AsBytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> FromBytes(const std::vector<std::byte>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

OpContext TestContext(uint64_t seq, absl::Duration timeout) {
  OpContext ctx;
  ctx.comm = 7;
  ctx.seq = seq;
  ctx.deadline = absl::Now() + timeout;
  return ctx;
}

// Four ranks of four elements, [1,2,3,4] * 10^r: every rank ends with the sum [1111,...,4444].
TEST(RingAllReduceTest, EveryRankGetsTheSumOfFourDistinctInputs) {
  Group group(4);
  std::vector<std::vector<std::byte>> buffers = {
      AsBytes<float>({1, 2, 3, 4}), AsBytes<float>({10, 20, 30, 40}),
      AsBytes<float>({100, 200, 300, 400}), AsBytes<float>({1000, 2000, 3000, 4000})};
  const auto statuses = group.AllReduce(buffers, 4, DataType::kFloat32, ReduceOp::kSum,
                                        TestContext(1, absl::Seconds(30)));
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(FromBytes<float>(buffers[r]), (std::vector<float>{1111, 2222, 3333, 4444}));
  }
}

TEST(RingAllReduceTest, AvgReducesAsSumForTheCallerToDivide) {
  Group group(3);
  std::vector<std::vector<std::byte>> buffers = {
      AsBytes<float>({3, 6, -9}), AsBytes<float>({0, 6, 3}), AsBytes<float>({3, 0, 0})};
  const auto statuses = group.AllReduce(buffers, 3, DataType::kFloat32, ReduceOp::kAvg,
                                        TestContext(1, absl::Seconds(30)));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(FromBytes<float>(buffers[r]), (std::vector<float>{6, 12, -6}));
    DivideInPlace(DataType::kFloat32, buffers[r].data(), 3, 3);
    EXPECT_EQ(FromBytes<float>(buffers[r]), (std::vector<float>{2, 4, -2}));
  }
}

// Chunk sizes below one element, not a multiple of it, and so large that rounding up the number
// of chunks could overflow (one-byte elements).
TEST(RingAllReduceTest, ChunkBytesOfAnySize) {
  for (size_t chunk_bytes : {size_t{0}, size_t{3}, size_t{8}, SIZE_MAX / 2, SIZE_MAX}) {
    Group group(3);
    std::vector<std::vector<std::byte>> buffers = {AsBytes<uint8_t>({1, 2, 3, 4, 5}),
                                                   AsBytes<uint8_t>({10, 20, 30, 40, 50}),
                                                   AsBytes<uint8_t>({100, 200, 44, 144, 250})};
    OpContext ctx = TestContext(1, absl::Seconds(30));
    ctx.chunk_bytes = chunk_bytes;
    const auto statuses = group.AllReduce(buffers, 5, DataType::kUint8, ReduceOp::kSum, ctx);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      EXPECT_EQ(FromBytes<uint8_t>(buffers[r]), (std::vector<uint8_t>{111, 222, 77, 188, 49}))
          << "chunk_bytes " << chunk_bytes;
    }
  }
}

// Back-to-back operations on the same endpoints, and two communicators at once: tags keep them
// apart.
TEST(RingAllReduceTest, ConsecutiveAndConcurrentOperations) {
  constexpr int kRanks = 4;
  constexpr size_t kCount = 999;
  Group group(kRanks);
  std::vector<std::vector<std::byte>> a(kRanks), b(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    a[r] = AsBytes(std::vector<int32_t>(kCount, r + 1));
    b[r] = AsBytes(std::vector<int32_t>(kCount, 10 * (r + 1)));
  }
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    OpContext ctx_a = TestContext(seq, absl::Seconds(30));
    OpContext ctx_b = ctx_a;
    ctx_b.comm = 8;
    ctx_a.chunk_bytes = ctx_b.chunk_bytes = 64;
    std::vector<absl::Status> statuses_a, statuses_b;
    std::thread other(
        [&] { statuses_b = group.AllReduce(b, kCount, DataType::kInt32, ReduceOp::kSum, ctx_b); });
    statuses_a = group.AllReduce(a, kCount, DataType::kInt32, ReduceOp::kSum, ctx_a);
    other.join();
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(statuses_a[r].ok()) << statuses_a[r];
      ASSERT_TRUE(statuses_b[r].ok()) << statuses_b[r];
    }
  }
  // The first operation sums 1..4 (and 10..40); each later one multiplies by the 4 ranks.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(FromBytes<int32_t>(a[r]), std::vector<int32_t>(kCount, 10 * 256));
    EXPECT_EQ(FromBytes<int32_t>(b[r]), std::vector<int32_t>(kCount, 100 * 256));
  }
}

TEST(RingAllReduceTest, RejectsBadArguments) {
  int32_t data[4] = {};
  OpContext ctx;
  EXPECT_EQ(
      RingAllReduce(ctx, Ring{2, 2, "a", "b"}, data, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, Ring{0, 0, "", ""}, data, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, Ring{-1, 2, "a", "b"}, data, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  // Missing endpoint, buffer or neighbour in a real ring.
  EXPECT_EQ(
      RingAllReduce(ctx, Ring{0, 2, "a", "b"}, data, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  Group group(2);
  ctx.endpoint = group.endpoint(0);
  EXPECT_EQ(
      RingAllReduce(ctx, Ring{0, 2, "", "rank1"}, data, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, Group::RingOf(0, 2), nullptr, 4, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, Group::RingOf(0, 2), data, SIZE_MAX / 2, DataType::kInt32, ReduceOp::kSum)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, Group::RingOf(0, 2), data, 4, static_cast<DataType>(77), ReduceOp::kSum)
          .code(),
      absl::StatusCode::kInvalidArgument);
  // Nothing to do: no transport needed.
  EXPECT_TRUE(RingAllReduce(OpContext{}, Ring{}, data, 4, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_TRUE(
      RingAllReduce(ctx, Group::RingOf(0, 2), data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

// ---- Failures ----

// Forwards to a real endpoint and kills it (through the fabric, as if its process died) right
// after its `kill_after`-th send.
class DyingEndpoint final : public Endpoint {
 public:
  DyingEndpoint(Endpoint* inner, InMemoryFabric* fabric, int kill_after)
      : inner_(inner), fabric_(fabric), kill_after_(kill_after) {}

  std::string address() const override { return inner_->address(); }
  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    absl::Status status = inner_->Send(peer, tag, data, deadline);
    if (++sends_ == kill_after_) fabric_->Kill(inner_->address());
    return status;
  }
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override {
    return inner_->PostRecv(peer, tag, data, deadline, std::move(on_arrival));
  }
  void Abort(uint64_t comm, const absl::Status& reason) override { inner_->Abort(comm, reason); }
  void Forget(uint64_t comm) override { inner_->Forget(comm); }
  std::vector<transport::LinkStats> Stats() const override { return inner_->Stats(); }

 private:
  Endpoint* const inner_;
  InMemoryFabric* const fabric_;
  const int kill_after_;
  std::atomic<int> sends_{0};
};

TEST(RingAllReduceTest, PeerKilledMidOperationFailsEveryRankWithoutHanging) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  constexpr size_t kCount = 4000;
  const absl::Duration kTimeout = absl::Seconds(1);
  Group group(kRanks);
  DyingEndpoint victim(group.endpoint(kVictim), &group.fabric(), /*kill_after=*/5);
  std::vector<Endpoint*> endpoints;
  for (int r = 0; r < kRanks; ++r) endpoints.push_back(r == kVictim ? &victim : group.endpoint(r));
  std::vector<std::vector<std::byte>> buffers(kRanks, AsBytes(std::vector<float>(kCount, 1.0f)));
  OpContext ctx = TestContext(1, kTimeout);
  ctx.chunk_bytes = 64;  // 63 chunks per step: the victim dies early in the first step

  const absl::Time start = absl::Now();
  const auto statuses =
      group.AllReduce(buffers, kCount, DataType::kFloat32, ReduceOp::kSum, ctx, endpoints);
  EXPECT_LT(absl::Now() - start, kTimeout + absl::Seconds(5));

  EXPECT_FALSE(statuses[kVictim].ok());
  // The victim's successor waits for its data: it learns of the loss at once.
  EXPECT_EQ(statuses[3].code(), absl::StatusCode::kUnavailable) << statuses[3];
  EXPECT_THAT(statuses[3].message(), HasSubstr("receiving from rank2"));
  // Its predecessor learns it on its next send to it, unless it is already waiting for its own
  // predecessor, which stalls for lack of data: then it times out naming that one.
  if (statuses[1].code() == absl::StatusCode::kUnavailable) {
    EXPECT_THAT(statuses[1].message(), HasSubstr("sending to rank2"));
  } else {
    EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
    EXPECT_THAT(statuses[1].message(), HasSubstr("receiving from rank0"));
  }
  // Rank 0 never talks to the victim: it times out waiting for rank 3.
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_THAT(statuses[0].message(), HasSubstr("receiving from rank3"));
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status.message(), HasSubstr("ring all-reduce rank "));
  }
}

TEST(RingAllReduceTest, MissingRankTimesOutNamingThePeerWaitedFor) {
  constexpr int kRanks = 3;
  Group group(kRanks);
  std::vector<std::vector<int32_t>> data(kRanks, std::vector<int32_t>(10, 1));
  const OpContext base = TestContext(1, absl::Milliseconds(300));
  std::vector<absl::Status> statuses(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks - 1; ++r) {  // rank 2 never calls
    threads.emplace_back([&, r] {
      OpContext ctx = base;
      ctx.endpoint = group.endpoint(r);
      statuses[r] = RingAllReduce(ctx, Group::RingOf(r, kRanks), data[r].data(), 10,
                                  DataType::kInt32, ReduceOp::kSum);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_THAT(statuses[0].message(), HasSubstr("receiving from rank2"));
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
  EXPECT_THAT(statuses[1].message(), HasSubstr("receiving from rank0"));
}

// Over TCP the reducing steps' chunks are folded in piece by piece, by each connection's reader
// thread, while the rank's own thread sends: the result must be the same, in place, out of place
// and with several local inputs, for chunks that are several pieces long and ones that are not.
TEST(RingAllReduceTest, OverTcpEachPieceIsFoldedInAsItArrives) {
  constexpr int kRanks = 4;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  for (int r = 0; r < kRanks; ++r) {
    transport::TcpOptions options;
    options.listen_address = "127.0.0.1:0";  // loopback and port 0 only
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = transport::NewTcpEndpoint(options);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoints.push_back(*std::move(endpoint));
  }
  auto ring_of = [&](int r) {
    return Ring{r, kRanks, endpoints[(r + kRanks - 1) % kRanks]->address(),
                endpoints[(r + 1) % kRanks]->address()};
  };
  const size_t count = (size_t{3} << 20) / 4 + 37;  // 3 MiB of float32 and an odd tail
  std::vector<std::vector<std::byte>> inputs, extra;
  for (int r = 0; r < kRanks; ++r) {
    inputs.push_back(Input(DataType::kFloat32, ReduceOp::kSum, 2 * kRanks, r, count));
    extra.push_back(Input(DataType::kFloat32, ReduceOp::kSum, 2 * kRanks, kRanks + r, count));
  }
  std::vector<std::vector<std::byte>> all = inputs;
  all.insert(all.end(), extra.begin(), extra.end());
  const std::vector<std::byte> expected =
      SerialReference(inputs, count, DataType::kFloat32, ReduceOp::kSum);
  const std::vector<std::byte> expected_two =
      SerialReference(all, count, DataType::kFloat32, ReduceOp::kSum);
  enum class Mode { kInPlace, kOutOfPlace, kTwoInputs };
  uint64_t seq = 0;
  for (size_t chunk_bytes : {size_t{1} << 20, size_t{64} << 10}) {
    for (Mode mode : {Mode::kInPlace, Mode::kOutOfPlace, Mode::kTwoInputs}) {
      SCOPED_TRACE(absl::StrCat("chunk ", chunk_bytes, " mode ", static_cast<int>(mode)));
      std::vector<std::vector<std::byte>> outputs =
          mode == Mode::kInPlace
              ? inputs
              : std::vector<std::vector<std::byte>>(
                    kRanks, std::vector<std::byte>(inputs[0].size(), std::byte{0xA5}));
      OpContext base = TestContext(++seq, absl::Seconds(60));
      base.chunk_bytes = chunk_bytes;
      std::vector<absl::Status> statuses(kRanks);
      std::vector<std::thread> threads;
      for (int r = 0; r < kRanks; ++r) {
        threads.emplace_back([&, r] {
          OpContext ctx = base;
          ctx.endpoint = endpoints[r].get();
          if (mode == Mode::kTwoInputs) {
            const std::array<const void*, 2> sources = {inputs[r].data(), extra[r].data()};
            statuses[r] = RingAllReduce(ctx, ring_of(r), sources, outputs[r].data(), count,
                                        DataType::kFloat32, ReduceOp::kSum);
          } else if (mode == Mode::kOutOfPlace) {
            statuses[r] = RingAllReduce(ctx, ring_of(r), inputs[r].data(), outputs[r].data(), count,
                                        DataType::kFloat32, ReduceOp::kSum);
          } else {
            statuses[r] = RingAllReduce(ctx, ring_of(r), outputs[r].data(), count,
                                        DataType::kFloat32, ReduceOp::kSum);
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
        const int64_t diff = FirstDifference(
            outputs[r], mode == Mode::kTwoInputs ? expected_two : expected, sizeof(float));
        EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
      }
    }
  }
}

}  // namespace
}  // namespace baton::collective
