#include "common/secure_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "spdlog/spdlog.h"

namespace baton {

void SecureRandomBytes(void* out, size_t bytes) {
  auto* at = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    const ssize_t got = getrandom(at, bytes, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("getrandom failed (errno {}): no secure randomness", errno);
      std::abort();
    }
    at += got;
    bytes -= static_cast<size_t>(got);
  }
}

std::string SecureRandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  SecureRandomBytes(raw.data(), raw.size());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char b : raw) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

}  // namespace baton
