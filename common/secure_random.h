#pragma once

// Unpredictable bytes from the kernel (getrandom), for credentials: session tokens, communicator
// secrets.

#include <cstddef>
#include <cstdint>
#include <string>

namespace baton {

// Fills `bytes` bytes at `out`; aborts the process if the kernel cannot (it blocks only until the
// kernel's pool is first initialised, early at boot).
void SecureRandomBytes(void* out, size_t bytes);

// `bytes` random bytes as 2 * bytes lowercase hex digits.
std::string SecureRandomHex(size_t bytes);

// Whether two strings are equal, in time that depends only on their lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace baton
