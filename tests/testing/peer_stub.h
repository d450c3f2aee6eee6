#pragma once

// A client of a local daemon's peer API for tests that speak it directly (as an attacker or a
// forged peer would): over mutual TLS with a given daemon's certificate, over TLS with none, or
// without TLS.

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "baton/v1/baton.grpc.pb.h"
#include "client/local_cluster.h"
#include "grpcpp/grpcpp.h"

namespace baton::testing {

inline std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Whose certificate a test's peer client presents.
struct PeerIdentity {
  std::string key_pem;          // empty: no client certificate
  std::string certificate_pem;  // empty: no client certificate
  std::string ca_pem;           // empty: no TLS at all
};

// `daemon`'s own identity (its key, certificate and CA), or no TLS for a cluster without it.
inline PeerIdentity IdentityOf(const client::LocalDaemon& daemon) {
  if (daemon.tls_ca.empty()) return {};
  return {ReadText(daemon.tls_key), ReadText(daemon.tls_cert), ReadText(daemon.tls_ca)};
}

// A stub for `to`'s peer API presenting `as`. TLS verifies `to` against `as.ca_pem` and the name
// in its certificate.
inline std::unique_ptr<v1::Peer::Stub> PeerStub(const client::LocalDaemon& to,
                                                const PeerIdentity& as) {
  if (as.ca_pem.empty()) {
    return v1::Peer::NewStub(
        grpc::CreateChannel(to.peer_address, grpc::InsecureChannelCredentials()));
  }
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = as.ca_pem;
  tls.pem_private_key = as.key_pem;
  tls.pem_cert_chain = as.certificate_pem;
  grpc::ChannelArguments arguments;
  arguments.SetSslTargetNameOverride(to.node_name);
  return v1::Peer::NewStub(
      grpc::CreateCustomChannel(to.peer_address, grpc::SslCredentials(tls), arguments));
}

}  // namespace baton::testing
