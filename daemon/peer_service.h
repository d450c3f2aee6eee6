#pragma once

// The peer API (gRPC over TCP) on top of Node.

#include <atomic>

#include "baton/v1/baton.grpc.pb.h"
#include "daemon/node.h"

namespace baton::daemon {

class PeerService final : public v1::Peer::Service {
 public:
  // The peer port is bound before the node exists (the node's identity includes the bound port),
  // so requests are answered with Unavailable until SetNode.
  void SetNode(Node* node) { node_.store(node); }

  grpc::Status JoinRank(grpc::ServerContext* context, const v1::JoinRankRequest* request,
                        v1::JoinRankResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, const v1::ProbeRequest* request,
                     v1::ProbeResponse* response) override;

 private:
  std::atomic<Node*> node_{nullptr};
};

}  // namespace baton::daemon
