#include "common/aead.h"

#include <openssl/evp.h>

#include <algorithm>
#include <utility>

namespace baton {

struct Aes256Gcm::Context {
  ~Context() { EVP_CIPHER_CTX_free(ctx); }
  EVP_CIPHER_CTX* ctx = nullptr;
};

namespace {

const unsigned char* Bytes(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* Bytes(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

}  // namespace

absl::StatusOr<Aes256Gcm> Aes256Gcm::Create(const AeadKey& key, Mode mode) {
  auto context = std::make_unique<Context>();
  context->ctx = EVP_CIPHER_CTX_new();
  if (context->ctx == nullptr ||
      EVP_CipherInit_ex(context->ctx, EVP_aes_256_gcm(), nullptr, Bytes(key.data()), nullptr,
                        mode == Mode::kSeal ? 1 : 0) != 1 ||
      EVP_CIPHER_CTX_ctrl(context->ctx, EVP_CTRL_GCM_SET_IVLEN, kAeadNonceBytes, nullptr) != 1) {
    return absl::InternalError("libcrypto could not set up an AES-256-GCM context");
  }
  return Aes256Gcm(std::move(context), mode);
}

Aes256Gcm::Aes256Gcm(std::unique_ptr<Context> context, Mode mode)
    : context_(std::move(context)), mode_(mode) {}
Aes256Gcm::Aes256Gcm(Aes256Gcm&&) noexcept = default;
Aes256Gcm& Aes256Gcm::operator=(Aes256Gcm&&) noexcept = default;
Aes256Gcm::~Aes256Gcm() = default;

void Aes256Gcm::Rekey(const AeadKey& key) {
  key_failed_ =
      EVP_CipherInit_ex(context_->ctx, nullptr, nullptr, Bytes(key.data()), nullptr, -1) != 1;
}

void Aes256Gcm::Begin(const AeadNonce& nonce, std::span<const std::byte> associated) {
  failed_ = key_failed_ || EVP_CipherInit_ex(context_->ctx, nullptr, nullptr, nullptr,
                                             Bytes(nonce.data()), -1) != 1;
  if (!failed_) Authenticate(associated);
}

void Aes256Gcm::Authenticate(std::span<const std::byte> data) {
  // EVP takes int lengths. Associated data may come in pieces of any length: GHASH keeps a
  // partial block between them.
  constexpr size_t kMaxCall = size_t{1} << 30;
  for (size_t done = 0; done < data.size();) {
    const size_t n = std::min(kMaxCall, data.size() - done);
    int length = 0;
    if (EVP_CipherUpdate(context_->ctx, nullptr, &length, Bytes(data.data() + done),
                         static_cast<int>(n)) != 1) {
      failed_ = true;
      return;
    }
    done += n;
  }
}

void Aes256Gcm::Update(std::span<const std::byte> in, std::byte* out) {
  // EVP takes int lengths; GCM holds no bytes back, so each call writes all it was given.
  constexpr size_t kMaxCall = size_t{1} << 30;
  for (size_t done = 0; done < in.size();) {
    const size_t n = std::min(kMaxCall, in.size() - done);
    int length = 0;
    if (EVP_CipherUpdate(context_->ctx, Bytes(out + done), &length, Bytes(in.data() + done),
                         static_cast<int>(n)) != 1 ||
        static_cast<size_t>(length) != n) {
      failed_ = true;
      return;
    }
    done += n;
  }
}

absl::StatusOr<AeadTag> Aes256Gcm::Seal() {
  AeadTag tag{};
  int length = 0;
  if (mode_ != Mode::kSeal || failed_ || EVP_CipherFinal_ex(context_->ctx, nullptr, &length) != 1 ||
      EVP_CIPHER_CTX_ctrl(context_->ctx, EVP_CTRL_GCM_GET_TAG, kAeadTagBytes, tag.data()) != 1) {
    return absl::InternalError("libcrypto failed to seal an AES-256-GCM message");
  }
  return tag;
}

bool Aes256Gcm::Open(const AeadTag& tag) {
  if (mode_ != Mode::kOpen || failed_) return false;
  AeadTag expected = tag;  // EVP wants a mutable pointer
  int length = 0;
  return EVP_CIPHER_CTX_ctrl(context_->ctx, EVP_CTRL_GCM_SET_TAG, kAeadTagBytes, expected.data()) ==
             1 &&
         EVP_CipherFinal_ex(context_->ctx, nullptr, &length) == 1;
}

}  // namespace baton
