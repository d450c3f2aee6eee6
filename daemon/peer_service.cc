#include "daemon/peer_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/grpc_status.h"
#include "daemon/peer_client.h"
#include "daemon/peer_credentials.h"

namespace baton::daemon {
namespace {

const grpc::Status kStarting(grpc::StatusCode::UNAVAILABLE, "batond is starting");

}  // namespace

grpc::Status PeerService::JoinRank(grpc::ServerContext* context, const v1::JoinRankRequest* request,
                                   v1::JoinRankResponse* response) {
  Node* node = node_.load();
  if (node == nullptr) return kStarting;
  if (absl::Status certified = CheckCertified(context->auth_context().get(), certified_peers_,
                                              request->member().node_name());
      !certified.ok()) {
    return ToGrpc(certified);
  }
  const absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  absl::StatusOr<Plan> plan =
      node->JoinRank(request->secret(), request->world_size(), request->rank(),
                     MemberFromProto(request->member()), absl::Now() + timeout);
  if (!plan.ok()) return ToGrpc(plan.status());
  *response->mutable_plan() = PlanToProto(*plan);
  return grpc::Status::OK;
}

grpc::Status PeerService::Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                                v1::AbortResponse*) {
  Node* node = node_.load();
  if (node == nullptr) return kStarting;
  if (absl::Status certified =
          CheckCertified(context->auth_context().get(), certified_peers_, request->from_node());
      !certified.ok()) {
    return ToGrpc(certified);
  }
  const auto code = static_cast<absl::StatusCode>(request->code());
  if (code == absl::StatusCode::kOk) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "an abort needs an error code");
  }
  return ToGrpc(node->AbortFromPeer(request->comm_tag(), AbortNoticeFromProto(*request),
                                    request->from_node(), request->proof()));
}

grpc::Status PeerService::Probe(grpc::ServerContext*, const v1::ProbeRequest* request,
                                v1::ProbeResponse* response) {
  Node* node = node_.load();
  if (node == nullptr) return kStarting;
  // No amplification: the reply carries no more than the request did (and at most 1 MiB), so a
  // small request cannot make this daemon send a large answer to an address it names.
  constexpr int64_t kMaxReplyBytes = 1 << 20;
  const int64_t most =
      std::min<int64_t>(kMaxReplyBytes, static_cast<int64_t>(request->payload().size()));
  if (request->reply_bytes() < 0 || request->reply_bytes() > most) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("reply_bytes must be between 0 and the request's payload "
                                     "size (at most 1 MiB), ",
                                     most, " here; got ", request->reply_bytes()));
  }
  *response->mutable_member() = MemberToProto(node->self());
  response->mutable_payload()->resize(static_cast<size_t>(request->reply_bytes()));
  return grpc::Status::OK;
}

grpc::Status PeerService::DataKey(grpc::ServerContext* context, const v1::DataKeyRequest* request,
                                  v1::DataKeyResponse* response) {
  if (!certified_peers_ || data_keys_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this daemon runs without TLS: its data connections use no keys");
  }
  const std::vector<std::string> names = CertifiedNames(*context->auth_context());
  if (names.empty()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "the caller is not certified");
  }
  absl::StatusOr<transport::HandshakeKey> key = data_keys_->Issue(names, request->address());
  if (!key.ok()) return ToGrpc(key.status());
  response->set_key(reinterpret_cast<const char*>(key->data()), key->size());
  return grpc::Status::OK;
}

grpc::Status PeerService::ConnectPair(grpc::ServerContext* context,
                                      const v1::ConnectPairRequest* request,
                                      v1::ConnectPairResponse* response) {
  Node* node = node_.load();
  if (node == nullptr) return kStarting;
  if (absl::Status certified =
          CheckCertified(context->auth_context().get(), certified_peers_, request->from_node());
      !certified.ok()) {
    return ToGrpc(certified);
  }
  const absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  absl::StatusOr<Node::PairData> ours = node->ConnectPairFromPeer(
      request->comm_tag(), request->from_node(), request->from_data_address(), request->data(),
      request->proof(), absl::Now() + timeout);
  if (!ours.ok()) return ToGrpc(ours.status());
  response->set_data(std::move(ours->data));
  response->set_proof(std::move(ours->proof));
  return grpc::Status::OK;
}

}  // namespace baton::daemon
