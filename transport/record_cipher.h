#pragma once

// One direction of a sealed connection (frame.h, kFrameFlagSealed): its records, numbered from 0
// in the order they are sealed, each sealed with AES-256-GCM (common/aead.h) under a key and
// nonce that follow from the direction's secret and the record's number alone:
//   epoch e = number / records_per_key; key_e (32 bytes) and iv_e (12 bytes) are
//     HKDF-SHA256(ikm = secret, salt = none, info = "baton-record-v1|<e>"), 44 bytes;
//   the record's nonce is iv_e XOR the number, big-endian in its last 8 bytes (as TLS 1.3).
// So both ends change keys together without a message, no nonce repeats under a key, and a
// record that is dropped, replayed or moved does not open. A fresh key every kRecordsPerKey
// records (256 GiB of full records) keeps the data sealed under one key far below AES-GCM's
// limits (about 2^-61 advantage at 2^34 blocks).
//
// Each side of a connection seals with one RecordCipher and opens with another, whose secrets
// come from the handshake (handshake.h, DeriveSessionSecrets); a secret must never seal in two
// RecordCiphers. Not thread-safe: a connection's sender (or reader) uses its cipher alone.

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "common/aead.h"

namespace baton::transport {

using RecordSecret = std::array<std::byte, 32>;

class RecordCipher {
 public:
  static constexpr uint64_t kRecordsPerKey = uint64_t{1} << 20;
  using Mode = Aes256Gcm::Mode;

  // Internal if libcrypto cannot set up a context. `records_per_key`: tests make it small.
  static absl::StatusOr<RecordCipher> Create(const RecordSecret& secret, Mode mode,
                                             uint64_t records_per_key = kRecordsPerKey);

  // Starts the next record, authenticating `associated` with it (not encrypted).
  void Begin(std::span<const std::byte> associated);
  // Seals or opens the record's next in.size() bytes into `out` (as many; may be in.data()).
  void Update(std::span<const std::byte> in, std::byte* out) { gcm_.Update(in, out); }
  // Ends the record: its tag (seal), or whether `tag` is its tag (open). A record that does not
  // open leaves the stream unusable: the caller drops the connection.
  absl::StatusOr<AeadTag> Seal() { return gcm_.Seal(); }
  bool Open(const AeadTag& tag) { return gcm_.Open(tag); }

  // Records begun so far.
  uint64_t records() const { return next_; }

 private:
  RecordCipher(const RecordSecret& secret, Aes256Gcm gcm, uint64_t records_per_key)
      : secret_(secret), gcm_(std::move(gcm)), records_per_key_(records_per_key) {}
  // key_e and iv_e of `epoch`.
  void EnterEpoch(uint64_t epoch);

  RecordSecret secret_;
  Aes256Gcm gcm_;
  uint64_t records_per_key_;
  AeadNonce iv_{};
  uint64_t next_ = 0;  // the number of the next record
};

}  // namespace baton::transport
