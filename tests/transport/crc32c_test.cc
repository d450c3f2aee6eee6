#include "transport/tcp/crc32c.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace baton::transport {
namespace {

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// The definition, one bit at a time: what both implementations must agree with.
uint32_t BitwiseCrc32c(uint32_t crc, std::span<const std::byte> data) {
  uint32_t c = ~crc;
  for (const std::byte b : data) {
    c ^= static_cast<uint32_t>(b);
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}

struct Implementation {
  const char* name;
  uint32_t (*crc)(uint32_t, std::span<const std::byte>);
};

// The implementations this CPU can run: the hardware one only where it exists.
std::vector<Implementation> Implementations() {
  std::vector<Implementation> all = {{"Crc32c", &Crc32c}, {"portable", &Crc32cPortable}};
  if (Crc32cHasHardware()) all.push_back({"hardware", &Crc32cHardware});
  return all;
}

std::vector<std::byte> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random() & 0xff);
  return bytes;
}

// The check value of the CRC catalogue, RFC 3720's iSCSI vectors (B.4), and no bytes at all.
TEST(Crc32cTest, MatchesKnownVectors) {
  std::array<std::byte, 32> zeros{};
  std::array<std::byte, 32> ones{};
  std::array<std::byte, 32> ascending{};
  std::array<std::byte, 32> descending{};
  for (size_t i = 0; i < 32; ++i) {
    ones[i] = std::byte{0xff};
    ascending[i] = static_cast<std::byte>(i);
    descending[i] = static_cast<std::byte>(31 - i);
  }
  for (const Implementation& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.crc(0, Bytes("123456789")), 0xE3069283u);
    EXPECT_EQ(impl.crc(0, zeros), 0x8A9136AAu);
    EXPECT_EQ(impl.crc(0, ones), 0x62A8AB43u);
    EXPECT_EQ(impl.crc(0, ascending), 0x46DD794Eu);
    EXPECT_EQ(impl.crc(0, descending), 0x113FDB5Cu);
    EXPECT_EQ(impl.crc(0, {}), 0u);
    EXPECT_EQ(impl.crc(0x12345678, {}), 0x12345678u) << "no bytes leave a CRC as it is";
  }
}

// A CRC extended piece by piece, cut anywhere, is the CRC of the whole.
TEST(Crc32cTest, IncrementalEqualsOneShot) {
  const std::vector<std::byte> data = RandomBytes(100000, 1);
  for (const Implementation& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    const uint32_t whole = impl.crc(0, data);
    EXPECT_EQ(whole, BitwiseCrc32c(0, data));
    for (const size_t piece : {size_t{1}, size_t{7}, size_t{256}, size_t{4099}, size_t{24577}}) {
      uint32_t crc = 0;
      for (size_t offset = 0; offset < data.size(); offset += piece) {
        crc = impl.crc(crc, std::span(data).subspan(offset, std::min(piece, data.size() - offset)));
      }
      EXPECT_EQ(crc, whole) << "pieces of " << piece;
    }
  }
}

// Every length from 0 to a few blocks, at every alignment, and lengths that take each path of
// the hardware one (three blocks of 8 KiB, of 256 bytes, words, bytes): all agree with the
// definition.
TEST(Crc32cTest, ImplementationsAgreeOnAnyLengthAndAlignment) {
  const std::vector<std::byte> data = RandomBytes(3 * 3 * 8192 + 1000, 2);
  std::vector<size_t> lengths;
  for (size_t length = 0; length <= 1024; ++length) lengths.push_back(length);
  for (const size_t length :
       {3 * 8192 - 1, 3 * 8192, 3 * 8192 + 3 * 256 + 13, 2 * 3 * 8192 + 777, 3 * 3 * 8192 + 5}) {
    lengths.push_back(length);
  }
  const std::vector<Implementation> impls = Implementations();
  for (const size_t length : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const std::span<const std::byte> piece = std::span(data).subspan(offset, length);
      const uint32_t seed = static_cast<uint32_t>(length * 2654435761u);
      const uint32_t expected = BitwiseCrc32c(seed, piece);
      for (const Implementation& impl : impls) {
        ASSERT_EQ(impl.crc(seed, piece), expected)
            << impl.name << ", length " << length << ", offset " << offset;
      }
    }
  }
}

// A single flipped bit anywhere changes the CRC (as any CRC guarantees for one error burst).
TEST(Crc32cTest, DetectsAFlippedBit) {
  std::vector<std::byte> data = RandomBytes(70000, 3);
  const uint32_t good = Crc32c(0, data);
  for (const size_t at : {size_t{0}, size_t{8191}, size_t{30000}, data.size() - 1}) {
    data[at] ^= std::byte{0x10};
    EXPECT_NE(Crc32c(0, data), good) << "byte " << at;
    data[at] ^= std::byte{0x10};
  }
  EXPECT_EQ(Crc32c(0, data), good);
}

#if defined(__x86_64__)
// Every x86-64 server CPU of the last fifteen years has SSE4.2; the dispatch must find it.
TEST(Crc32cTest, UsesTheHardwareWhereTheCpuHasIt) {
  EXPECT_EQ(Crc32cHasHardware(), __builtin_cpu_supports("sse4.2") != 0);
}
#endif

}  // namespace
}  // namespace baton::transport
