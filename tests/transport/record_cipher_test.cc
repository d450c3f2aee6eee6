// The numbered records of a sealed or authenticated connection's direction
// (transport/auth/record_cipher.h): they open only in the order they were sealed, under the same
// secret, with the same associated data, and the key changes every records_per_key records on
// both ends without a message. Records in the clear (Payload::kClear) leave their payload as it
// is, and fail for any change to it just as sealed ones do.

#include "transport/auth/record_cipher.h"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
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

RecordCipher MakeClear(const RecordSecret& secret, RecordCipher::Mode mode,
                       uint64_t records_per_key = RecordCipher::kRecordsPerKey) {
  absl::StatusOr<RecordCipher> cipher =
      RecordCipher::Create(secret, mode, records_per_key, RecordCipher::Payload::kClear);
  EXPECT_TRUE(cipher.ok()) << cipher.status();
  return *std::move(cipher);
}

// An authenticated record as the sender makes it: its payload, untouched (Authenticate), and
// its tag.
Sealed AuthenticateOne(RecordCipher& cipher, const std::vector<std::byte>& associated,
                       const std::vector<std::byte>& plain) {
  Sealed record{plain};
  cipher.Begin(associated);
  cipher.Authenticate(std::span(plain).first(plain.size() / 3));
  cipher.Authenticate(std::span(plain).subspan(plain.size() / 3));
  absl::StatusOr<AeadTag> tag = cipher.Seal();
  EXPECT_TRUE(tag.ok()) << tag.status();
  if (tag.ok()) record.tag = *tag;
  return record;
}

TEST(RecordCipherTest, AuthenticatedRecordsStayInTheClearAndCheckInOrder) {
  RecordCipher seal = MakeClear(SecretOf('c'), RecordCipher::Mode::kSeal, 3);
  RecordCipher open = MakeClear(SecretOf('c'), RecordCipher::Mode::kOpen, 3);
  EXPECT_FALSE(seal.encrypts());
  EXPECT_TRUE(Make(SecretOf('c'), RecordCipher::Mode::kSeal).encrypts());
  const std::vector<std::byte> associated = Bytes("header");
  const std::vector<std::byte> plain = Bytes("the same payload, in the clear, every time");
  std::vector<AeadTag> tags;
  for (int i = 0; i < 10; ++i) {  // across three key changes
    const Sealed record = AuthenticateOne(seal, associated, plain);
    EXPECT_EQ(record.cipher, plain);
    for (const AeadTag& earlier : tags) EXPECT_NE(record.tag, earlier) << i;
    tags.push_back(record.tag);
    // Opened in place by the receiver (OpenOne's Update with out == in): nothing changes.
    EXPECT_EQ(OpenOne(open, associated, record), plain) << i;
  }
  // Update from one buffer to another copies the bytes as they are.
  RecordCipher copy = MakeClear(SecretOf('c'), RecordCipher::Mode::kSeal);
  std::vector<std::byte> out(plain.size());
  copy.Begin(associated);
  copy.Update(plain, out.data());
  EXPECT_EQ(out, plain);
}

// Each attack on a direction's stream: a payload byte, a tag byte or the associated data
// (header) altered, a record dropped, replayed, or two swapped. Every one fails to open.
TEST(RecordCipherTest, AlteredDroppedReplayedOrReorderedAuthenticatedRecordsDoNotOpen) {
  const std::vector<std::byte> associated = Bytes("header");
  const std::vector<std::byte> first = Bytes("first payload");
  const std::vector<std::byte> second = Bytes("second payload");
  auto fresh = [] {
    return std::pair{MakeClear(SecretOf('t'), RecordCipher::Mode::kSeal),
                     MakeClear(SecretOf('t'), RecordCipher::Mode::kOpen)};
  };
  {
    auto [seal, open] = fresh();
    Sealed record = AuthenticateOne(seal, associated, first);
    record.cipher[4] ^= std::byte{0x01};
    EXPECT_EQ(OpenOne(open, associated, record), std::nullopt) << "payload byte";
  }
  {
    auto [seal, open] = fresh();
    Sealed record = AuthenticateOne(seal, associated, first);
    record.tag[0] ^= std::byte{0x80};
    EXPECT_EQ(OpenOne(open, associated, record), std::nullopt) << "tag byte";
  }
  {
    auto [seal, open] = fresh();
    EXPECT_EQ(OpenOne(open, Bytes("headeR"), AuthenticateOne(seal, associated, first)),
              std::nullopt)
        << "associated data";
  }
  {
    auto [seal, open] = fresh();
    AuthenticateOne(seal, associated, first);  // dropped
    EXPECT_EQ(OpenOne(open, associated, AuthenticateOne(seal, associated, second)), std::nullopt)
        << "dropped";
  }
  {
    auto [seal, open] = fresh();
    const Sealed record = AuthenticateOne(seal, associated, first);
    EXPECT_EQ(OpenOne(open, associated, record), first);
    EXPECT_EQ(OpenOne(open, associated, record), std::nullopt) << "replayed";
  }
  {
    auto [seal, open] = fresh();
    const Sealed one = AuthenticateOne(seal, associated, first);
    const Sealed two = AuthenticateOne(seal, associated, second);
    EXPECT_EQ(OpenOne(open, associated, two), std::nullopt) << "reordered";
    RecordCipher in_order = MakeClear(SecretOf('t'), RecordCipher::Mode::kOpen);
    EXPECT_EQ(OpenOne(in_order, associated, one), first);
    EXPECT_EQ(OpenOne(in_order, associated, two), second);
  }
}

// One secret never gives the same (key, nonce) to a sealed and an authenticated record: an
// authenticated record's tag is not the tag of a sealed record of no payload whose associated
// data is the header and the payload together (which it would be under the same key and nonce),
// and a sealed record does not open as an authenticated one.
TEST(RecordCipherTest, AuthenticatedAndSealedRecordsHaveTheirOwnKeys) {
  RecordCipher clear = MakeClear(SecretOf('d'), RecordCipher::Mode::kSeal);
  RecordCipher sealed = Make(SecretOf('d'), RecordCipher::Mode::kSeal);
  const std::vector<std::byte> header = Bytes("header");
  const std::vector<std::byte> payload = Bytes("payload");
  std::vector<std::byte> both = header;
  both.insert(both.end(), payload.begin(), payload.end());
  const Sealed authenticated = AuthenticateOne(clear, header, payload);
  const Sealed empty = SealOne(sealed, both, {});
  EXPECT_NE(authenticated.tag, empty.tag);

  RecordCipher seal = Make(SecretOf('d'), RecordCipher::Mode::kSeal);
  RecordCipher open = MakeClear(SecretOf('d'), RecordCipher::Mode::kOpen);
  EXPECT_EQ(OpenOne(open, header, SealOne(seal, header, payload)), std::nullopt);
}

TEST(RecordCipherTest, RefusesZeroRecordsPerKey) {
  EXPECT_EQ(RecordCipher::Create(SecretOf('z'), RecordCipher::Mode::kSeal, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::transport
