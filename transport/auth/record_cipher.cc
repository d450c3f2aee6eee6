#include "transport/auth/record_cipher.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/status_macros.h"

namespace baton::transport {

absl::StatusOr<RecordCipher> RecordCipher::Create(const RecordSecret& secret, Mode mode,
                                                  uint64_t records_per_key, Payload payload) {
  if (records_per_key == 0) return absl::InvalidArgumentError("records_per_key must be positive");
  // The key is set for epoch 0 before the first record, below.
  BATON_ASSIGN_OR_RETURN(Aes256Gcm gcm, Aes256Gcm::Create(AeadKey{}, mode));
  RecordCipher cipher(secret, std::move(gcm), records_per_key, payload);
  cipher.EnterEpoch(0);
  return cipher;
}

void RecordCipher::EnterEpoch(uint64_t epoch) {
  std::array<std::byte, kAeadKeyBytes + kAeadNonceBytes> material;
  const absl::string_view label = encrypts() ? "baton-record-v1|" : "baton-gmac-v1|";
  HkdfSha256(secret_, {}, absl::StrCat(label, epoch), material);
  AeadKey key;
  std::copy_n(material.begin(), kAeadKeyBytes, key.begin());
  std::copy_n(material.begin() + kAeadKeyBytes, kAeadNonceBytes, iv_.begin());
  gcm_.Rekey(key);
}

void RecordCipher::Begin(std::span<const std::byte> associated) {
  const uint64_t number = next_++;
  if (number != 0 && number % records_per_key_ == 0) EnterEpoch(number / records_per_key_);
  AeadNonce nonce = iv_;
  for (size_t i = 0; i < 8; ++i) {
    nonce[kAeadNonceBytes - 1 - i] ^= static_cast<std::byte>(number >> (8 * i));
  }
  gcm_.Begin(nonce, associated);
}

void RecordCipher::Update(std::span<const std::byte> in, std::byte* out) {
  if (encrypts()) {
    gcm_.Update(in, out);
    return;
  }
  // GMAC: the payload is more associated data, hashed where it lies (on the receiving side, in
  // the receiver's buffer, which a record that does not open then fails).
  gcm_.Authenticate(in);
  if (out != in.data() && !in.empty()) std::memmove(out, in.data(), in.size());
}

}  // namespace baton::transport
