#pragma once

// CRC32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF),
// the checksum of the TCP transport's data frames that carry one (frame.h, kFrameFlagChecksum). It
// detects the corruption a network or a NIC may cause and TCP's 16-bit checksum misses; it is not a
// MAC, so it proves nothing against someone who rewrites a frame on purpose.

#include <cstddef>
#include <cstdint>
#include <span>

namespace baton::transport {

// Extends `crc`, the CRC32C of some bytes (0 for none), by `data`: the CRC32C of those bytes
// followed by `data`. So Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b), and
// Crc32c(0, "123456789") == 0xE3069283. Uses the SSE4.2 crc32 instruction where the CPU has it
// (Crc32cHasHardware), else tables. Thread-safe; any alignment and length.
uint32_t Crc32c(uint32_t crc, std::span<const std::byte> data);

// The two implementations Crc32c chooses between, for tests and benchmarks. Crc32cHardware is
// only valid where Crc32cHasHardware() (x86-64 with SSE4.2); elsewhere it is Crc32cPortable.
bool Crc32cHasHardware();
uint32_t Crc32cHardware(uint32_t crc, std::span<const std::byte> data);
uint32_t Crc32cPortable(uint32_t crc, std::span<const std::byte> data);

}  // namespace baton::transport
