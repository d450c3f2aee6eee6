#include "collective/ring_all_reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "device/reduce.h"
#include "tests/collective/collective_test_support.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

// Every rank runs as a thread with its own in-memory endpoint (collective_test_support.h); the
// results are compared bit for bit with the serial reference, on inputs chosen so that the ring's
// reduction order (which differs per segment) cannot change the result.

namespace baton::collective {
namespace {

using test::FirstDifference;
using test::Group;
using test::RingOf;
using test::SerialReference;
using test::SweepCase;
using ::testing::HasSubstr;
using transport::Endpoint;

std::vector<std::byte> Input(DataType type, ReduceOp op, int world_size, int rank, size_t count) {
  return test::ReduceInput(type, op, world_size, rank, count);
}

// RingAllReduce on every rank of `group` at once, rank r in place on buffers[r], through
// `endpoints` when given (one per rank); each rank's status.
std::vector<absl::Status> AllReduce(Group& group, std::vector<std::vector<std::byte>>& buffers,
                                    size_t count, DataType type, ReduceOp op, const OpContext& ctx,
                                    const std::vector<Endpoint*>& endpoints = {}) {
  return group.Run(
      ctx,
      [&](int r, const OpContext& own) {
        return RingAllReduce(own, RingOf(r, group.size()), buffers[r].data(), count, type, op);
      },
      endpoints);
}

// The sweep: every world size x count x type x op (the large count for four types).
std::vector<SweepCase> AllCases() {
  return test::SweepCases(
      /*reduces=*/true, /*rooted=*/false,
      {DataType::kFloat32, DataType::kInt32, DataType::kFloat16, DataType::kBfloat16});
}

std::string CaseName(const ::testing::TestParamInfo<SweepCase>& info) {
  return info.param.Name(/*with_op=*/true, /*with_root=*/false);
}

class RingAllReduceSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingAllReduceSweep, MatchesSerialReference) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.size; ++r) inputs.push_back(Input(c.type, c.op, c.size, r, count));
  const std::vector<std::byte> expected = SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  std::vector<std::vector<std::byte>> buffers = inputs;
  const OpContext ctx = c.Context();
  const std::vector<absl::Status> statuses = AllReduce(group, buffers, count, c.type, c.op, ctx);
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = FirstDifference(buffers[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
  }
}

// Out of place, the schedule and the chunking are the same for every type; what differs is the
// reduction kernel, which reduce_test covers for every type. So: every world size and count, with
// a wide, a narrow float and an integer type, and an arithmetic and a selecting op.
std::vector<SweepCase> OutOfPlaceCases() {
  std::vector<SweepCase> cases;
  for (const SweepCase& c : AllCases()) {
    const bool type =
        c.type == DataType::kFloat32 || c.type == DataType::kFloat16 || c.type == DataType::kInt8;
    const bool op = c.op == ReduceOp::kSum || c.op == ReduceOp::kMax;
    if (type && op) cases.push_back(c);
  }
  return cases;
}

class RingAllReduceOutOfPlaceSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(RingAllReduceOutOfPlaceSweep, MatchesSerialReferenceAndLeavesInputsAlone) {
  const SweepCase& c = GetParam();
  const size_t count = c.count();
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < c.size; ++r) inputs.push_back(Input(c.type, c.op, c.size, r, count));
  const std::vector<std::vector<std::byte>> original = inputs;
  const std::vector<std::byte> expected = SerialReference(inputs, count, c.type, c.op);

  Group group(c.size);
  // Outputs start as garbage: every element must be written.
  std::vector<std::vector<std::byte>> outputs(
      c.size, std::vector<std::byte>(count * DataTypeSize(c.type), std::byte{0xA5}));
  const OpContext ctx = c.Context();
  const std::vector<absl::Status> statuses = group.Run(ctx, [&](int r, const OpContext& own) {
    return RingAllReduce(own, RingOf(r, c.size), inputs[r].data(), outputs[r].data(), count, c.type,
                         c.op);
  });
  for (int r = 0; r < c.size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const int64_t diff = FirstDifference(outputs[r], expected, DataTypeSize(c.type));
    EXPECT_EQ(diff, -1) << "rank " << r << " differs from the reference at element " << diff;
    EXPECT_EQ(inputs[r], original[r]) << "rank " << r << "'s input was written";
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesCountsTypesOps, RingAllReduceSweep,
                         ::testing::ValuesIn(AllCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(WorldSizesCountsSomeTypesOps, RingAllReduceOutOfPlaceSweep,
                         ::testing::ValuesIn(OutOfPlaceCases()), CaseName);

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
              OpContext ctx = test::TestContext(3, absl::Seconds(60));
              ctx.chunk_bytes = count > 1001 ? (size_t{16} << 10) + 5 : 7 * DataTypeSize(type) + 1;
              const std::vector<absl::Status> statuses =
                  group.Run(ctx, [&](int r, const OpContext& own) {
                    std::vector<const void*> inputs;
                    for (int j = 0; j < k; ++j) inputs.push_back(all[r * k + j].data());
                    if (in_place) inputs[0] = outputs[r].data();
                    return RingAllReduce(own, RingOf(r, size), inputs, outputs[r].data(), count,
                                         type, op);
                  });
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

using test::AsBytes;
using test::FromBytes;
using test::TestContext;

// Four ranks of four elements, [1,2,3,4] * 10^r: every rank ends with the sum [1111,...,4444].
TEST(RingAllReduceTest, EveryRankGetsTheSumOfFourDistinctInputs) {
  Group group(4);
  std::vector<std::vector<std::byte>> buffers = {
      AsBytes<float>({1, 2, 3, 4}), AsBytes<float>({10, 20, 30, 40}),
      AsBytes<float>({100, 200, 300, 400}), AsBytes<float>({1000, 2000, 3000, 4000})};
  const auto statuses = AllReduce(group, buffers, 4, DataType::kFloat32, ReduceOp::kSum,
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
  const auto statuses = AllReduce(group, buffers, 3, DataType::kFloat32, ReduceOp::kAvg,
                                  TestContext(1, absl::Seconds(30)));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(FromBytes<float>(buffers[r]), (std::vector<float>{6, 12, -6}));
    device::DivideInPlace(DataType::kFloat32, buffers[r].data(), 3, 3);
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
    const auto statuses = AllReduce(group, buffers, 5, DataType::kUint8, ReduceOp::kSum, ctx);
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
        [&] { statuses_b = AllReduce(group, b, kCount, DataType::kInt32, ReduceOp::kSum, ctx_b); });
    statuses_a = AllReduce(group, a, kCount, DataType::kInt32, ReduceOp::kSum, ctx_a);
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
  EXPECT_EQ(RingAllReduce(ctx, RingOf(0, 2), nullptr, 4, DataType::kInt32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, RingOf(0, 2), data, SIZE_MAX / 2, DataType::kInt32, ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RingAllReduce(ctx, RingOf(0, 2), data, 4, static_cast<DataType>(77), ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  // Nothing to do: no transport needed.
  EXPECT_TRUE(RingAllReduce(OpContext{}, Ring{}, data, 4, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_TRUE(RingAllReduce(ctx, RingOf(0, 2), data, 0, DataType::kInt32, ReduceOp::kSum).ok());
}

// ---- Failures ----

TEST(RingAllReduceTest, PeerKilledMidOperationFailsEveryRankWithoutHanging) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  constexpr size_t kCount = 4000;
  const absl::Duration kTimeout = absl::Seconds(1);
  Group group(kRanks);
  test::DyingEndpoint victim(group.endpoint(kVictim), &group.fabric(), /*kill_after=*/5);
  std::vector<Endpoint*> endpoints;
  for (int r = 0; r < kRanks; ++r) endpoints.push_back(r == kVictim ? &victim : group.endpoint(r));
  std::vector<std::vector<std::byte>> buffers(kRanks, AsBytes(std::vector<float>(kCount, 1.0f)));
  OpContext ctx = TestContext(1, kTimeout);
  ctx.chunk_bytes = 64;  // 63 chunks per step: the victim dies early in the first step

  const absl::Time start = absl::Now();
  const auto statuses =
      AllReduce(group, buffers, kCount, DataType::kFloat32, ReduceOp::kSum, ctx, endpoints);
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
  const std::vector<absl::Status> statuses = group.Run(base, [&](int r, const OpContext& ctx) {
    if (r == kRanks - 1) return absl::OkStatus();  // rank 2 never calls
    return RingAllReduce(ctx, RingOf(r, kRanks), data[r].data(), 10, DataType::kInt32,
                         ReduceOp::kSum);
  });
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
