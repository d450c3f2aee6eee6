#pragma once

// HMAC-SHA256 (libcrypto), for keyed proofs between daemons (abort notices, the data-plane
// handshake), and HKDF-SHA256 on it, for the keys of sealed data connections.

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "absl/strings/string_view.h"

namespace baton {

inline constexpr size_t kHmacBytes = 32;
using Hmac = std::array<std::byte, kHmacBytes>;

// HMAC-SHA256 of `message` keyed with `key`.
Hmac HmacSha256(std::span<const std::byte> key, absl::string_view message);

// Whether two digests are equal, in time independent of where they differ.
bool HmacEquals(const Hmac& a, const Hmac& b);

// HKDF-SHA256 (RFC 5869): fills `out` (at most 255 * 32 bytes) with key material extracted from
// `ikm` with `salt` and expanded for `info`.
void HkdfSha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                absl::string_view info, std::span<std::byte> out);

// 64 lowercase hex digits.
std::string HmacHex(const Hmac& digest);

}  // namespace baton
