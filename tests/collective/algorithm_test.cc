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

// A chain cuts its buffer into kChainChunks chunks of at least 64 KiB and at most chunk_bytes.
TEST(SegmentsTest, ChainChunks) {
  constexpr size_t kMiB = size_t{1} << 20;
  constexpr size_t kFloats = kMiB / 4;  // float32 elements in 1 MiB
  // 1 MiB: 16 chunks of 64 KiB instead of one of chunk_bytes.
  EXPECT_EQ(ChainChunkElements(kMiB, kFloats, DataType::kFloat32), kFloats / 16);
  // 4 MiB: 256 KiB chunks; from 16 MiB on, chunk_bytes.
  EXPECT_EQ(ChainChunkElements(kMiB, 4 * kFloats, DataType::kFloat32), kFloats / 4);
  EXPECT_EQ(ChainChunkElements(kMiB, 16 * kFloats, DataType::kFloat32), kFloats);
  EXPECT_EQ(ChainChunkElements(kMiB, 1000 * kFloats, DataType::kFloat32), kFloats);
  // Small buffers: 64 KiB chunks, so one chunk up to 64 KiB.
  EXPECT_EQ(ChainChunkElements(kMiB, 100, DataType::kFloat32), (size_t{64} << 10) / 4);
  EXPECT_EQ(ChunkCount(100, ChainChunkElements(kMiB, 100, DataType::kFloat32)), 1u);
  // chunk_bytes below 64 KiB bounds the chunk from both sides.
  EXPECT_EQ(ChainChunkElements(100, kFloats, DataType::kFloat32), 25u);
  EXPECT_EQ(ChainChunkElements(4096, 10, DataType::kFloat64), 512u);
  // No overflow for counts whose bytes do not fit, nor for an unknown type.
  EXPECT_EQ(ChainChunkElements(kMiB, SIZE_MAX, DataType::kFloat64), kMiB / 8);
  EXPECT_EQ(ChainChunkElements(kMiB, kFloats, static_cast<DataType>(77)), 0u);
  // Two-byte elements: count / 16 of them per chunk.
  EXPECT_EQ(ChainChunkElements(kMiB, 3 * kFloats, DataType::kFloat16),
            ChunkElements(3 * kFloats / 16 * 2, DataType::kFloat16));
}

}  // namespace
}  // namespace baton::collective
