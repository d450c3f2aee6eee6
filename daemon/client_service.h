#pragma once

// The client API (gRPC over the daemon's unix socket) on top of Node. Every call that names a
// session must carry that session's token (common/session_protocol.h); sessions themselves are
// opened and ended on the session socket (daemon/session_server.h).

#include "absl/synchronization/notification.h"
#include "baton/v1/baton.grpc.pb.h"
#include "daemon/node.h"

namespace baton::daemon {

// What GetStatus reports beyond the node's own state.
struct DaemonInfo {
  std::string version;
  std::string metrics_address;
  absl::Time started = absl::Now();
};

class ClientService final : public v1::Client::Service {
 public:
  // `shutting_down` is notified when the daemon stops.
  ClientService(Node* node, DaemonInfo info, const absl::Notification* shutting_down)
      : node_(node), info_(std::move(info)), shutting_down_(shutting_down) {}

  grpc::Status CreateCommId(grpc::ServerContext* context, const v1::CreateCommIdRequest* request,
                            v1::CreateCommIdResponse* response) override;
  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                    v1::JoinResponse* response) override;
  grpc::Status Destroy(grpc::ServerContext* context, const v1::DestroyRequest* request,
                       v1::DestroyResponse* response) override;
  grpc::Status Collective(grpc::ServerContext* context, const v1::CollectiveRequest* request,
                          v1::CollectiveResponse* response) override;
  grpc::Status OpenChannel(grpc::ServerContext* context, const v1::OpenChannelRequest* request,
                           v1::OpenChannelResponse* response) override;
  grpc::Status AbortCommunicator(grpc::ServerContext* context,
                                 const v1::AbortCommunicatorRequest* request,
                                 v1::AbortCommunicatorResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::DaemonStatus* response) override;
  grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                       v1::ExplainResponse* response) override;
  grpc::Status GetTopology(grpc::ServerContext* context, const v1::GetTopologyRequest* request,
                           v1::Topology* response) override;

 private:
  // OK when the call carries session `session_id`'s token (Unauthenticated otherwise).
  grpc::Status Authenticate(const grpc::ServerContext* context, uint64_t session_id) const;

  Node* const node_;
  const DaemonInfo info_;
  const absl::Notification* const shutting_down_;
};

}  // namespace baton::daemon
