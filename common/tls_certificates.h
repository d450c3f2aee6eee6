#pragma once

// X.509 certificates for the daemons' mutual TLS: checking a daemon's own certificate, key and CA
// bundle at start (so a misconfigured node fails with a clear error instead of failed handshakes
// later), and a throwaway certificate authority for development clusters and tests. OpenSSL
// (libcrypto) underneath; PEM text in and out.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton {

struct KeyAndCertificate {
  std::string key_pem;
  std::string certificate_pem;
};

// The names a certificate vouches for: its subject's common name and its DNS subject alternative
// names, in that order, without repeats. InvalidArgument if `certificate_pem` holds no
// certificate.
absl::StatusOr<std::vector<std::string>> CertificateNames(const std::string& certificate_pem);

// OK if `certificate_pem` (a leaf, optionally followed by intermediates) is valid now, chains to
// one of the certificates in `ca_bundle_pem`, is usable for both TLS client and server
// authentication, matches `key_pem`, and names `node_name` (common name or DNS alternative name).
// InvalidArgument saying which of these fails otherwise.
absl::Status CheckNodeCertificate(const KeyAndCertificate& identity,
                                  const std::string& ca_bundle_pem, const std::string& node_name);

// A certificate authority that lives in memory: for `baton local up` and tests, never for a
// production cluster. Keys are ECDSA P-256.
class DevCertificateAuthority {
 public:
  // A self-signed CA named `common_name`, valid from an hour ago for `validity`.
  static absl::StatusOr<DevCertificateAuthority> Create(const std::string& common_name,
                                                        absl::Duration validity = absl::Hours(24 *
                                                                                              30));

  DevCertificateAuthority(DevCertificateAuthority&&) noexcept;
  DevCertificateAuthority& operator=(DevCertificateAuthority&&) noexcept;
  ~DevCertificateAuthority();

  const std::string& certificate_pem() const { return certificate_pem_; }

  // A new key and a certificate for `name` (common name and DNS alternative name) for TLS client
  // and server use, signed by this CA and valid for `validity` (negative: already expired, for
  // tests).
  absl::StatusOr<KeyAndCertificate> Issue(const std::string& name,
                                          absl::Duration validity = absl::Hours(24 * 30)) const;

 private:
  struct State;
  explicit DevCertificateAuthority(std::unique_ptr<State> state, std::string certificate_pem);

  std::unique_ptr<State> state_;
  std::string certificate_pem_;
};

}  // namespace baton
