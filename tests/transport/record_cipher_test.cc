// The numbered records of a sealed connection's direction (transport/record_cipher.h): they open
// only in the order they were sealed, under the same secret, with the same associated data, and
// the key changes every records_per_key records on both ends without a message.

#include "transport/record_cipher.h"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton::transport {
namespace {

RecordSecret SecretOf(char c) {
  RecordSecret secret;
  secret.fill(static_cast<std::byte>(c));
  return secret;
}

std::vector<std::byte> Bytes(const std::string& text) {
  std::vector<std::byte> bytes(text.size());
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<std::byte>(text[i]);
  return bytes;
}

struct Sealed {
  std::vector<std::byte> cipher;
  AeadTag tag{};
};

Sealed SealOne(RecordCipher& cipher, const std::vector<std::byte>& associated,
               const std::vector<std::byte>& plain) {
  Sealed sealed{std::vector<std::byte>(plain.size())};
  cipher.Begin(associated);
  cipher.Update(plain, sealed.cipher.data());
  absl::StatusOr<AeadTag> tag = cipher.Seal();
  EXPECT_TRUE(tag.ok()) << tag.status();
  if (tag.ok()) sealed.tag = *tag;
  return sealed;
}

// Opens `sealed` as the opener's next record: the plaintext, or nothing if it did not open.
std::optional<std::vector<std::byte>> OpenOne(RecordCipher& cipher,
                                              const std::vector<std::byte>& associated,
                                              Sealed sealed) {
  cipher.Begin(associated);
  cipher.Update(sealed.cipher, sealed.cipher.data());
  if (!cipher.Open(sealed.tag)) return std::nullopt;
  return sealed.cipher;
}

RecordCipher Make(const RecordSecret& secret, RecordCipher::Mode mode,
                  uint64_t records_per_key = RecordCipher::kRecordsPerKey) {
  absl::StatusOr<RecordCipher> cipher = RecordCipher::Create(secret, mode, records_per_key);
  EXPECT_TRUE(cipher.ok()) << cipher.status();
  return *std::move(cipher);
}

TEST(RecordCipherTest, RecordsOpenInOrderAcrossKeyChanges) {
  // A new key every 3 records: 10 records cross three changes.
  RecordCipher seal = Make(SecretOf('s'), RecordCipher::Mode::kSeal, 3);
  RecordCipher open = Make(SecretOf('s'), RecordCipher::Mode::kOpen, 3);
  const std::vector<std::byte> associated = Bytes("header");
  const std::vector<std::byte> plain = Bytes("the same payload every time");
  std::vector<std::vector<std::byte>> ciphers;
  for (int i = 0; i < 10; ++i) {
    const Sealed sealed = SealOne(seal, associated, plain);
    EXPECT_NE(sealed.cipher, plain);
    // Never the same ciphertext twice: every record has its own nonce (and key epoch).
    for (const auto& earlier : ciphers) EXPECT_NE(sealed.cipher, earlier) << i;
    ciphers.push_back(sealed.cipher);
    EXPECT_EQ(OpenOne(open, associated, sealed), plain) << i;
  }
  EXPECT_EQ(seal.records(), 10u);
  EXPECT_EQ(open.records(), 10u);
}

TEST(RecordCipherTest, TheKeyChangesOnlyAtEpochBoundaries) {
  // Records 0..2 are the same with a key per 3 records as with the default; record 3 is not.
  RecordCipher small = Make(SecretOf('k'), RecordCipher::Mode::kSeal, 3);
  RecordCipher large = Make(SecretOf('k'), RecordCipher::Mode::kSeal);
  const std::vector<std::byte> plain = Bytes("payload");
  for (int i = 0; i < 4; ++i) {
    const Sealed a = SealOne(small, {}, plain);
    const Sealed b = SealOne(large, {}, plain);
    if (i < 3) {
      EXPECT_EQ(a.cipher, b.cipher) << i;
      EXPECT_EQ(a.tag, b.tag) << i;
    } else {
      EXPECT_NE(a.cipher, b.cipher);
    }
  }
}

TEST(RecordCipherTest, DroppedReplayedOrForeignRecordsDoNotOpen) {
  const std::vector<std::byte> associated = Bytes("header");
  const std::vector<std::byte> plain = Bytes("secret bytes");
  {
    // Dropped: the opener expects record 0 and gets record 1.
    RecordCipher seal = Make(SecretOf('a'), RecordCipher::Mode::kSeal);
    RecordCipher open = Make(SecretOf('a'), RecordCipher::Mode::kOpen);
    SealOne(seal, associated, plain);
    EXPECT_EQ(OpenOne(open, associated, SealOne(seal, associated, plain)), std::nullopt);
  }
  {
    // Replayed: record 0 again as record 1.
    RecordCipher seal = Make(SecretOf('a'), RecordCipher::Mode::kSeal);
    RecordCipher open = Make(SecretOf('a'), RecordCipher::Mode::kOpen);
    const Sealed first = SealOne(seal, associated, plain);
    EXPECT_EQ(OpenOne(open, associated, first), plain);
    EXPECT_EQ(OpenOne(open, associated, first), std::nullopt);
  }
  {
    // Another secret (another connection or direction), or other associated data.
    RecordCipher seal = Make(SecretOf('a'), RecordCipher::Mode::kSeal);
    RecordCipher other = Make(SecretOf('b'), RecordCipher::Mode::kOpen);
    RecordCipher open = Make(SecretOf('a'), RecordCipher::Mode::kOpen);
    const Sealed sealed = SealOne(seal, associated, plain);
    EXPECT_EQ(OpenOne(other, associated, sealed), std::nullopt);
    EXPECT_EQ(OpenOne(open, Bytes("Header"), sealed), std::nullopt);
  }
}

TEST(RecordCipherTest, AnEmptyRecordAuthenticatesItsAssociatedData) {
  RecordCipher seal = Make(SecretOf('e'), RecordCipher::Mode::kSeal);
  RecordCipher open = Make(SecretOf('e'), RecordCipher::Mode::kOpen);
  RecordCipher open_too = Make(SecretOf('e'), RecordCipher::Mode::kOpen);
  const Sealed sealed = SealOne(seal, Bytes("header of an empty frame"), {});
  EXPECT_EQ(OpenOne(open, Bytes("header of an empty frame"), sealed), std::vector<std::byte>{});
  EXPECT_EQ(OpenOne(open_too, Bytes("header of an empty framE"), sealed), std::nullopt);
}

TEST(RecordCipherTest, RefusesZeroRecordsPerKey) {
  EXPECT_EQ(RecordCipher::Create(SecretOf('z'), RecordCipher::Mode::kSeal, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::transport
