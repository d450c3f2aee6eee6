#pragma once

// AES-256-GCM (libcrypto): authenticated encryption of the data plane's sealed connections, and
// GMAC (AES-GCM over associated data alone) of its authenticated ones
// (transport/auth/record_cipher.h builds its numbered records on it).

#include <array>
#include <cstddef>
#include <memory>
#include <span>

#include "absl/status/statusor.h"

namespace baton {

inline constexpr size_t kAeadKeyBytes = 32;
inline constexpr size_t kAeadNonceBytes = 12;
inline constexpr size_t kAeadTagBytes = 16;
using AeadKey = std::array<std::byte, kAeadKeyBytes>;
using AeadNonce = std::array<std::byte, kAeadNonceBytes>;
using AeadTag = std::array<std::byte, kAeadTagBytes>;

// One AES-256-GCM context that either seals or opens, one message at a time: Begin (the nonce,
// then the associated data, which is authenticated but not encrypted), Authenticate as often as
// the caller likes over more associated data, Update as often as the caller likes over the
// message's bytes in order (in place or not), then Seal or Open. A message of associated data
// alone is GMAC: its tag authenticates bytes that stay in the clear. A key must never seal two
// messages under one nonce. Not thread-safe.
class Aes256Gcm {
 public:
  enum class Mode { kSeal, kOpen };
  // Internal if libcrypto cannot set up the context (out of memory).
  static absl::StatusOr<Aes256Gcm> Create(const AeadKey& key, Mode mode);

  Aes256Gcm(Aes256Gcm&&) noexcept;
  Aes256Gcm& operator=(Aes256Gcm&&) noexcept;
  ~Aes256Gcm();

  // Replaces the key (for the messages begun from now on).
  void Rekey(const AeadKey& key);
  // Starts a message.
  void Begin(const AeadNonce& nonce, std::span<const std::byte> associated);
  // Authenticates `data` as the message's next associated data; only before its first Update.
  void Authenticate(std::span<const std::byte> data);
  // Seals or opens the message's next in.size() bytes into `out`, which holds as many and may
  // be in.data().
  void Update(std::span<const std::byte> in, std::byte* out);
  // Seal mode: ends the message and returns its tag. Internal if libcrypto failed anywhere in it.
  absl::StatusOr<AeadTag> Seal();
  // Open mode: ends the message; whether `tag` is its tag (false too if libcrypto failed). When
  // false, what Update wrote is not what was sealed and must not be used.
  bool Open(const AeadTag& tag);

 private:
  struct Context;
  Aes256Gcm(std::unique_ptr<Context> context, Mode mode);

  std::unique_ptr<Context> context_;
  Mode mode_;
  bool key_failed_ = false;  // the last Rekey failed: every message fails until the next works
  bool failed_ = false;      // a libcrypto call failed since Begin
};

}  // namespace baton
