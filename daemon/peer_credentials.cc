#include "daemon/peer_credentials.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tls_certificates.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace baton::daemon {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& option, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::InvalidArgumentError(absl::StrCat(option, ": cannot read ", path));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<PeerTlsCredentials> PeerTlsCredentials::Load(const TlsFiles& files,
                                                            const std::string& node_name,
                                                            unsigned refresh_seconds) {
  PeerTlsCredentials credentials;
  const int named = static_cast<int>(!files.certificate.empty()) +
                    static_cast<int>(!files.key.empty()) + static_cast<int>(!files.ca.empty());
  if (named == 0) {
    credentials.server_ = grpc::InsecureServerCredentials();
    credentials.channel_ = grpc::InsecureChannelCredentials();
    return credentials;
  }
  if (named != 3) {
    return absl::InvalidArgumentError(
        "tls_cert, tls_key and tls_ca go together: name all three for mutual TLS, or none");
  }
  KeyAndCertificate identity;
  absl::StatusOr<std::string> text = ReadPem("tls_cert", files.certificate);
  if (!text.ok()) return text.status();
  identity.certificate_pem = std::move(*text);
  text = ReadPem("tls_key", files.key);
  if (!text.ok()) return text.status();
  identity.key_pem = std::move(*text);
  absl::StatusOr<std::string> ca = ReadPem("tls_ca", files.ca);
  if (!ca.ok()) return ca.status();
  if (absl::Status checked = CheckNodeCertificate(identity, *ca, node_name); !checked.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_cert ", files.certificate, ": ", checked.message()));
  }

  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.certificate, files.ca, refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions server(provider);
  server.watch_root_certs();
  server.watch_identity_key_cert_pairs();
  server.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  credentials.server_ = grpc::experimental::TlsServerCredentials(server);

  // Peers are dialled by address (often an IP), not by a name in their certificate: the chain is
  // verified against the CA, and who answered is checked against what it says it is (a probe's
  // reply names its daemon) rather than against the address.
  grpc::experimental::TlsChannelCredentialsOptions channel;
  channel.set_certificate_provider(provider);
  channel.watch_root_certs();
  channel.watch_identity_key_cert_pairs();
  channel.set_verify_server_certs(true);
  channel.set_check_call_host(false);
  channel.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  credentials.channel_ = grpc::experimental::TlsCredentials(channel);
  if (credentials.server_ == nullptr || credentials.channel_ == nullptr) {
    return absl::InternalError("gRPC could not make TLS credentials");
  }
  credentials.secure_ = true;
  return credentials;
}

std::vector<std::string> CertifiedNames(const grpc::AuthContext& auth) {
  std::vector<std::string> names;
  if (!auth.IsPeerAuthenticated()) return names;
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const grpc::string_ref& value : auth.FindPropertyValues(property)) {
      std::string name(value.data(), value.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

absl::Status CheckCertified(const grpc::AuthContext* auth, bool secure,
                            absl::string_view node_name) {
  if (!secure) return absl::OkStatus();
  const std::vector<std::string> names =
      auth == nullptr ? std::vector<std::string>{} : CertifiedNames(*auth);
  if (std::find(names.begin(), names.end(), node_name) != names.end()) return absl::OkStatus();
  constexpr size_t kMaxQuoted = 64;  // a claimed name is the caller's input
  return absl::PermissionDeniedError(absl::StrCat(
      "the caller's certificate is for ", names.empty() ? "nobody" : absl::StrJoin(names, ", "),
      ", not for node ", node_name.substr(0, kMaxQuoted)));
}

}  // namespace baton::daemon
