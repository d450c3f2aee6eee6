#include "wire/op_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collective/op_spec.h"

namespace baton::wire {
namespace {

using collective::Algorithm;
using collective::Collective;
using collective::DataType;
using collective::OpSpec;
using collective::ReduceOp;
using ::testing::HasSubstr;

constexpr Collective kEvery[] = {
    Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
    Collective::kBroadcast, Collective::kReduce,        Collective::kAllToAll,
    Collective::kBarrier,   Collective::kGather,        Collective::kScatter,
    Collective::kAllToAllV, Collective::kSend,          Collective::kRecv};

// A spec of `collective` with every field set to something other than its default.
OpSpec Sample(Collective collective, int entries = 3) {
  OpSpec spec;
  spec.collective = collective;
  spec.type = DataType::kBfloat16;
  spec.op = ReduceOp::kMax;
  spec.count = collective == Collective::kAllToAllV ? 0 : 0x1'0000'0007;
  spec.root = 2;
  spec.peer = 1;
  spec.algorithm =
      collective == Collective::kAllReduce ? std::optional(Algorithm::kTree) : std::nullopt;
  // Set on some collectives only: both values make the round trip.
  spec.node_part = collective == Collective::kBroadcast || collective == Collective::kBarrier;
  if (collective == Collective::kAllToAllV) {
    for (int j = 0; j < entries; ++j) {
      spec.send_counts.push_back(j + 1);
      spec.send_displs.push_back(10 * j);
      spec.recv_counts.push_back(2 * j);
      spec.recv_displs.push_back(100 + 10 * j);
    }
  }
  return spec;
}

TEST(OpCodecTest, EveryCollectiveRoundTripsThroughTheProto) {
  for (Collective c : kEvery) {
    const OpSpec spec = Sample(c);
    v1::CollectiveRequest request;
    request.set_session_id(5);  // not the codec's: left alone
    ToProto(spec, &request);
    EXPECT_EQ(request.session_id(), 5u);
    absl::StatusOr<OpSpec> back = FromProto(request);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, spec) << spec.Describe() << " came back as " << back->Describe();
  }
}

TEST(OpCodecTest, EveryCollectiveRoundTripsThroughTheChannel) {
  for (Collective c : kEvery) {
    const OpSpec spec = Sample(c);
    channel::OpDescriptor op;
    op.send_buffer = 9;  // not the codec's: left alone
    auto tail = std::make_unique<channel::VectorTail>();
    ASSERT_TRUE(ToChannel(spec, &op, tail.get()).ok());
    EXPECT_EQ(op.send_buffer, 9u);
    absl::StatusOr<OpSpec> back = FromChannel(op, *tail);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, spec) << spec.Describe() << " came back as " << back->Describe();
  }
}

TEST(OpCodecTest, ProtoNamesAreOneToOne) {
  for (Collective c : kEvery) {
    EXPECT_NE(ProtoOp(c), v1::COLLECTIVE_OP_UNSPECIFIED);
    EXPECT_EQ(FromProtoOp(ProtoOp(c)), c);
  }
  EXPECT_EQ(FromProtoOp(v1::COLLECTIVE_OP_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(FromProtoOp(static_cast<v1::CollectiveOp>(42)), std::nullopt);
}

TEST(OpCodecTest, TheProtoRejectsUnknownNames) {
  v1::CollectiveRequest good;
  ToProto(Sample(Collective::kAllReduce), &good);
  auto expect_invalid = [](const v1::CollectiveRequest& request, const std::string& words) {
    absl::StatusOr<OpSpec> spec = FromProto(request);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(words));
  };
  v1::CollectiveRequest r = good;
  r.set_op(static_cast<v1::CollectiveOp>(42));
  expect_invalid(r, "unknown collective 42");
  r = good;
  r.set_data_type("float33");
  expect_invalid(r, "unknown data type 'float33'");
  r = good;
  r.set_reduce_op("median");
  expect_invalid(r, "unknown reduce op 'median'");
  r = good;
  r.set_algorithm("butterfly");
  expect_invalid(r, "unknown algorithm 'butterfly'");
}

TEST(OpCodecTest, TheChannelRejectsUnknownValuesAndTooManyCounts) {
  channel::OpDescriptor good;
  auto tail = std::make_unique<channel::VectorTail>();
  ASSERT_TRUE(ToChannel(Sample(Collective::kAllReduce), &good, tail.get()).ok());
  auto expect_invalid = [&](const channel::OpDescriptor& op, const std::string& words) {
    absl::StatusOr<OpSpec> spec = FromChannel(op, *tail);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(words));
  };
  channel::OpDescriptor op = good;
  op.kind = 99;
  expect_invalid(op, "unknown collective 99");
  op = good;
  op.data_type = 77;
  expect_invalid(op, "unknown data type 77");
  op = good;
  op.reduce_op = 55;
  expect_invalid(op, "unknown reduce op 55");
  op = good;
  op.algorithm = 40;
  expect_invalid(op, "unknown algorithm 39");

  // all_to_all_v: up to the page's capacity fits; one more goes by gRPC, and a page that claims
  // more is refused.
  EXPECT_TRUE(FitsChannel(Sample(Collective::kAllToAllV, channel::kMaxVectorRanks)));
  ASSERT_TRUE(
      ToChannel(Sample(Collective::kAllToAllV, channel::kMaxVectorRanks), &op, tail.get()).ok());
  EXPECT_TRUE(FromChannel(op, *tail).ok());
  const OpSpec large = Sample(Collective::kAllToAllV, channel::kMaxVectorRanks + 1);
  EXPECT_FALSE(FitsChannel(large));
  EXPECT_THAT(ToChannel(large, &op, tail.get()).message(), HasSubstr("does not fit"));
  tail->entries = channel::kMaxVectorRanks + 1;
  expect_invalid(op, "at most 64");
  // Arrays of different lengths cannot share the page's one entry count.
  OpSpec uneven = Sample(Collective::kAllToAllV, 3);
  uneven.recv_displs.pop_back();
  EXPECT_FALSE(FitsChannel(uneven));
  // Other collectives ignore the tail.
  EXPECT_TRUE(FitsChannel(Sample(Collective::kAllReduce)));
  ASSERT_TRUE(ToChannel(Sample(Collective::kBroadcast), &op, tail.get()).ok());
  absl::StatusOr<OpSpec> broadcast = FromChannel(op, *tail);
  ASSERT_TRUE(broadcast.ok());
  EXPECT_TRUE(broadcast->send_counts.empty());
}

}  // namespace
}  // namespace baton::wire
