#pragma once

// The peer API (gRPC over TCP) on top of Node.

#include <atomic>

#include "baton/v1/baton.grpc.pb.h"
#include "daemon/data_keys.h"
#include "daemon/node.h"

namespace baton::daemon {

class PeerService final : public v1::Peer::Service {
 public:
  // `certified_peers`: the port runs mutual TLS, and a node name a caller claims (the member of a
  // join, the sender of an abort) must be one its certificate vouches for. `data_keys` (null
  // without TLS) issues the data-connection keys.
  PeerService(bool certified_peers, const DataKeys* data_keys)
      : certified_peers_(certified_peers), data_keys_(data_keys) {}

  // The peer port is bound before the node exists (the node's identity includes the bound port),
  // so requests are answered with Unavailable until SetNode.
  void SetNode(Node* node) { node_.store(node); }

  grpc::Status JoinRank(grpc::ServerContext* context, const v1::JoinRankRequest* request,
                        v1::JoinRankResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, const v1::ProbeRequest* request,
                     v1::ProbeResponse* response) override;
  grpc::Status DataKey(grpc::ServerContext* context, const v1::DataKeyRequest* request,
                       v1::DataKeyResponse* response) override;
  grpc::Status ConnectPair(grpc::ServerContext* context, const v1::ConnectPairRequest* request,
                           v1::ConnectPairResponse* response) override;

 private:
  const bool certified_peers_;
  const DataKeys* const data_keys_;
  std::atomic<Node*> node_{nullptr};
};

}  // namespace baton::daemon
