#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace baton {

Hmac HmacSha256(std::span<const std::byte> key, absl::string_view message) {
  Hmac digest{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(digest.data()), &length);
  return digest;
}

void HkdfSha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                absl::string_view info, std::span<std::byte> out) {
  constexpr size_t kMaxBlocks = 255;
  if (out.size() > kMaxBlocks * kHmacBytes) std::abort();  // a caller's bug, not input
  const Hmac prk =
      HmacSha256(salt, absl::string_view(reinterpret_cast<const char*>(ikm.data()), ikm.size()));
  std::string block;  // T(i-1) | info | i
  Hmac t{};
  for (size_t i = 1, done = 0; done < out.size(); ++i) {
    block.clear();
    if (i > 1) block.append(reinterpret_cast<const char*>(t.data()), t.size());
    block.append(info.data(), info.size());
    block.push_back(static_cast<char>(i));
    t = HmacSha256(prk, block);
    const size_t n = std::min(kHmacBytes, out.size() - done);
    std::copy_n(t.begin(), n, out.begin() + static_cast<std::ptrdiff_t>(done));
    done += n;
  }
}

bool HmacEquals(const Hmac& a, const Hmac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string HmacHex(const Hmac& digest) {
  std::string hex;
  hex.reserve(2 * digest.size());
  for (std::byte b : digest) absl::StrAppendFormat(&hex, "%02x", static_cast<unsigned>(b));
  return hex;
}

}  // namespace baton
