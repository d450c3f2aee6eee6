#include "collective/op_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace baton::collective {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

OpSpec Spec(Collective collective, uint64_t count = 8, DataType type = DataType::kFloat32) {
  OpSpec spec;
  spec.collective = collective;
  spec.count = count;
  spec.type = type;
  return spec;
}

OpSpec AllToAllV(std::vector<uint64_t> send_counts, std::vector<uint64_t> send_displs,
                 std::vector<uint64_t> recv_counts, std::vector<uint64_t> recv_displs) {
  OpSpec spec = Spec(Collective::kAllToAllV, 0);
  spec.send_counts = std::move(send_counts);
  spec.send_displs = std::move(send_displs);
  spec.recv_counts = std::move(recv_counts);
  spec.recv_displs = std::move(recv_displs);
  return spec;
}

void ExpectInvalid(const OpSpec& spec, int world, int rank, const std::string& words) {
  const absl::Status status = spec.Validate(world, rank);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << spec.Describe();
  EXPECT_THAT(status.message(), HasSubstr(words)) << spec.Describe();
}

TEST(OpSpecTest, EveryCollectiveWithSaneFieldsIsValid) {
  for (Collective c :
       {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
        Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll, Collective::kBarrier,
        Collective::kGather, Collective::kScatter, Collective::kSend, Collective::kRecv}) {
    OpSpec spec = Spec(c, c == Collective::kBarrier ? 0 : 8);
    spec.root = 3;
    spec.peer = 1;
    EXPECT_TRUE(spec.Validate(4, 2).ok()) << spec.Describe() << ": " << spec.Validate(4, 2);
  }
  EXPECT_TRUE(AllToAllV({1, 0, 2}, {0, 1, 1}, {2, 2, 0}, {0, 2, 9}).Validate(3, 0).ok());
}

TEST(OpSpecTest, NamesTheFieldThatIsWrong) {
  OpSpec spec = Spec(static_cast<Collective>(99));
  ExpectInvalid(spec, 4, 0, "unknown collective 99");
  ExpectInvalid(Spec(Collective::kAllReduce, 8, static_cast<DataType>(77)), 4, 0,
                "unknown data type 77");
  spec = Spec(Collective::kAllReduce);
  spec.op = static_cast<ReduceOp>(55);
  ExpectInvalid(spec, 4, 0, "unknown reduce op 55");
  ExpectInvalid(Spec(Collective::kAllReduce), 4, 4, "rank 4 is out of range for world size 4");
  ExpectInvalid(Spec(Collective::kAllReduce), 0, 0, "out of range");
  spec = Spec(Collective::kAllGather);
  spec.algorithm = Algorithm::kTree;
  ExpectInvalid(spec, 4, 0, "tree does not implement all_gather");
  for (Collective c :
       {Collective::kBroadcast, Collective::kReduce, Collective::kGather, Collective::kScatter}) {
    for (int root : {-1, 4}) {
      spec = Spec(c);
      spec.root = root;
      ExpectInvalid(spec, 4, 0,
                    "root " + std::to_string(root) + " is out of range for world size 4");
    }
  }
  for (Collective c : {Collective::kSend, Collective::kRecv}) {
    spec = Spec(c);
    spec.peer = 7;
    ExpectInvalid(spec, 4, 0, "peer 7 is out of range for world size 4");
  }
  // A root or peer means nothing to the others.
  spec = Spec(Collective::kAllReduce);
  spec.root = -5;
  spec.peer = 99;
  EXPECT_TRUE(spec.Validate(4, 0).ok());
}

TEST(OpSpecTest, CountsThatOverflowInElementsOrBytes) {
  ExpectInvalid(Spec(Collective::kAllReduce, kMax / 2), 4, 0, "count");
  // The bytes of the whole buffer (count * world for the per-rank-block collectives).
  EXPECT_TRUE(Spec(Collective::kAllReduce, kMax / 8, DataType::kUint8).Validate(4, 0).ok());
  ExpectInvalid(Spec(Collective::kAllGather, kMax / 8, DataType::kUint8), 16, 0, "overflows");
  ExpectInvalid(Spec(Collective::kReduceScatter, kMax / 3, DataType::kUint8), 4, 0, "overflows");
}

TEST(OpSpecTest, AllToAllVArrays) {
  // One entry per rank in each array.
  ExpectInvalid(
      AllToAllV({1, 1}, {0, 1}, {1, 1, 1}, {0, 1, 2}), 3, 0,
      "send_counts has 2 entries and send_displs 2; both need one per rank (world size 3)");
  ExpectInvalid(AllToAllV({1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1}), 3, 0,
                "recv_counts has 3 entries and recv_displs 2");
  // An end that overflows, and a span whose bytes do.
  ExpectInvalid(AllToAllV({1, 1, 1}, {0, kMax, 2}, {1, 1, 1}, {0, 1, 2}), 3, 0,
                "send_displs[1] + send_counts[1] overflows");
  ExpectInvalid(AllToAllV({1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1, kMax}), 3, 0,
                "recv_displs[2] + recv_counts[2] overflows");
  ExpectInvalid(AllToAllV({1, 1, kMax / 2}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}), 3, 0,
                "all_to_all_v's send buffer of");
  // An empty block may sit anywhere, even at a displacement that would overflow.
  EXPECT_TRUE(AllToAllV({1, 0, 1}, {0, kMax, 1}, {1, 0, 1}, {0, kMax, 1}).Validate(3, 0).ok());
  // Receive blocks that overlap, in any order; send blocks may (the same data to two peers).
  ExpectInvalid(AllToAllV({1, 1, 1}, {0, 0, 0}, {2, 2, 2}, {4, 0, 1}), 3, 0,
                "recv blocks of ranks 1 and 2 overlap");
  EXPECT_TRUE(AllToAllV({3, 3, 3}, {0, 0, 0}, {2, 2, 2}, {4, 0, 2}).Validate(3, 0).ok());
  // Its count is per peer.
  OpSpec spec = AllToAllV({1}, {0}, {1}, {0});
  spec.count = 1;
  ExpectInvalid(spec, 1, 0, "count must be 0");
}

TEST(OpSpecTest, BufferElementsPerRank) {
  struct Case {
    Collective collective;
    uint64_t root_send, root_recv, other_send, other_recv;  // for count 5 of world 4
  };
  const Case cases[] = {
      {Collective::kAllReduce, 5, 5, 5, 5},   {Collective::kReduceScatter, 20, 5, 20, 5},
      {Collective::kAllGather, 5, 20, 5, 20}, {Collective::kBroadcast, 5, 5, 0, 5},
      {Collective::kReduce, 5, 5, 5, 0},      {Collective::kAllToAll, 20, 20, 20, 20},
      {Collective::kGather, 5, 20, 5, 0},     {Collective::kScatter, 20, 5, 0, 5},
      {Collective::kSend, 5, 0, 5, 0},        {Collective::kRecv, 0, 5, 0, 5},
  };
  for (const Case& c : cases) {
    OpSpec spec = Spec(c.collective, 5);
    spec.root = 1;
    SCOPED_TRACE(spec.Describe());
    EXPECT_EQ(spec.SendElements(4, 1), c.root_send);
    EXPECT_EQ(spec.RecvElements(4, 1), c.root_recv);
    EXPECT_EQ(spec.SendElements(4, 2), c.other_send);
    EXPECT_EQ(spec.RecvElements(4, 2), c.other_recv);
  }
  const OpSpec barrier = Spec(Collective::kBarrier, 0);
  EXPECT_EQ(barrier.SendElements(4, 0) + barrier.RecvElements(4, 0), 0u);
  // all_to_all_v: the furthest end of a non-empty block.
  const OpSpec v = AllToAllV({1, 0, 2}, {7, 100, 1}, {2, 2, 0}, {0, 2, 50});
  EXPECT_EQ(v.SendElements(3, 0), 8u);
  EXPECT_EQ(v.RecvElements(3, 0), 4u);
}

TEST(OpSpecTest, SignatureKeepsWhatRanksMustAgreeOn) {
  OpSpec spec = Spec(Collective::kReduce, 1234, DataType::kBfloat16);
  spec.op = ReduceOp::kMax;
  spec.root = 3;
  spec.algorithm = Algorithm::kRing;
  const Signature signature = Signature::Of(spec);
  const OpSpec back = signature.AsSpec();
  EXPECT_EQ(back.collective, spec.collective);
  EXPECT_EQ(back.type, spec.type);
  EXPECT_EQ(back.op, spec.op);
  EXPECT_EQ(back.root, spec.root);
  EXPECT_EQ(back.count, spec.count);
  EXPECT_EQ(back.algorithm, spec.algorithm);
  EXPECT_EQ(Signature::Of(back), signature);
  // Each field that must agree changes the signature; a root that means nothing does not.
  OpSpec other = spec;
  other.count = 1235;
  EXPECT_FALSE(SameOperation(spec, other));
  other = spec;
  other.algorithm.reset();
  EXPECT_FALSE(SameOperation(spec, other));
  other = spec;
  other.root = 2;
  EXPECT_FALSE(SameOperation(spec, other));
  OpSpec a = Spec(Collective::kAllReduce), b = a;
  b.root = 3;
  EXPECT_TRUE(SameOperation(a, b));
}

}  // namespace
}  // namespace baton::collective
