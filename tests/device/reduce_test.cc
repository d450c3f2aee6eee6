#include "device/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "device/data_type.h"
#include "device/half.h"

// The kernels are checked against references written independently of them: narrow floats are
// decoded from the format's definition with ldexp, and rounded by searching the sorted list of
// every representable value for the nearest one (ties to the even bit pattern). Nothing here
// reuses the bit tricks of device/half.h.

namespace baton::device {
namespace {

// ---- DataType and ReduceOp names ----

TEST(DataTypeTest, SizesAndNames) {
  struct Expected {
    DataType type;
    size_t size;
    absl::string_view name;
  };
  const Expected expected[] = {
      {DataType::kInt8, 1, "int8"},        {DataType::kUint8, 1, "uint8"},
      {DataType::kInt32, 4, "int32"},      {DataType::kUint32, 4, "uint32"},
      {DataType::kInt64, 8, "int64"},      {DataType::kUint64, 8, "uint64"},
      {DataType::kFloat16, 2, "float16"},  {DataType::kBfloat16, 2, "bfloat16"},
      {DataType::kFloat32, 4, "float32"},  {DataType::kFloat64, 8, "float64"},
      {DataType::kFp8E4M3, 1, "fp8_e4m3"}, {DataType::kFp8E5M2, 1, "fp8_e5m2"},
  };
  for (const Expected& e : expected) {
    EXPECT_EQ(DataTypeSize(e.type), e.size) << e.name;
    EXPECT_EQ(DataTypeName(e.type), e.name);
    EXPECT_EQ(ParseDataType(e.name), e.type);
  }
  EXPECT_EQ(ParseDataType("float"), std::nullopt);
  EXPECT_EQ(ParseDataType("Float32"), std::nullopt);
  EXPECT_EQ(ParseDataType(""), std::nullopt);
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(99)), 0u);
  EXPECT_EQ(DataTypeName(static_cast<DataType>(99)), "unknown");
}

TEST(DataTypeTest, ReduceOpNames) {
  const std::pair<ReduceOp, absl::string_view> expected[] = {{ReduceOp::kSum, "sum"},
                                                             {ReduceOp::kProd, "prod"},
                                                             {ReduceOp::kMin, "min"},
                                                             {ReduceOp::kMax, "max"},
                                                             {ReduceOp::kAvg, "avg"}};
  for (const auto& [op, name] : expected) {
    EXPECT_EQ(ReduceOpName(op), name);
    EXPECT_EQ(ParseReduceOp(name), op);
  }
  EXPECT_EQ(ParseReduceOp("mean"), std::nullopt);
  EXPECT_EQ(ParseReduceOp("SUM"), std::nullopt);
  EXPECT_EQ(ReduceOpName(static_cast<ReduceOp>(42)), "unknown");
}

// ---- Reference model of the narrow formats ----

struct NarrowFormat {
  const char* name;
  DataType type;
  int bits;  // 8 or 16
  int exp_bits;
  int man_bits;
  bool ieee;  // has infinity (all-ones exponent is inf/NaN); otherwise e4m3 FN
  uint32_t canonical_nan;
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);

  uint32_t sign_bit() const { return 1u << (bits - 1); }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t inf_bits() const { return static_cast<uint32_t>((1 << exp_bits) - 1) << man_bits; }
  // The largest finite positive pattern.
  uint32_t max_bits() const { return ieee ? inf_bits() - 1 : sign_bit() - 2; }

  bool IsNan(uint32_t p) const {
    const uint32_t abs = p & (sign_bit() - 1);
    return ieee ? abs > inf_bits() : abs == sign_bit() - 1;
  }

  // The value of pattern p by the format's definition.
  double Value(uint32_t p) const {
    const bool negative = (p & sign_bit()) != 0;
    const uint32_t abs = p & (sign_bit() - 1);
    const int exponent = static_cast<int>(abs >> man_bits);
    const uint32_t mantissa = abs & ((1u << man_bits) - 1);
    double magnitude;
    if (IsNan(p)) return std::numeric_limits<double>::quiet_NaN();
    if (ieee && abs == inf_bits()) {
      magnitude = std::numeric_limits<double>::infinity();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias() - man_bits);
    } else {
      magnitude = std::ldexp(static_cast<double>(mantissa | (1u << man_bits)),
                             exponent - bias() - man_bits);
    }
    return negative ? -magnitude : magnitude;
  }
};

// Rounds to nearest, ties to the even pattern, by searching the sorted list of every finite value;
// IEEE formats overflow to infinity (2^(emax+1) is a candidate whose even pattern wins the tie with
// the largest finite value), e4m3 saturates to 448.
class CachedRounder {
 public:
  explicit CachedRounder(const NarrowFormat& format) : format_(format) {
    for (uint32_t p = 0; p <= format.max_bits(); ++p) candidates_.push_back({format.Value(p), p});
    if (format.ieee) {
      beyond_ = std::ldexp(1.0, (1 << format.exp_bits) - 1 - format.bias());
      candidates_.push_back({beyond_, format.inf_bits()});
    }
  }
  uint32_t Round(double x) const {
    if (std::isnan(x)) return format_.canonical_nan;
    const uint32_t sign = std::signbit(x) ? format_.sign_bit() : 0;
    const double ax = std::fabs(x);
    if (format_.ieee && ax >= beyond_) return sign | format_.inf_bits();
    if (!format_.ieee && ax > format_.Value(format_.max_bits())) return sign | format_.max_bits();
    auto it = std::lower_bound(candidates_.begin(), candidates_.end(), std::make_pair(ax, 0u),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it->first == ax || it == candidates_.begin()) return sign | it->second;
    const auto below = *(it - 1);
    const double up = it->first - ax;
    const double down = ax - below.first;
    if (up < down || (up == down && (it->second & 1) == 0)) return sign | it->second;
    return sign | below.second;
  }

 private:
  const NarrowFormat& format_;
  std::vector<std::pair<double, uint32_t>> candidates_;
  double beyond_ = 0;
};

const NarrowFormat kFloat16{"float16",
                            DataType::kFloat16,
                            16,
                            5,
                            10,
                            true,
                            0x7E00,
                            [](uint32_t p) { return HalfToFloat(static_cast<uint16_t>(p)); },
                            [](float f) { return static_cast<uint32_t>(FloatToHalf(f)); }};
const NarrowFormat kBfloat16{"bfloat16",
                             DataType::kBfloat16,
                             16,
                             8,
                             7,
                             true,
                             0x7FC0,
                             [](uint32_t p) { return Bfloat16ToFloat(static_cast<uint16_t>(p)); },
                             [](float f) { return static_cast<uint32_t>(FloatToBfloat16(f)); }};
const NarrowFormat kFp8E4M3{"fp8_e4m3",
                            DataType::kFp8E4M3,
                            8,
                            4,
                            3,
                            false,
                            0x7F,
                            [](uint32_t p) { return Fp8E4M3ToFloat(static_cast<uint8_t>(p)); },
                            [](float f) { return static_cast<uint32_t>(FloatToFp8E4M3(f)); }};
const NarrowFormat kFp8E5M2{"fp8_e5m2",
                            DataType::kFp8E5M2,
                            8,
                            5,
                            2,
                            true,
                            0x7F,
                            [](uint32_t p) { return Fp8E5M2ToFloat(static_cast<uint8_t>(p)); },
                            [](float f) { return static_cast<uint32_t>(FloatToFp8E5M2(f)); }};

uint32_t RoundReference(const NarrowFormat& f, double x) {
  static const CachedRounder float16(kFloat16), bfloat16(kBfloat16), e4m3(kFp8E4M3), e5m2(kFp8E5M2);
  const CachedRounder* rounder = &float16;
  if (&f == &kBfloat16) rounder = &bfloat16;
  if (&f == &kFp8E4M3) rounder = &e4m3;
  if (&f == &kFp8E5M2) rounder = &e5m2;
  return rounder->Round(x);
}

const NarrowFormat* FormatOf(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return &kFloat16;
    case DataType::kBfloat16:
      return &kBfloat16;
    case DataType::kFp8E4M3:
      return &kFp8E4M3;
    case DataType::kFp8E5M2:
      return &kFp8E5M2;
    default:
      return nullptr;
  }
}

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- Conversions ----

class ConversionTest : public ::testing::TestWithParam<const NarrowFormat*> {};

TEST_P(ConversionTest, WideningIsExactForEveryPattern) {
  const NarrowFormat& f = *GetParam();
  for (uint32_t p = 0; p < (1u << f.bits); ++p) {
    const float got = f.decode(p);
    const double want = f.Value(p);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " pattern " << p;
    } else {
      // Bitwise, so that -0 and +0 are told apart.
      EXPECT_EQ(FloatBits(got), FloatBits(static_cast<float>(want))) << f.name << " pattern " << p;
      EXPECT_EQ(static_cast<double>(got), want) << f.name << " pattern " << p;
    }
  }
}

TEST_P(ConversionTest, RoundTripIsIdentityOnEveryValue) {
  const NarrowFormat& f = *GetParam();
  int checked = 0;
  for (uint32_t p = 0; p < (1u << f.bits); ++p) {
    if (f.IsNan(p)) continue;
    ASSERT_EQ(f.encode(f.decode(p)), p) << f.name << " pattern " << p;
    ++checked;
  }
  // Exhaustiveness: every non-NaN pattern was seen.
  const int nan_patterns = f.ieee ? 2 * ((1 << f.man_bits) - 1) : 2;
  EXPECT_EQ(checked, (1 << f.bits) - nan_patterns);
}

TEST_P(ConversionTest, NanBecomesCanonicalNan) {
  const NarrowFormat& f = *GetParam();
  for (uint32_t p = 0; p < (1u << f.bits); ++p) {
    if (!f.IsNan(p)) continue;
    EXPECT_TRUE(std::isnan(f.decode(p))) << f.name << " pattern " << p;
    EXPECT_EQ(f.encode(f.decode(p)), f.canonical_nan) << f.name << " pattern " << p;
  }
  for (uint32_t nan_bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    EXPECT_EQ(f.encode(std::bit_cast<float>(nan_bits)), f.canonical_nan) << f.name;
  }
}

TEST_P(ConversionTest, MidpointsRoundToEvenAndNeighboursToNearest) {
  const NarrowFormat& f = *GetParam();
  // Every pair of adjacent non-negative values, plus (IEEE) the largest finite value and the
  // power of two where infinity begins.
  std::vector<std::pair<double, uint32_t>> values;
  for (uint32_t p = 0; p <= f.max_bits(); ++p) values.push_back({f.Value(p), p});
  if (f.ieee) values.push_back({std::ldexp(1.0, (1 << f.exp_bits) - 1 - f.bias()), f.inf_bits()});
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const auto [low, low_bits] = values[i];
    const auto [high, high_bits] = values[i + 1];
    const double mid = (low + high) / 2;
    const auto mid_f = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(mid_f), mid) << "midpoint must be a float";
    const uint32_t even = (low_bits & 1) == 0 ? low_bits : high_bits;
    EXPECT_EQ(f.encode(mid_f), even) << f.name << " midpoint of " << low << " and " << high;
    EXPECT_EQ(f.encode(-mid_f), even | f.sign_bit()) << f.name << " -midpoint " << mid;
    EXPECT_EQ(f.encode(std::nextafter(mid_f, 0.0f)), low_bits) << f.name << " below " << mid;
    EXPECT_EQ(f.encode(std::nextafter(mid_f, INFINITY)), high_bits) << f.name << " above " << mid;
  }
}

TEST_P(ConversionTest, RandomFloatsMatchBruteForceRounding) {
  const NarrowFormat& f = *GetParam();
  std::mt19937 rng(1234);
  const auto max = static_cast<float>(f.Value(f.max_bits()));
  std::uniform_real_distribution<float> in_range(-1.5f * max, 1.5f * max);
  for (int i = 0; i < 200000; ++i) {
    // Half arbitrary bit patterns (every exponent, subnormals, inf, NaN), half values around
    // the format's range.
    const float x = (i % 2 == 0) ? std::bit_cast<float>(static_cast<uint32_t>(rng()))
                                 : in_range(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 40));
    ASSERT_EQ(f.encode(x), RoundReference(f, x))
        << f.name << " x=" << x << " bits=" << FloatBits(x);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ConversionTest,
                         ::testing::Values(&kFloat16, &kBfloat16, &kFp8E4M3, &kFp8E5M2),
                         [](const auto& info) { return std::string(info.param->name); });

TEST(ConversionBoundaryTest, Float16Boundaries) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // tie between 65504 (odd) and 2^16: infinity
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -26)), 0x8000);            // underflow keeps the sign
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie: down to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie: up to even
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0xFC00), -INFINITY);
}

TEST(ConversionBoundaryTest, Bfloat16Boundaries) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past 0x7F7F
  EXPECT_EQ(FloatToBfloat16(std::bit_cast<float>(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(FloatToBfloat16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie to even
  EXPECT_EQ(FloatToBfloat16(-INFINITY), 0xFF80);
  EXPECT_EQ(Bfloat16ToFloat(0x7F7F), std::bit_cast<float>(0x7F7F0000u));
}

TEST(ConversionBoundaryTest, Fp8E4M3SaturatesToFinite) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xFF)));
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7E);  // half an ulp above the maximum
  EXPECT_EQ(FloatToFp8E4M3(480.0f), 0x7E);  // would be the NaN pattern without saturation
  EXPECT_EQ(FloatToFp8E4M3(511.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(1e30f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(INFINITY), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(-1000.0f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(NAN), 0x7F);
  EXPECT_EQ(FloatToFp8E4M3(-NAN), 0x7F);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // tie with zero: even
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10) * 1.001f), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(-std::ldexp(1.0f, -11)), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);  // tie between 1 (even) and 1.125
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);  // tie between 1.125 and 1.25 (even)
}

TEST(ConversionBoundaryTest, Fp8E5M2OverflowsToInfinity) {
  EXPECT_EQ(Fp8E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(0x7C), INFINITY);
  EXPECT_EQ(Fp8E5M2ToFloat(0xFC), -INFINITY);
  for (uint8_t nan : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(nan))) << int{nan};
  }
  EXPECT_EQ(FloatToFp8E5M2(57344.0f), 0x7B);
  EXPECT_EQ(FloatToFp8E5M2(61439.0f), 0x7B);
  EXPECT_EQ(FloatToFp8E5M2(61440.0f), 0x7C);  // tie between 57344 (odd) and 2^16: infinity
  EXPECT_EQ(FloatToFp8E5M2(INFINITY), 0x7C);
  EXPECT_EQ(FloatToFp8E5M2(-1e9f), 0xFC);
  EXPECT_EQ(FloatToFp8E5M2(NAN), 0x7F);
  EXPECT_EQ(FloatToFp8E5M2(std::ldexp(1.0f, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(FloatToFp8E5M2(std::ldexp(1.0f, -17)), 0x00);  // tie with zero: even
}

// ---- Kernels against references ----

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(42);
  return rng;
}

// Random elements of `type`, as raw bytes. Integers and narrow floats: any bit pattern (NaN,
// infinities and signed zeros included). float32/float64: values of mixed magnitude and sign,
// with a few NaNs.
std::vector<std::byte> RandomBuffer(DataType type, size_t count) {
  std::vector<std::byte> buffer(count * DataTypeSize(type));
  auto& rng = Rng();
  for (size_t i = 0; i < count; ++i) {
    std::byte* element = buffer.data() + i * DataTypeSize(type);
    if (type == DataType::kFloat32 || type == DataType::kFloat64) {
      // |v| <= 2^20, so that a product of five stays finite in float32.
      double v = std::ldexp(static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000),
                            static_cast<int>(rng() % 30) - 20);
      if (rng() % 97 == 0) v = std::numeric_limits<double>::quiet_NaN();
      if (type == DataType::kFloat32) {
        const auto f = static_cast<float>(v);
        std::memcpy(element, &f, 4);
      } else {
        std::memcpy(element, &v, 8);
      }
    } else {
      const uint64_t bits = rng();
      std::memcpy(element, &bits, DataTypeSize(type));
    }
  }
  return buffer;
}

template <typename T>
T Element(const std::vector<std::byte>& buffer, size_t i) {
  T value;
  std::memcpy(&value, buffer.data() + i * sizeof(T), sizeof(T));
  return value;
}

uint32_t NarrowElement(const NarrowFormat& f, const std::vector<std::byte>& buffer, size_t i) {
  return f.bits == 8 ? Element<uint8_t>(buffer, i) : Element<uint16_t>(buffer, i);
}

// The reference for one operator on values already widened (narrow floats, float32, float64):
// NaN propagates through min and max; avg reduces as sum.
double ApplyReference(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case ReduceOp::kMax:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  }
  return NAN;
}

template <typename T>
T ApplyIntegerReference(ReduceOp op, T a, T b) {
  const auto ua = static_cast<uint64_t>(a);
  const auto ub = static_cast<uint64_t>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(ua + ub);
    case ReduceOp::kProd:
      return static_cast<T>(ua * ub);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

// Checks element i of `got` against the reference of folding `inputs` left to right. Narrow
// floats accumulate in float32 and round once, as documented; float32 accumulates in float32.
// For min/max, +0 and -0 compare equal and either may come out.
void ExpectElement(DataType type, ReduceOp op, const std::vector<std::byte>& got,
                   const std::vector<const std::vector<std::byte>*>& inputs, size_t i) {
  const bool minmax = op == ReduceOp::kMin || op == ReduceOp::kMax;
  auto check_float = [&](double want, double have, uint64_t want_bits, uint64_t have_bits) {
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(have))
          << DataTypeName(type) << " " << ReduceOpName(op) << " [" << i << "]";
    } else if (minmax && want == 0 && have == 0) {
    } else {
      EXPECT_EQ(have_bits, want_bits) << DataTypeName(type) << " " << ReduceOpName(op) << " [" << i
                                      << "] want " << want << " have " << have;
    }
  };
  auto check_integer = [&]<typename T>(T) {
    T want = Element<T>(*inputs[0], i);
    for (size_t s = 1; s < inputs.size(); ++s) {
      want = ApplyIntegerReference<T>(op, want, Element<T>(*inputs[s], i));
    }
    EXPECT_EQ(Element<T>(got, i), want)
        << DataTypeName(type) << " " << ReduceOpName(op) << " [" << i << "]";
  };
  if (const NarrowFormat* f = FormatOf(type)) {
    float acc = static_cast<float>(f->Value(NarrowElement(*f, *inputs[0], i)));
    for (size_t s = 1; s < inputs.size(); ++s) {
      acc = static_cast<float>(ApplyReference(op, acc, f->Value(NarrowElement(*f, *inputs[s], i))));
    }
    const uint32_t want = RoundReference(*f, acc);
    const uint32_t have = NarrowElement(*f, got, i);
    check_float(f->Value(want), f->Value(have), want, have);
    return;
  }
  switch (type) {
    case DataType::kFloat32: {
      auto acc = Element<float>(*inputs[0], i);
      for (size_t s = 1; s < inputs.size(); ++s) {
        // Exact in double, then rounded once to float: the correctly rounded float32 result.
        acc = static_cast<float>(ApplyReference(op, acc, Element<float>(*inputs[s], i)));
      }
      const auto have = Element<float>(got, i);
      check_float(acc, have, FloatBits(acc), FloatBits(have));
      return;
    }
    case DataType::kFloat64: {
      auto acc = Element<double>(*inputs[0], i);
      for (size_t s = 1; s < inputs.size(); ++s) {
        acc = ApplyReference(op, acc, Element<double>(*inputs[s], i));
      }
      const auto have = Element<double>(got, i);
      check_float(acc, have, std::bit_cast<uint64_t>(acc), std::bit_cast<uint64_t>(have));
      return;
    }
    case DataType::kInt8:
      return check_integer(int8_t{});
    case DataType::kUint8:
      return check_integer(uint8_t{});
    case DataType::kInt32:
      return check_integer(int32_t{});
    case DataType::kUint32:
      return check_integer(uint32_t{});
    case DataType::kInt64:
      return check_integer(int64_t{});
    case DataType::kUint64:
      return check_integer(uint64_t{});
    default:
      FAIL() << "unhandled type";
  }
}

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                              DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                              DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kFp8E4M3,  DataType::kFp8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kAvg};

class KernelTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {
 protected:
  DataType type() const { return std::get<0>(GetParam()); }
  ReduceOp op() const { return std::get<1>(GetParam()); }
  // Crosses ReduceMany's 1024-element blocks twice and ends in a partial one that is not a
  // multiple of any vector width.
  static constexpr size_t kCount = 2 * 1024 + 333;
};

TEST_P(KernelTest, ReduceIntoMatchesReference) {
  const auto a = RandomBuffer(type(), kCount);
  const auto b = RandomBuffer(type(), kCount);
  auto dst = a;
  ReduceInto(type(), op(), dst.data(), b.data(), kCount);
  for (size_t i = 0; i < kCount; ++i) ExpectElement(type(), op(), dst, {&a, &b}, i);
}

TEST_P(KernelTest, ReduceIntoItself) {
  const auto a = RandomBuffer(type(), kCount);
  auto dst = a;
  ReduceInto(type(), op(), dst.data(), dst.data(), kCount);
  for (size_t i = 0; i < kCount; ++i) ExpectElement(type(), op(), dst, {&a, &a}, i);
}

TEST_P(KernelTest, ReduceManyMatchesReference) {
  std::vector<std::vector<std::byte>> inputs;
  for (int s = 0; s < 5; ++s) inputs.push_back(RandomBuffer(type(), kCount));
  std::vector<const std::vector<std::byte>*> refs;
  std::vector<const void*> srcs;
  for (const auto& input : inputs) {
    refs.push_back(&input);
    srcs.push_back(input.data());
  }
  std::vector<std::byte> dst(inputs[0].size());
  ReduceMany(type(), op(), dst.data(), srcs, kCount);
  for (size_t i = 0; i < kCount; ++i) ExpectElement(type(), op(), dst, refs, i);

  // In place: the destination is one of the sources (not the first).
  auto in_place = inputs[2];
  srcs[2] = in_place.data();
  ReduceMany(type(), op(), in_place.data(), srcs, kCount);
  EXPECT_EQ(in_place, dst);

  // A single source is a copy (through the accumulation type: narrow NaNs become canonical).
  std::vector<std::byte> copy(inputs[0].size());
  ReduceMany(type(), op(), copy.data(), std::span<const void* const>(srcs).first(1), kCount);
  for (size_t i = 0; i < kCount; ++i) ExpectElement(type(), op(), copy, {&inputs[0]}, i);
}

// Two sources have their own kernels (a third buffer, or the first source as destination); each
// must agree with the reference, and with the general path (the second source as destination).
TEST_P(KernelTest, ReduceManyOfTwoMatchesReference) {
  const auto a = RandomBuffer(type(), kCount);
  const auto b = RandomBuffer(type(), kCount);
  std::vector<std::byte> distinct(a.size());
  const void* srcs[] = {a.data(), b.data()};
  ReduceMany(type(), op(), distinct.data(), srcs, kCount);
  for (size_t i = 0; i < kCount; ++i) ExpectElement(type(), op(), distinct, {&a, &b}, i);

  auto into_first = a;
  const void* first_srcs[] = {into_first.data(), b.data()};
  ReduceMany(type(), op(), into_first.data(), first_srcs, kCount);
  EXPECT_EQ(into_first, distinct);

  auto into_second = b;
  const void* second_srcs[] = {a.data(), into_second.data()};
  ReduceMany(type(), op(), into_second.data(), second_srcs, kCount);
  EXPECT_EQ(into_second, distinct);
}

TEST_P(KernelTest, ZeroCountTouchesNothing) {
  std::vector<std::byte> dst(8, std::byte{0x5A});
  const std::vector<std::byte> src(8, std::byte{0x11});
  ReduceInto(type(), op(), dst.data(), src.data(), 0);
  const void* srcs[] = {src.data()};
  ReduceMany(type(), op(), dst.data(), srcs, 0);
  DivideInPlace(type(), dst.data(), 0, 3);
  EXPECT_EQ(dst, std::vector<std::byte>(8, std::byte{0x5A}));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, KernelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         [](const auto& info) {
                           return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
                                  std::string(ReduceOpName(std::get<1>(info.param)));
                         });

// ---- Specific cases ----

template <typename T>
T Reduce2(DataType type, ReduceOp op, T a, T b) {
  ReduceInto(type, op, &a, &b, 1);
  return a;
}

TEST(ReduceTest, IntegersWrapAround) {
  constexpr auto kSum = ReduceOp::kSum;
  constexpr auto kProd = ReduceOp::kProd;
  EXPECT_EQ(Reduce2<int8_t>(DataType::kInt8, kSum, 127, 1), -128);
  EXPECT_EQ(Reduce2<int8_t>(DataType::kInt8, kSum, -128, -1), 127);
  EXPECT_EQ(Reduce2<int8_t>(DataType::kInt8, kProd, -128, -1), -128);
  EXPECT_EQ(Reduce2<int8_t>(DataType::kInt8, kProd, 16, 16), 0);
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kUint8, kSum, 200, 100), 44);
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kUint8, kProd, 255, 255), 1);
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(Reduce2<int32_t>(DataType::kInt32, kSum, kMax32, 1), kMin32);
  EXPECT_EQ(Reduce2<int32_t>(DataType::kInt32, kProd, kMin32, -1), kMin32);
  EXPECT_EQ(Reduce2<int32_t>(DataType::kInt32, kProd, 65536, 65536), 0);
  EXPECT_EQ(Reduce2<uint32_t>(DataType::kUint32, kProd, 0xFFFFFFFFu, 0xFFFFFFFFu), 1u);
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Reduce2<int64_t>(DataType::kInt64, kSum, kMax64, 1), kMin64);
  EXPECT_EQ(Reduce2<int64_t>(DataType::kInt64, kProd, kMin64, -1), kMin64);
  EXPECT_EQ(Reduce2<uint64_t>(DataType::kUint64, kSum, ~uint64_t{0}, 2), 1u);
  EXPECT_EQ(Reduce2<int32_t>(DataType::kInt32, ReduceOp::kMin, -5, 3), -5);
  EXPECT_EQ(Reduce2<uint32_t>(DataType::kUint32, ReduceOp::kMax, 0xFFFFFFFFu, 3), 0xFFFFFFFFu);
}

TEST(ReduceTest, FloatMinMaxPropagateNan) {
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_TRUE(std::isnan(Reduce2<float>(DataType::kFloat32, op, NAN, 1.0f)));
    EXPECT_TRUE(std::isnan(Reduce2<float>(DataType::kFloat32, op, 1.0f, NAN)));
    EXPECT_TRUE(std::isnan(Reduce2<double>(DataType::kFloat64, op, 1.0, NAN)));
    EXPECT_EQ(Reduce2<uint16_t>(DataType::kFloat16, op, 0x3C00, 0x7C01), 0x7E00);
    EXPECT_EQ(Reduce2<uint16_t>(DataType::kBfloat16, op, 0xFFC1, 0x3F80), 0x7FC0);
    EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E4M3, op, 0x38, 0xFF), 0x7F);
    EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E5M2, op, 0x7D, 0x3C), 0x7F);
  }
  EXPECT_EQ(Reduce2<float>(DataType::kFloat32, ReduceOp::kMin, -INFINITY, 1.0f), -INFINITY);
  EXPECT_EQ(Reduce2<float>(DataType::kFloat32, ReduceOp::kMax, -INFINITY, 1.0f), 1.0f);
}

TEST(ReduceTest, NarrowOverflow) {
  // e4m3 saturates, the IEEE-like formats overflow to infinity.
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E4M3, ReduceOp::kSum, 0x7E, 0x7E), 0x7E);
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E4M3, ReduceOp::kSum, 0xFE, 0xFE), 0xFE);
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E4M3, ReduceOp::kProd, 0x7E, 0xFE), 0xFE);
  EXPECT_EQ(Reduce2<uint8_t>(DataType::kFp8E5M2, ReduceOp::kSum, 0x7B, 0x7B), 0x7C);
  EXPECT_EQ(Reduce2<uint16_t>(DataType::kFloat16, ReduceOp::kSum, 0x7BFF, 0x7BFF), 0x7C00);
  EXPECT_EQ(Reduce2<uint16_t>(DataType::kBfloat16, ReduceOp::kProd, 0x7F7F, 0x4000), 0x7F80);
}

// Three sources whose exact sum is representable, but where rounding after each step would lose
// the two half-ulp addends (each addition is a tie that rounds back to 1).
TEST(ReduceTest, ReduceManyRoundsOnce) {
  struct Case {
    const NarrowFormat* format;
    uint32_t one;
    uint32_t half_ulp_of_one;
    uint32_t one_plus_ulp;
  };
  const Case cases[] = {
      {&kFloat16, 0x3C00, FloatToHalf(std::ldexp(1.0f, -11)), 0x3C01},
      {&kBfloat16, 0x3F80, FloatToBfloat16(std::ldexp(1.0f, -8)), 0x3F81},
      {&kFp8E4M3, 0x38, FloatToFp8E4M3(std::ldexp(1.0f, -4)), 0x39},
      {&kFp8E5M2, 0x3C, FloatToFp8E5M2(std::ldexp(1.0f, -3)), 0x3D},
  };
  for (const Case& c : cases) {
    const size_t size = c.format->bits / 8;
    std::byte one[2], half[2], dst[2];
    std::memcpy(one, &c.one, size);  // little-endian
    std::memcpy(half, &c.half_ulp_of_one, size);
    ASSERT_EQ(c.format->Value(c.half_ulp_of_one) * 2, c.format->Value(c.one_plus_ulp) - 1);

    const void* srcs[] = {one, half, half};
    ReduceMany(c.format->type, ReduceOp::kSum, dst, srcs, 1);
    uint32_t once = 0;
    std::memcpy(&once, dst, size);
    EXPECT_EQ(once, c.one_plus_ulp) << c.format->name;

    std::memcpy(dst, one, size);
    ReduceInto(c.format->type, ReduceOp::kSum, dst, half, 1);
    ReduceInto(c.format->type, ReduceOp::kSum, dst, half, 1);
    uint32_t stepwise = 0;
    std::memcpy(&stepwise, dst, size);
    EXPECT_EQ(stepwise, c.one) << c.format->name;
  }
}

TEST(ReduceTest, DivideIntegersTruncates) {
  std::vector<int32_t> i32 = {7, -7, 8, std::numeric_limits<int32_t>::min(), 0};
  DivideInPlace(DataType::kInt32, i32.data(), i32.size(), 2);
  EXPECT_EQ(i32, (std::vector<int32_t>{3, -3, 4, std::numeric_limits<int32_t>::min() / 2, 0}));
  std::vector<int8_t> i8 = {-128, 127, -7};
  DivideInPlace(DataType::kInt8, i8.data(), i8.size(), 3);
  EXPECT_EQ(i8, (std::vector<int8_t>{-42, 42, -2}));
  DivideInPlace(DataType::kInt8, i8.data(), i8.size(), 200);  // a divisor int8 cannot hold
  EXPECT_EQ(i8, (std::vector<int8_t>{0, 0, 0}));
  std::vector<uint8_t> u8 = {255, 7};
  DivideInPlace(DataType::kUint8, u8.data(), u8.size(), 300);
  EXPECT_EQ(u8, (std::vector<uint8_t>{0, 0}));
  std::vector<uint64_t> u64 = {~uint64_t{0}};
  DivideInPlace(DataType::kUint64, u64.data(), u64.size(), 3);
  EXPECT_EQ(u64[0], ~uint64_t{0} / 3);
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min()};
  DivideInPlace(DataType::kInt64, i64.data(), i64.size(), 7);
  EXPECT_EQ(i64[0], std::numeric_limits<int64_t>::min() / 7);
  std::vector<uint32_t> u32 = {0xFFFFFFFFu};
  DivideInPlace(DataType::kUint32, u32.data(), u32.size(), 1);
  EXPECT_EQ(u32[0], 0xFFFFFFFFu);
}

TEST(ReduceTest, DivideFloatsRoundsOnce) {
  std::vector<float> f32 = {1.0f, -3.0f, INFINITY};
  DivideInPlace(DataType::kFloat32, f32.data(), f32.size(), 3);
  EXPECT_EQ(f32, (std::vector<float>{1.0f / 3, -1.0f, INFINITY}));
  std::vector<double> f64 = {1.0, 1e300};
  DivideInPlace(DataType::kFloat64, f64.data(), f64.size(), 7);
  EXPECT_EQ(f64, (std::vector<double>{1.0 / 7, 1e300 / 7}));
  // Every narrow value divided by 3 and by 7 is the correctly rounded quotient.
  for (const NarrowFormat* f : {&kFloat16, &kBfloat16, &kFp8E4M3, &kFp8E5M2}) {
    for (int divisor : {3, 7}) {
      const size_t n = size_t{1} << f->bits;
      std::vector<std::byte> values(n * (f->bits / 8));
      for (uint32_t p = 0; p < n; ++p) std::memcpy(&values[p * (f->bits / 8)], &p, f->bits / 8);
      DivideInPlace(f->type, values.data(), n, divisor);
      for (uint32_t p = 0; p < n; ++p) {
        uint32_t have = 0;
        std::memcpy(&have, &values[p * (f->bits / 8)], f->bits / 8);
        ASSERT_EQ(have, RoundReference(*f, f->Value(p) / divisor))
            << f->name << " pattern " << p << " / " << divisor;
      }
    }
  }
}

}  // namespace
}  // namespace baton::device
