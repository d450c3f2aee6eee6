#pragma once

// The daemons' identity on the peer API: mutual TLS with certificates from config, or nothing
// (development only). With TLS, every connection in either direction presents a certificate that
// chains to the cluster's CA bundle, and whatever a caller says about itself (the node name in a
// join or an abort) must be a name its certificate vouches for.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace baton::daemon {

struct TlsFiles {
  std::string certificate;  // PEM: this daemon's certificate, then any intermediates
  std::string key;          // PEM: its private key, unencrypted
  std::string ca;           // PEM: the CA certificates peers' certificates must chain to
};

class PeerTlsCredentials {
 public:
  // Insecure (no file named) or mutual TLS (all three named). The files are read and checked
  // here - the certificate must name `node_name` and chain to the CA bundle, the key must match -
  // and re-read by gRPC every `refresh_seconds`, so a renewed certificate (cert-manager) is used
  // without a restart. InvalidArgument naming the file and the problem otherwise.
  static absl::StatusOr<PeerTlsCredentials> Load(const TlsFiles& files,
                                                 const std::string& node_name,
                                                 unsigned refresh_seconds = 60);

  bool secure() const { return secure_; }
  std::shared_ptr<grpc::ServerCredentials> server() const { return server_; }
  std::shared_ptr<grpc::ChannelCredentials> channel() const { return channel_; }

 private:
  bool secure_ = false;
  std::shared_ptr<grpc::ServerCredentials> server_;
  std::shared_ptr<grpc::ChannelCredentials> channel_;
};

// The names the other end's certificate vouches for (DNS alternative names and common name);
// empty on a connection without TLS.
std::vector<std::string> CertifiedNames(const grpc::AuthContext& auth);

// OK if the other end of a TLS connection is certified as `node_name`, or if `secure` is false
// (development: nobody is certified); PermissionDenied naming both otherwise.
absl::Status CheckCertified(const grpc::AuthContext* auth, bool secure,
                            absl::string_view node_name);

}  // namespace baton::daemon
