#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

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
