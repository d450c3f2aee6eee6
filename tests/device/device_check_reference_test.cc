// The reference of device_collectives_check: its encodings of the narrow floating-point types
// against known bit patterns, and its promise that every drawn value and every reduction of them
// is exact for every world size it supports (an inexact one aborts the process).

#include "tests/device/device_check_reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "gtest/gtest.h"

namespace baton::device_check {
namespace {

std::optional<uint64_t> Encode(baton_dtype_t type, double v) { return EncodeFloat(Info(type), v); }

TEST(DeviceCheckReferenceTest, EncodesKnownValues) {
  EXPECT_EQ(Encode(BATON_FLOAT16, 1.0), 0x3c00u);
  EXPECT_EQ(Encode(BATON_FLOAT16, -2.0), 0xc000u);
  EXPECT_EQ(Encode(BATON_FLOAT16, 65504.0), 0x7bffu);
  EXPECT_EQ(Encode(BATON_FLOAT16, std::ldexp(1.0, -24)), 0x0001u);  // the least subnormal
  EXPECT_EQ(Encode(BATON_FLOAT16, 0.0), 0x0000u);
  EXPECT_EQ(Encode(BATON_BFLOAT16, 1.0), 0x3f80u);
  EXPECT_EQ(Encode(BATON_BFLOAT16, -0.5), 0xbf00u);
  EXPECT_EQ(Encode(BATON_BFLOAT16, 256.0), 0x4380u);
  EXPECT_EQ(Encode(BATON_FP8_E4M3, 1.0), 0x38u);
  EXPECT_EQ(Encode(BATON_FP8_E4M3, -1.5), 0xbcu);
  EXPECT_EQ(Encode(BATON_FP8_E4M3, 448.0), 0x7eu);  // the largest: 0x7f is NaN
  EXPECT_EQ(Encode(BATON_FP8_E4M3, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, 1.0), 0x3cu);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, -0.75), 0xbau);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, 57344.0), 0x7bu);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, std::ldexp(1.0, -16)), 0x01u);
  EXPECT_EQ(Encode(BATON_FLOAT32, 1.0), 0x3f800000u);
  EXPECT_EQ(Encode(BATON_FLOAT64, -2.0), 0xc000000000000000u);
}

TEST(DeviceCheckReferenceTest, RefusesInexactValues) {
  EXPECT_EQ(Encode(BATON_FLOAT16, 1.0 / 3), std::nullopt);
  EXPECT_EQ(Encode(BATON_FLOAT16, 65536.0), std::nullopt);  // would be infinity
  EXPECT_EQ(Encode(BATON_BFLOAT16, 257.0), std::nullopt);
  EXPECT_EQ(Encode(BATON_FP8_E4M3, 480.0), std::nullopt);  // would be NaN
  EXPECT_EQ(Encode(BATON_FP8_E4M3, 17.0), std::nullopt);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, 9.0), std::nullopt);
  EXPECT_EQ(Encode(BATON_FP8_E5M2, 65536.0), std::nullopt);
  EXPECT_EQ(Encode(BATON_FLOAT32, 0.1), std::nullopt);
}

TEST(DeviceCheckReferenceTest, DescribesValues) {
  EXPECT_EQ(Describe(Info(BATON_FLOAT16), 0x3c00), "0x3c00 (1)");
  EXPECT_EQ(Describe(Info(BATON_FLOAT16), 0x7c00), "0x7c00 (inf)");
  EXPECT_EQ(Describe(Info(BATON_FP8_E4M3), 0x7f), "0x7f (nan)");
  EXPECT_EQ(Describe(Info(BATON_FP8_E4M3), 0x7e), "0x7e (448)");
  EXPECT_EQ(Describe(Info(BATON_INT8), 0xff), "0xff (-1)");
  EXPECT_EQ(Describe(Info(BATON_UINT8), 0xff), "0xff (255)");
}

// Every reduction case of every supported world size: making its images computes every input
// and every reduced element, and aborts on one that is not exact.
TEST(DeviceCheckReferenceTest, EveryReductionIsExactForEveryWorldSize) {
  for (int world = 1; world <= kMaxRanks; ++world) {
    for (const Case& c : Plan(world, /*large_bytes=*/64)) {
      if (!Reduces(c.check)) continue;
      const Images im = MakeImages(c, world, world - 1);
      ASSERT_EQ(im.expected.size(), im.recv.size());
    }
  }
}

TEST(DeviceCheckReferenceTest, UnwrittenBytesKeepTheirSentinel) {
  const int world = 3;
  for (const Case& c : Plan(world, 64)) {
    if (c.check == Check::kReduce || c.check == Check::kGather) {
      const int other = (c.root + 1) % world;
      EXPECT_EQ(MakeImages(c, world, other).expected, MakeImages(c, world, other).recv)
          << CheckName(c.check) << " writes nothing off the root";
    }
    if (c.check == Check::kAllToAllV && c.count > 1) {
      const Images im = MakeImages(c, world, 1);
      const size_t size = Info(c.type).size;
      for (size_t b = 0; b < im.v.recv_displs.size(); ++b) {  // the gap before each block
        const size_t gap = im.v.recv_displs[b] - 2;
        EXPECT_EQ(im.expected[gap * size], im.recv[gap * size]);
      }
    }
    if (c.check != Check::kBarrier) {  // the guard after the receive buffer
      const Images im = MakeImages(c, world, 0);
      const size_t end = im.expected.size();
      EXPECT_TRUE(std::equal(im.expected.begin() + static_cast<ptrdiff_t>(end - kGuardBytes),
                             im.expected.end(),
                             im.recv.begin() + static_cast<ptrdiff_t>(end - kGuardBytes)));
    }
  }
}

TEST(DeviceCheckReferenceTest, RanksHoldDifferentInputs) {
  for (const Case& c : Plan(4, 64)) {
    if (c.check == Check::kBarrier || c.count < 1000) continue;
    int same = 0;
    for (size_t i = 0; i < 100; ++i) same += InputBits(c, 4, 0, i) == InputBits(c, 4, 1, i);
    EXPECT_LT(same, 80) << CheckName(c.check) << " dtype " << static_cast<int>(c.type);
  }
}

}  // namespace
}  // namespace baton::device_check
