#pragma once

// One direction of a sealed connection or an authenticated one (handshake.h, Protection): its
// records, numbered from 0 in the order they are sealed, each
// sealed with AES-256-GCM (common/aead.h) under a key and nonce that follow from the direction's
// secret and the record's number alone:
//   epoch e = number / records_per_key; key_e (32 bytes) and iv_e (12 bytes) are
//     HKDF-SHA256(ikm = secret, salt = none, info = "<label>|<e>"), 44 bytes, where the label
//     is "baton-record-v1" for encrypted records and "baton-gmac-v1" for records in the clear;
//   the record's nonce is iv_e XOR the number, big-endian in its last 8 bytes (as TLS 1.3).
// A record in the clear (Payload::kClear) is GMAC: AES-GCM with no plaintext, whose associated
// data is the record's associated data followed by its payload, which stays as it was. Its own
// label keeps its keys apart from an encrypted record's even under one secret, so that no
// (key, nonce) ever serves both.
// So both ends change keys together without a message, no nonce repeats under a key, and a
// record that is dropped, replayed or moved does not open. A fresh key every kRecordsPerKey
// records (256 GiB of full records) keeps the data sealed under one key far below AES-GCM's
// limits (about 2^-61 advantage at 2^34 blocks).
//
// "Sealing" below means computing a record's tag (and encrypting its payload, unless in the
// clear); "opening", checking it (and decrypting).
//
// Each side of a connection seals with one RecordCipher and opens with another, whose secrets
// come from the handshake (handshake.h, DeriveSessionSecrets); a secret must never seal in two
// RecordCiphers. Not thread-safe: a connection's sender (or reader) uses its cipher alone.
// Transport-neutral (target baton_transport_auth): how records sit in a transport's messages is
// the transport's (TCP: transport/tcp/frame.h).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "common/aead.h"

namespace baton::transport {

using RecordSecret = std::array<std::byte, 32>;

class RecordCipher {
 public:
  static constexpr uint64_t kRecordsPerKey = uint64_t{1} << 20;
  using Mode = Aes256Gcm::Mode;
  // What a record does to its payload: encrypts and authenticates it (a sealed connection), or
  // authenticates it and leaves it in the clear (an authenticated connection).
  enum class Payload { kEncrypted, kClear };

  // Internal if libcrypto cannot set up a context. `records_per_key`: tests make it small.
  static absl::StatusOr<RecordCipher> Create(const RecordSecret& secret, Mode mode,
                                             uint64_t records_per_key = kRecordsPerKey,
                                             Payload payload = Payload::kEncrypted);

  // Starts the next record, authenticating `associated` with it (not encrypted).
  void Begin(std::span<const std::byte> associated);
  // Seals or opens the record's next in.size() bytes into `out` (as many; may be in.data()). In
  // the clear, `out` gets the bytes as they are (nothing is written when it is in.data()).
  void Update(std::span<const std::byte> in, std::byte* out);
  // Payload::kClear only: the record's next in.size() bytes, authenticated where they lie.
  void Authenticate(std::span<const std::byte> in) { gcm_.Authenticate(in); }
  // Ends the record: its tag (seal), or whether `tag` is its tag (open). A record that does not
  // open leaves the stream unusable: the caller drops the connection.
  absl::StatusOr<AeadTag> Seal() { return gcm_.Seal(); }
  bool Open(const AeadTag& tag) { return gcm_.Open(tag); }

  // Records begun so far.
  uint64_t records() const { return next_; }
  // Payload::kEncrypted: whether the payload is secret.
  bool encrypts() const { return payload_ == Payload::kEncrypted; }

 private:
  RecordCipher(const RecordSecret& secret, Aes256Gcm gcm, uint64_t records_per_key, Payload payload)
      : secret_(secret),
        gcm_(std::move(gcm)),
        records_per_key_(records_per_key),
        payload_(payload) {}
  // key_e and iv_e of `epoch`.
  void EnterEpoch(uint64_t epoch);

  RecordSecret secret_;
  Aes256Gcm gcm_;
  uint64_t records_per_key_;
  Payload payload_;
  AeadNonce iv_{};
  uint64_t next_ = 0;  // the number of the next record
};

}  // namespace baton::transport
