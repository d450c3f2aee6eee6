#pragma once

// Conversions between float32 and the narrow floating-point formats that collectives carry:
// IEEE binary16 (float16), bfloat16, and the two OCP 8-bit formats fp8 e4m3 ("FN": no infinities)
// and fp8 e5m2. Each narrow value is handled as its raw bit pattern.
//
// Widening (narrow -> float32) is exact for every value. NaN stays NaN (payload kept where float32
// can hold it).
//
// Narrowing (float32 -> narrow) rounds to nearest, ties to even, exactly once, as the hardware
// conversions do (F16C's VCVTPS2PH, PTX cvt.rn):
//   - float16, bfloat16 and fp8 e5m2 follow IEEE 754: values that round beyond the largest finite
//     value become +/-infinity, infinities stay infinities. This matches NVIDIA's
//     __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2) for e5m2.
//   - fp8 e4m3 has no infinity. We follow NVIDIA's __nv_fp8_e4m3 conversion with __NV_SATFINITE:
//     every value above the largest finite one (448), infinities included, saturates to +/-448.
//     (Without saturation such values would become NaN, turning a large gradient sum into NaN.)
//   - NaN becomes the format's canonical positive quiet NaN: 0x7E00 (float16), 0x7FC0 (bfloat16),
//     0x7F (both fp8 formats, as NVIDIA's conversion produces). Sign and payload are dropped.
//   - Values below half the smallest subnormal become zero of the same sign.
// All of this assumes the default floating-point environment (round to nearest, no flush of
// subnormals to zero), which is what our build uses.
//
// The functions are constexpr and branch-light so that loops over them vectorise.

#include <array>
#include <bit>
#include <cstdint>

namespace baton::device {
namespace half_internal {

constexpr float Pow2(int exponent) {  // for -126 <= exponent <= 127
  return std::bit_cast<float>(static_cast<uint32_t>(127 + exponent) << 23);
}

// Rounds the magnitude `abs_bits` (float32 bits, sign clear) to a binary format with kExpBits
// exponent bits, kManBits mantissa bits and IEEE bias, ties to even, and returns the narrow
// magnitude's bits. Only meaningful below the format's overflow threshold; results that carry
// past the largest exponent come out as the next exponent with mantissa 0, and callers replace
// them (and NaN) afterwards.
template <int kExpBits, int kManBits>
constexpr uint32_t RoundMagnitude(uint32_t abs_bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kShift = 23 - kManBits;
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 - kBias + 1) << 23;
  // Subnormal or zero in the target: adding a power of two whose float32 ulp equals the target's
  // smallest subnormal makes the FPU round (ties to even) at exactly that position; the low bits
  // of the sum are then the subnormal's mantissa.
  constexpr uint32_t kMagicBits = static_cast<uint32_t>(127 - kBias + kShift + 1) << 23;
  const float sum = std::bit_cast<float>(abs_bits) + std::bit_cast<float>(kMagicBits);
  const uint32_t subnormal = std::bit_cast<uint32_t>(sum) - kMagicBits;
  // Normal: rebias the exponent and add just under half an ulp, plus one when the kept mantissa
  // is odd, so that ties go to even. A carry out of the mantissa correctly bumps the exponent.
  const uint32_t odd = (abs_bits >> kShift) & 1u;
  const uint32_t normal =
      (abs_bits + (static_cast<uint32_t>(kBias - 127) << 23) + ((1u << (kShift - 1)) - 1u) + odd) >>
      kShift;
  // Both computed, one selected: no branch, so that loops over conversions vectorise.
  return abs_bits < kMinNormalBits ? subnormal : normal;
}

// The value of a finite narrow magnitude `abs` (sign clear) of a format with IEEE bias.
template <int kExpBits, int kManBits>
constexpr float DecodeMagnitude(uint32_t abs) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  // Zero or subnormal: abs units of the smallest subnormal (exact).
  const float subnormal =
      static_cast<float>(static_cast<int32_t>(abs)) * Pow2(1 - kBias - kManBits);
  const uint32_t normal = (abs << (23 - kManBits)) + (static_cast<uint32_t>(127 - kBias) << 23);
  return abs < (1u << kManBits) ? subnormal : std::bit_cast<float>(normal);
}

constexpr float WithSign(float magnitude, uint32_t sign_bit) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | (sign_bit << 31));
}

}  // namespace half_internal

// ---- float16 (IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits; max 65504) ----

constexpr float HalfToFloat(uint16_t h) {
  const uint32_t abs = h & 0x7FFFu;
  const uint32_t sign = static_cast<uint32_t>(h) >> 15;
  // Infinity and NaN: all-ones exponent, mantissa (NaN payload) kept.
  const float special = std::bit_cast<float>(0x7F800000u | ((abs & 0x3FFu) << 13));
  const float magnitude = abs >= 0x7C00u ? special : half_internal::DecodeMagnitude<5, 10>(abs);
  return half_internal::WithSign(magnitude, sign);
}

constexpr uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  // [65520, 65536) rounds up into the infinity encoding through the exponent carry; from 65536
  // (2^16) on, and for infinity, the rounding arithmetic no longer applies.
  uint32_t result = abs >= 0x47800000u ? 0x7C00u : half_internal::RoundMagnitude<5, 10>(abs);
  result |= sign;
  return static_cast<uint16_t>(abs > 0x7F800000u ? 0x7E00u : result);
}

// ---- bfloat16 (1 sign, 8 exponent, 7 mantissa bits: the top half of a float32) ----

constexpr float Bfloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

constexpr uint16_t FloatToBfloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // Same exponent as float32, so rounding is on the raw bits for every class (subnormals
  // included); overflow carries into the infinity encoding.
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// ---- fp8 e5m2 (1 sign, 5 exponent, 2 mantissa bits; max 57344; has inf and NaN) ----

constexpr float Fp8E5M2ToFloat(uint8_t v) {
  return HalfToFloat(static_cast<uint16_t>(static_cast<uint32_t>(v) << 8));
}

constexpr uint8_t FloatToFp8E5M2(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  // [61440, 65536) rounds up into the infinity encoding through the exponent carry.
  uint32_t result = abs >= 0x47800000u ? 0x7Cu : half_internal::RoundMagnitude<5, 2>(abs);
  result |= sign;
  return static_cast<uint8_t>(abs > 0x7F800000u ? 0x7Fu : result);
}

// ---- fp8 e4m3 FN (1 sign, 4 exponent, 3 mantissa bits; max 448; no inf; 0x7F/0xFF are NaN) ----

constexpr float Fp8E4M3ToFloat(uint8_t v) {
  const uint32_t abs = v & 0x7Fu;
  const uint32_t sign = static_cast<uint32_t>(v) >> 7;
  // Exponent 15 holds normal values; only mantissa 111 there is NaN.
  const float magnitude =
      abs == 0x7Fu ? std::bit_cast<float>(0x7FC00000u) : half_internal::DecodeMagnitude<4, 3>(abs);
  return half_internal::WithSign(magnitude, sign);
}

constexpr uint8_t FloatToFp8E4M3(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  // Everything that rounds above 448 (0x7E) -- the NaN slot 0x7F, exponent carries, and the
  // meaningless results for huge inputs and infinity -- saturates to 448.
  const uint32_t rounded = half_internal::RoundMagnitude<4, 3>(abs);
  const uint32_t result = (rounded < 0x7Eu ? rounded : 0x7Eu) | sign;
  return static_cast<uint8_t>(abs > 0x7F800000u ? 0x7Fu : result);
}

// Widening tables for the 8-bit formats (a load is one lookup).
inline constexpr std::array<float, 256> kFp8E4M3Values = [] {
  std::array<float, 256> values{};
  for (int i = 0; i < 256; ++i) values[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
  return values;
}();
inline constexpr std::array<float, 256> kFp8E5M2Values = [] {
  std::array<float, 256> values{};
  for (int i = 0; i < 256; ++i) values[i] = Fp8E5M2ToFloat(static_cast<uint8_t>(i));
  return values;
}();

}  // namespace baton::device
