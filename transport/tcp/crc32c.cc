#include "transport/tcp/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace baton::transport {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli's, bit-reflected

// Byte by byte, so that the tables work whatever the host's byte order.
uint32_t Load32LittleEndian(const std::byte* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Slicing-by-8 (Intel's, as zlib and leveldb use it): table[k][b] is the CRC register after byte
// b followed by k zero bytes, so eight bytes cost eight lookups and no bit loop.
struct PortableTables {
  std::array<std::array<uint32_t, 256>, 8> table{};
};

constexpr PortableTables MakePortableTables() {
  PortableTables tables;
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t crc = n;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1)));
    tables.table[0][n] = crc;
  }
  for (uint32_t n = 0; n < 256; ++n) {
    for (size_t k = 1; k < 8; ++k) {
      const uint32_t previous = tables.table[k - 1][n];
      tables.table[k][n] = (previous >> 8) ^ tables.table[0][previous & 0xff];
    }
  }
  return tables;
}

constexpr PortableTables kPortable = MakePortableTables();

uint32_t PortableExtend(uint32_t crc, const std::byte* p, size_t n) {
  const auto& t = kPortable.table;
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = Load32LittleEndian(p) ^ c;
    const uint32_t hi = Load32LittleEndian(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ static_cast<uint32_t>(*p)) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__)

// The crc32 instruction takes 3 cycles but a new one can start every cycle, so one dependent
// chain runs at a third of its speed. As Mark Adler's crc32c.c does, the hardware path runs three
// chains over three adjacent blocks at once, then joins them: the register after blocks A and B
// is Shift(register after A, |B| zero bytes) ^ (register of B alone, started from 0), CRCs being
// linear over GF(2). The shift is a 32x32 bit matrix, applied through four 256-entry tables.
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

using Gf2Matrix = std::array<uint32_t, 32>;

constexpr uint32_t Gf2Times(const Gf2Matrix& matrix, uint32_t vector) {
  uint32_t sum = 0;
  for (size_t i = 0; vector != 0; ++i, vector >>= 1) {
    if ((vector & 1) != 0) sum ^= matrix[i];
  }
  return sum;
}

constexpr Gf2Matrix Gf2Square(const Gf2Matrix& matrix) {
  Gf2Matrix square{};
  for (size_t n = 0; n < 32; ++n) square[n] = Gf2Times(matrix, matrix[n]);
  return square;
}

// The operator that feeds `bytes` (a power of two) zero bytes through a CRC register.
constexpr Gf2Matrix ZeroBytesOperator(size_t bytes) {
  Gf2Matrix op{};  // one zero bit
  op[0] = kPolynomial;
  for (size_t n = 1; n < 32; ++n) op[n] = uint32_t{1} << (n - 1);
  for (int doubling = 0; doubling < 3; ++doubling) op = Gf2Square(op);  // 8 bits: one byte
  for (size_t b = bytes; b > 1; b >>= 1) op = Gf2Square(op);
  return op;
}

struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> table{};
};

constexpr ShiftTable MakeShiftTable(size_t bytes) {
  const Gf2Matrix op = ZeroBytesOperator(bytes);
  ShiftTable shift;
  for (uint32_t n = 0; n < 256; ++n) {
    for (size_t k = 0; k < 4; ++k) shift.table[k][n] = Gf2Times(op, n << (8 * k));
  }
  return shift;
}

constexpr ShiftTable kShiftLong = MakeShiftTable(kLongBlock);
constexpr ShiftTable kShiftShort = MakeShiftTable(kShortBlock);

uint32_t Shift(const ShiftTable& shift, uint32_t crc) {
  const auto& t = shift.table;
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

uint64_t Load64(const std::byte* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));  // the instruction wants the bytes in memory order
  return word;
}

// Runs of three blocks of kBlock bytes, three chains at once (see above).
template <size_t kBlock>
__attribute__((target("sse4.2"))) uint64_t ThreeBlocks(uint64_t crc0, const ShiftTable& shift,
                                                       const std::byte*& p, size_t& n) {
  for (; n >= 3 * kBlock; p += 3 * kBlock, n -= 3 * kBlock) {
    uint64_t crc1 = 0;
    uint64_t crc2 = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      crc0 = _mm_crc32_u64(crc0, Load64(p + i));
      crc1 = _mm_crc32_u64(crc1, Load64(p + kBlock + i));
      crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * kBlock + i));
    }
    crc0 = Shift(shift, static_cast<uint32_t>(crc0)) ^ crc1;
    crc0 = Shift(shift, static_cast<uint32_t>(crc0)) ^ crc2;
  }
  return crc0;
}

__attribute__((target("sse4.2"))) uint32_t Sse42Extend(uint32_t crc, const std::byte* p, size_t n) {
  uint64_t crc0 = ~crc;
  // Up to seven bytes to reach an 8-byte boundary, so the word loads below are aligned.
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; ++p, --n) {
    crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), static_cast<uint8_t>(*p));
  }
  crc0 = ThreeBlocks<kLongBlock>(crc0, kShiftLong, p, n);
  crc0 = ThreeBlocks<kShortBlock>(crc0, kShiftShort, p, n);
  for (; n >= 8; p += 8, n -= 8) crc0 = _mm_crc32_u64(crc0, Load64(p));
  for (; n > 0; ++p, --n) {
    crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), static_cast<uint8_t>(*p));
  }
  return ~static_cast<uint32_t>(crc0);
}

#endif  // __x86_64__

}  // namespace

bool Crc32cHasHardware() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

uint32_t Crc32cHardware(uint32_t crc, std::span<const std::byte> data) {
#if defined(__x86_64__)
  return Sse42Extend(crc, data.data(), data.size());
#else
  return PortableExtend(crc, data.data(), data.size());
#endif
}

uint32_t Crc32cPortable(uint32_t crc, std::span<const std::byte> data) {
  return PortableExtend(crc, data.data(), data.size());
}

uint32_t Crc32c(uint32_t crc, std::span<const std::byte> data) {
  return Crc32cHasHardware() ? Crc32cHardware(crc, data) : Crc32cPortable(crc, data);
}

}  // namespace baton::transport
