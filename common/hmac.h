#pragma once

// HMAC-SHA256 (libcrypto), for keyed proofs between daemons: abort notices, the data-plane
// handshake.

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

// 64 lowercase hex digits.
std::string HmacHex(const Hmac& digest);

}  // namespace baton
