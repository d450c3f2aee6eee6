// HKDF-SHA256 and AES-256-GCM (common/hmac.h, common/aead.h) against published vectors (RFC 5869
// test case 1; the GCM specification's test case 16, which the Python cryptography package
// reproduces), and what they must refuse.

#include "common/aead.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/hmac.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

std::vector<std::byte> FromHex(const std::string& hex) {
  const std::string bytes = absl::HexStringToBytes(hex);
  std::vector<std::byte> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<std::byte>(bytes[i]);
  return out;
}

template <size_t N>
std::array<std::byte, N> ArrayFromHex(const std::string& hex) {
  const std::vector<std::byte> bytes = FromHex(hex);
  std::array<std::byte, N> out{};
  EXPECT_EQ(bytes.size(), N);
  std::copy_n(bytes.begin(), std::min(N, bytes.size()), out.begin());
  return out;
}

TEST(HkdfSha256Test, MatchesRfc5869TestCase1) {
  const std::vector<std::byte> ikm(22, std::byte{0x0b});
  const std::vector<std::byte> salt = FromHex("000102030405060708090a0b0c");
  const std::string info = absl::HexStringToBytes("f0f1f2f3f4f5f6f7f8f9");
  std::vector<std::byte> okm(42);
  HkdfSha256(ikm, salt, info, okm);
  EXPECT_EQ(okm, FromHex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208"
                         "d5b887185865"));
  // A prefix of a longer output is the shorter output.
  std::vector<std::byte> shorter(5);
  HkdfSha256(ikm, salt, info, shorter);
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), okm.begin()));
}

// The GCM specification's test case 16: AES-256, 96-bit nonce, 60 bytes, 20 bytes of
// associated data.
struct Vector16 {
  AeadKey key = ArrayFromHex<kAeadKeyBytes>(
      "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
  AeadNonce nonce = ArrayFromHex<kAeadNonceBytes>("cafebabefacedbaddecaf888");
  std::vector<std::byte> plain = FromHex(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
      "49a6b525b16aedf5aa0de657ba637b39");
  std::vector<std::byte> associated = FromHex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  std::vector<std::byte> cipher = FromHex(
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b10"
      "56828838c5f61e6393ba7a0abcc9f662");
  AeadTag tag = ArrayFromHex<kAeadTagBytes>("76fc6ece0f4e1768cddf8853bb2d551b");
};

TEST(Aes256GcmTest, SealsTestCase16InOneUpdateOrInPieces) {
  const Vector16 v;
  absl::StatusOr<Aes256Gcm> gcm = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kSeal);
  ASSERT_TRUE(gcm.ok()) << gcm.status();
  for (const size_t split : {size_t{60}, size_t{1}, size_t{17}, size_t{0}}) {
    SCOPED_TRACE(split);
    std::vector<std::byte> out(v.plain.size());
    gcm->Begin(v.nonce, v.associated);
    gcm->Update(std::span(v.plain).first(split), out.data());
    gcm->Update(std::span(v.plain).subspan(split), out.data() + split);
    absl::StatusOr<AeadTag> tag = gcm->Seal();
    ASSERT_TRUE(tag.ok()) << tag.status();
    EXPECT_EQ(out, v.cipher);
    EXPECT_EQ(*tag, v.tag);
  }
}

TEST(Aes256GcmTest, OpensTestCase16InPlace) {
  const Vector16 v;
  absl::StatusOr<Aes256Gcm> gcm = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kOpen);
  ASSERT_TRUE(gcm.ok()) << gcm.status();
  std::vector<std::byte> bytes = v.cipher;
  gcm->Begin(v.nonce, v.associated);
  gcm->Update(std::span(bytes).first(30), bytes.data());
  gcm->Update(std::span(bytes).subspan(30), bytes.data() + 30);
  EXPECT_TRUE(gcm->Open(v.tag));
  EXPECT_EQ(bytes, v.plain);
}

TEST(Aes256GcmTest, AnyAlterationFailsToOpen) {
  const Vector16 v;
  absl::StatusOr<Aes256Gcm> gcm = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kOpen);
  ASSERT_TRUE(gcm.ok()) << gcm.status();
  auto opens = [&](const AeadNonce& nonce, std::vector<std::byte> associated,
                   std::vector<std::byte> cipher, const AeadTag& tag) {
    gcm->Begin(nonce, associated);
    gcm->Update(cipher, cipher.data());
    return gcm->Open(tag);
  };
  EXPECT_TRUE(opens(v.nonce, v.associated, v.cipher, v.tag));
  for (size_t i = 0; i < v.cipher.size(); i += 7) {
    std::vector<std::byte> cipher = v.cipher;
    cipher[i] ^= std::byte{0x01};
    EXPECT_FALSE(opens(v.nonce, v.associated, cipher, v.tag)) << "cipher byte " << i;
  }
  std::vector<std::byte> associated = v.associated;
  associated[3] ^= std::byte{0x80};
  EXPECT_FALSE(opens(v.nonce, associated, v.cipher, v.tag));
  AeadNonce nonce = v.nonce;
  nonce[11] ^= std::byte{0x01};
  EXPECT_FALSE(opens(nonce, v.associated, v.cipher, v.tag));
  AeadTag tag = v.tag;
  tag[15] ^= std::byte{0x01};
  EXPECT_FALSE(opens(v.nonce, v.associated, v.cipher, tag));
  std::vector<std::byte> shorter(v.cipher.begin(), v.cipher.end() - 1);
  EXPECT_FALSE(opens(v.nonce, v.associated, shorter, v.tag));
  // Another key.
  AeadKey key = v.key;
  key[0] ^= std::byte{0x01};
  gcm->Rekey(key);
  EXPECT_FALSE(opens(v.nonce, v.associated, v.cipher, v.tag));
  gcm->Rekey(v.key);
  EXPECT_TRUE(opens(v.nonce, v.associated, v.cipher, v.tag));
}

// Associated data may come in pieces after Begin (Authenticate): test case 16's associated data
// split anywhere gives its published tag. And GMAC, a message of associated data alone: the same
// bytes as associated data authenticate (the tag is test case 13's, AES-256 over nothing, only
// for nothing), and any change to them fails.
TEST(Aes256GcmTest, AssociatedDataInPiecesAndGmac) {
  const Vector16 v;
  absl::StatusOr<Aes256Gcm> seal = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kSeal);
  absl::StatusOr<Aes256Gcm> open = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kOpen);
  ASSERT_TRUE(seal.ok() && open.ok());
  for (const size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{20}}) {
    SCOPED_TRACE(split);
    std::vector<std::byte> out(v.plain.size());
    // Three pieces: [0, split), [split, middle) and [middle, 20).
    const size_t middle = std::min(v.associated.size(), split + 3);
    seal->Begin(v.nonce, std::span(v.associated).first(split));
    seal->Authenticate(std::span(v.associated).subspan(split, middle - split));
    seal->Authenticate(std::span(v.associated).subspan(middle));
    seal->Update(v.plain, out.data());
    absl::StatusOr<AeadTag> tag = seal->Seal();
    ASSERT_TRUE(tag.ok()) << tag.status();
    EXPECT_EQ(out, v.cipher);
    EXPECT_EQ(*tag, v.tag);
  }

  // GCM specification test case 13: AES-256, zero key and nonce, nothing at all.
  absl::StatusOr<Aes256Gcm> zero = Aes256Gcm::Create(AeadKey{}, Aes256Gcm::Mode::kSeal);
  ASSERT_TRUE(zero.ok());
  zero->Begin(AeadNonce{}, {});
  absl::StatusOr<AeadTag> empty = zero->Seal();
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, ArrayFromHex<kAeadTagBytes>("530f8afbc74536b9a963b4f1c4cb738b"));

  // GMAC over test case 16's plaintext as associated data, in pieces, left as it was.
  const std::vector<std::byte> message = v.plain;
  seal->Begin(v.nonce, v.associated);
  seal->Authenticate(std::span(message).first(13));
  seal->Authenticate(std::span(message).subspan(13));
  absl::StatusOr<AeadTag> gmac = seal->Seal();
  ASSERT_TRUE(gmac.ok());
  EXPECT_EQ(message, v.plain);
  EXPECT_NE(*gmac, v.tag);
  auto verifies = [&](const std::vector<std::byte>& bytes, const AeadTag& tag) {
    open->Begin(v.nonce, v.associated);
    open->Authenticate(bytes);
    return open->Open(tag);
  };
  EXPECT_TRUE(verifies(message, *gmac));
  for (size_t i = 0; i < message.size(); i += 5) {
    std::vector<std::byte> altered = message;
    altered[i] ^= std::byte{0x20};
    EXPECT_FALSE(verifies(altered, *gmac)) << "byte " << i;
  }
  EXPECT_FALSE(verifies(std::vector<std::byte>(message.begin(), message.end() - 1), *gmac));
}

TEST(Aes256GcmTest, EachModeDoesOnlyItsOwnEnd) {
  const Vector16 v;
  absl::StatusOr<Aes256Gcm> seal = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kSeal);
  absl::StatusOr<Aes256Gcm> open = Aes256Gcm::Create(v.key, Aes256Gcm::Mode::kOpen);
  ASSERT_TRUE(seal.ok() && open.ok());
  seal->Begin(v.nonce, v.associated);
  EXPECT_FALSE(seal->Open(v.tag));
  open->Begin(v.nonce, v.associated);
  EXPECT_FALSE(open->Seal().ok());
}

}  // namespace
}  // namespace baton
