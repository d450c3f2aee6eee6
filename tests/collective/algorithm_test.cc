#include "collective/algorithm.h"

#include <gtest/gtest.h>

#include "collective/segments.h"

namespace baton::collective {
namespace {

constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                       Collective::kAllGather, Collective::kBroadcast,
                                       Collective::kReduce,    Collective::kAllToAll,
                                       Collective::kBarrier};
constexpr Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect,
                                     Algorithm::kDoubling, Algorithm::kHalvingDoubling};

TEST(AlgorithmTest, NamesRoundTrip) {
  for (Collective c : kCollectives) EXPECT_EQ(ParseCollective(CollectiveName(c)), c);
  for (Algorithm a : kAlgorithms) EXPECT_EQ(ParseAlgorithm(AlgorithmName(a)), a);
  EXPECT_EQ(CollectiveName(Collective::kAllReduce), "all_reduce");
  EXPECT_EQ(CollectiveName(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(CollectiveName(Collective::kAllToAll), "all_to_all");
  EXPECT_EQ(AlgorithmName(Algorithm::kTree), "tree");
  EXPECT_EQ(AlgorithmName(Algorithm::kDoubling), "doubling");
  EXPECT_EQ(AlgorithmName(Algorithm::kHalvingDoubling), "halving_doubling");
  EXPECT_EQ(CollectiveName(static_cast<Collective>(42)), "unknown");
  EXPECT_EQ(AlgorithmName(static_cast<Algorithm>(42)), "unknown");
  EXPECT_EQ(ParseCollective("allreduce"), std::nullopt);
  EXPECT_EQ(ParseCollective("unknown"), std::nullopt);
  EXPECT_EQ(ParseAlgorithm("Ring"), std::nullopt);
  EXPECT_EQ(ParseAlgorithm(""), std::nullopt);
}

TEST(AlgorithmTest, SupportedCombinations) {
  int supported = 0;
  for (Collective c : kCollectives) {
    int algorithms = 0;
    for (Algorithm a : kAlgorithms) algorithms += IsSupported(c, a);
    EXPECT_GE(algorithms, 1) << CollectiveName(c) << " has no algorithm";
    supported += algorithms;
  }
  EXPECT_EQ(supported, 10);
  EXPECT_TRUE(IsSupported(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(IsSupported(Collective::kAllReduce, Algorithm::kTree));
  EXPECT_TRUE(IsSupported(Collective::kAllReduce, Algorithm::kDoubling));
  EXPECT_TRUE(IsSupported(Collective::kAllReduce, Algorithm::kHalvingDoubling));
  EXPECT_FALSE(IsSupported(Collective::kReduceScatter, Algorithm::kDoubling));
  EXPECT_FALSE(IsSupported(Collective::kAllReduce, Algorithm::kDirect));
  EXPECT_TRUE(IsSupported(Collective::kReduceScatter, Algorithm::kRing));
  EXPECT_FALSE(IsSupported(Collective::kReduceScatter, Algorithm::kTree));
  EXPECT_TRUE(IsSupported(Collective::kBroadcast, Algorithm::kRing));
  EXPECT_TRUE(IsSupported(Collective::kReduce, Algorithm::kRing));
  EXPECT_TRUE(IsSupported(Collective::kAllToAll, Algorithm::kDirect));
  EXPECT_FALSE(IsSupported(Collective::kAllToAll, Algorithm::kRing));
  EXPECT_TRUE(IsSupported(Collective::kBarrier, Algorithm::kDirect));
  EXPECT_FALSE(IsSupported(static_cast<Collective>(42), Algorithm::kRing));
}

TEST(SegmentsTest, EvenSplitFirstSegmentsLonger) {
  EXPECT_EQ(SegmentOf(10, 4, 0), (ElementRange{0, 3}));
  EXPECT_EQ(SegmentOf(10, 4, 1), (ElementRange{3, 3}));
  EXPECT_EQ(SegmentOf(10, 4, 2), (ElementRange{6, 2}));
  EXPECT_EQ(SegmentOf(10, 4, 3), (ElementRange{8, 2}));
  EXPECT_EQ(SegmentOf(10, 4, -1), (ElementRange{8, 2}));  // modulo parts
  EXPECT_EQ(SegmentOf(10, 4, 5), (ElementRange{3, 3}));
  EXPECT_EQ(SegmentOf(2, 4, 3), (ElementRange{2, 0}));
  EXPECT_EQ(SegmentOf(12, 4, 2), (ElementRange{6, 3}));
  for (size_t count : {0, 1, 5, 1001}) {
    for (int parts : {1, 2, 3, 7, 8}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const ElementRange s = SegmentOf(count, parts, i);
        EXPECT_EQ(s.begin, next);
        EXPECT_LE(s.length, count / parts + 1);
        EXPECT_GE(s.length, count / parts);
        next += s.length;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(SegmentsTest, Chunks) {
  EXPECT_EQ(ChunkElements(0, DataType::kFloat32), 1u);
  EXPECT_EQ(ChunkElements(30, DataType::kFloat32), 7u);
  EXPECT_EQ(ChunkElements(30, static_cast<DataType>(77)), 0u);
  EXPECT_EQ(ChunkCount(0, 7), 0u);
  EXPECT_EQ(ChunkCount(14, 7), 2u);
  EXPECT_EQ(ChunkCount(15, 7), 3u);
  EXPECT_EQ(ChunkCount(SIZE_MAX, SIZE_MAX), 1u);
  EXPECT_EQ(ChunkOf({10, 15}, 7, 0), (ElementRange{10, 7}));
  EXPECT_EQ(ChunkOf({10, 15}, 7, 2), (ElementRange{24, 1}));
}

}  // namespace
}  // namespace baton::collective
