#include "common/tls_certificates.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/secure_random.h"

namespace baton {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreContext = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
// A stack that borrows its certificates.
struct StackDeleter {
  void operator()(STACK_OF(X509) * stack) const { sk_X509_free(stack); }
};
using CertStack = std::unique_ptr<STACK_OF(X509), StackDeleter>;
using Names = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;

// OpenSSL's last error as text, and its queue cleared.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

Bio ReadBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(size));
}

// Every certificate in `pem`, in order.
std::vector<Cert> ReadCertificates(const std::string& pem) {
  std::vector<Cert> certificates;
  Bio bio = ReadBio(pem);
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  ERR_clear_error();  // the end of the text reads as an error
  return certificates;
}

std::vector<std::string> NamesOf(X509* certificate) {
  std::vector<std::string> names;
  auto add = [&names](std::string name) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(std::move(name));
    }
  };
  char common_name[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, common_name,
                                sizeof(common_name)) > 0) {
    add(common_name);
  }
  Names alternatives(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr)));
  if (alternatives != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(alternatives.get()); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(alternatives.get(), i);
      if (name->type != GEN_DNS) continue;
      const ASN1_STRING* dns = name->d.dNSName;
      add(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                      static_cast<size_t>(ASN1_STRING_length(dns))));
    }
  }
  return names;
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return absl::InternalError("cannot make a P-256 key: " + OpenSslError());
  return key;
}

absl::Status AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr || X509_add_ext(certificate, extension, -1) != 1) {
    X509_EXTENSION_free(extension);
    return absl::InternalError(absl::StrCat("cannot add ", value, ": ", OpenSslError()));
  }
  X509_EXTENSION_free(extension);
  return absl::OkStatus();
}

// A certificate for `name` holding `key`'s public half, not yet signed; `issuer` null means
// self-issued.
absl::StatusOr<Cert> NewCertificate(const std::string& name, EVP_PKEY* key, X509* issuer,
                                    absl::Duration validity) {
  Cert certificate(X509_new());
  uint8_t serial[16];
  SecureRandomBytes(serial, sizeof(serial));
  serial[0] &= 0x7f;  // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool ok =
      certificate != nullptr && X509_set_version(certificate.get(), 2) == 1 &&
      BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate.get())) != nullptr &&
      X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -3600) != nullptr &&
      X509_gmtime_adj(X509_getm_notAfter(certificate.get()), absl::ToInt64Seconds(validity)) !=
          nullptr &&
      X509_NAME_add_entry_by_txt(X509_get_subject_name(certificate.get()), "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1,
                                 0) == 1 &&
      X509_set_issuer_name(certificate.get(), issuer == nullptr
                                                  ? X509_get_subject_name(certificate.get())
                                                  : X509_get_subject_name(issuer)) == 1 &&
      X509_set_pubkey(certificate.get(), key) == 1;
  BN_free(number);
  if (!ok) return absl::InternalError("cannot make a certificate: " + OpenSslError());
  return certificate;
}

std::string KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  return BioText(bio.get());
}

std::string CertificatePem(X509* certificate) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), certificate);
  return BioText(bio.get());
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CertificateNames(const std::string& certificate_pem) {
  std::vector<Cert> certificates = ReadCertificates(certificate_pem);
  if (certificates.empty()) return absl::InvalidArgumentError("no PEM certificate found");
  return NamesOf(certificates.front().get());
}

absl::Status CheckNodeCertificate(const KeyAndCertificate& identity,
                                  const std::string& ca_bundle_pem, const std::string& node_name) {
  std::vector<Cert> chain = ReadCertificates(identity.certificate_pem);
  if (chain.empty()) return absl::InvalidArgumentError("the certificate file holds no certificate");
  std::vector<Cert> authorities = ReadCertificates(ca_bundle_pem);
  if (authorities.empty()) {
    return absl::InvalidArgumentError("the CA bundle holds no certificate");
  }
  Bio key_bio = ReadBio(identity.key_pem);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError("the key file holds no unencrypted PEM private key: " +
                                      OpenSslError());
  }
  X509* leaf = chain.front().get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the private key does not belong to the certificate");
  }
  const std::vector<std::string> names = NamesOf(leaf);
  if (std::find(names.begin(), names.end(), node_name) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the certificate names ", names.empty() ? "nobody" : absl::StrJoin(names, ", "),
        " but this daemon's node name is ", node_name,
        " (peers check a daemon's node name against its certificate)"));
  }
  Store store(X509_STORE_new());
  for (const Cert& authority : authorities) X509_STORE_add_cert(store.get(), authority.get());
  CertStack intermediates(sk_X509_new_null());
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(intermediates.get(), chain[i].get());
  // Both ends of a peer connection present this certificate: it must serve as either.
  for (int purpose : {X509_PURPOSE_SSL_SERVER, X509_PURPOSE_SSL_CLIENT}) {
    StoreContext context(X509_STORE_CTX_new());
    X509_STORE_CTX_init(context.get(), store.get(), leaf, intermediates.get());
    X509_STORE_CTX_set_purpose(context.get(), purpose);
    if (X509_verify_cert(context.get()) != 1) {
      const int error = X509_STORE_CTX_get_error(context.get());
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("the certificate does not verify against the CA bundle for TLS ",
                       purpose == X509_PURPOSE_SSL_SERVER ? "server" : "client",
                       " use: ", X509_verify_cert_error_string(error)));
    }
  }
  return absl::OkStatus();
}

struct DevCertificateAuthority::State {
  Key key;
  Cert certificate;
};

DevCertificateAuthority::DevCertificateAuthority(std::unique_ptr<State> state,
                                                 std::string certificate_pem)
    : state_(std::move(state)), certificate_pem_(std::move(certificate_pem)) {}
DevCertificateAuthority::DevCertificateAuthority(DevCertificateAuthority&&) noexcept = default;
DevCertificateAuthority& DevCertificateAuthority::operator=(DevCertificateAuthority&&) noexcept =
    default;
DevCertificateAuthority::~DevCertificateAuthority() = default;

absl::StatusOr<DevCertificateAuthority> DevCertificateAuthority::Create(
    const std::string& common_name, absl::Duration validity) {
  auto state = std::make_unique<State>();
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  state->key = std::move(*key);
  absl::StatusOr<Cert> certificate =
      NewCertificate(common_name, state->key.get(), nullptr, validity);
  if (!certificate.ok()) return certificate.status();
  X509* ca = certificate->get();
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (absl::Status added = AddExtension(ca, ca, nid, value); !added.ok()) return added;
  }
  if (X509_sign(ca, state->key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("cannot sign the CA certificate: " + OpenSslError());
  }
  state->certificate = std::move(*certificate);
  std::string pem = CertificatePem(state->certificate.get());
  return DevCertificateAuthority(std::move(state), std::move(pem));
}

absl::StatusOr<KeyAndCertificate> DevCertificateAuthority::Issue(const std::string& name,
                                                                 absl::Duration validity) const {
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Cert> certificate =
      NewCertificate(name, key->get(), state_->certificate.get(), validity);
  if (!certificate.ok()) return certificate.status();
  X509* leaf = certificate->get();
  const std::string alternative = "DNS:" + name;
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                            std::pair{NID_key_usage, "critical,digitalSignature"},
                            std::pair{NID_ext_key_usage, "serverAuth,clientAuth"},
                            std::pair{NID_authority_key_identifier, "keyid"},
                            std::pair{NID_subject_alt_name, alternative.c_str()}}) {
    if (absl::Status added = AddExtension(leaf, state_->certificate.get(), nid, value);
        !added.ok()) {
      return added;
    }
  }
  if (X509_sign(leaf, state_->key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("cannot sign the certificate: " + OpenSslError());
  }
  return KeyAndCertificate{KeyPem(key->get()), CertificatePem(leaf)};
}

}  // namespace baton
