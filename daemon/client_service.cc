#include "daemon/client_service.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/log_limiter.h"
#include "common/session_protocol.h"
#include "daemon/grpc_status.h"
#include "spdlog/spdlog.h"
#include "topology/graph_json.h"
#include "topology/paths.h"
#include "wire/op_codec.h"

namespace baton::daemon {
namespace {

// A client's timeout in milliseconds as a deadline; zero or less means "the default".
absl::Time DeadlineFrom(int64_t timeout_ms, absl::Duration fallback) {
  return absl::Now() + (timeout_ms > 0 ? absl::Milliseconds(timeout_ms) : fallback);
}

}  // namespace

grpc::Status ClientService::Authenticate(const grpc::ServerContext* context,
                                         uint64_t session_id) const {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(session::kTokenMetadata);
  const std::string token =
      it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
  return ToGrpc(node_->sessions().Authenticate(session_id, token));
}

grpc::Status ClientService::CreateCommId(grpc::ServerContext* context,
                                         const v1::CreateCommIdRequest* request,
                                         v1::CreateCommIdResponse* response) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  absl::StatusOr<std::string> id = node_->CreateCommId(request->session_id());
  if (!id.ok()) {
    spdlog::debug("session {} got no communicator id: {}", request->session_id(),
                  id.status().ToString());
    return ToGrpc(id.status());
  }
  response->set_comm_id(*std::move(id));
  return grpc::Status::OK;
}

grpc::Status ClientService::Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                                 v1::JoinResponse* response) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  absl::StatusOr<JoinResult> result =
      node_->Join(request->session_id(), request->comm_id(), request->world_size(), request->rank(),
                  DeadlineFrom(request->timeout_ms(), absl::Minutes(5)));
  if (!result.ok()) {
    // Any session can make joins fail as often as it likes: a few lines a minute at most.
    static LogLimiter join_failures(10, absl::Minutes(1));
    join_failures.Log(spdlog::level::info, "join of rank {} failed: {}", request->rank(),
                      result.status().ToString());
    return ToGrpc(result.status());
  }
  response->set_comm_tag(result->comm_tag);
  response->set_daemon_count(result->daemon_count);
  response->set_local_ranks(result->local_ranks);
  return grpc::Status::OK;
}

grpc::Status ClientService::Destroy(grpc::ServerContext* context, const v1::DestroyRequest* request,
                                    v1::DestroyResponse*) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  return ToGrpc(node_->Destroy(request->session_id(), request->comm_tag(), request->rank()));
}

grpc::Status ClientService::Collective(grpc::ServerContext* context,
                                       const v1::CollectiveRequest* request,
                                       v1::CollectiveResponse* response) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  CollectiveCall call;
  call.session_id = request->session_id();
  call.comm_tag = request->comm_tag();
  call.rank = request->rank();
  absl::StatusOr<collective::OpSpec> spec = wire::FromProto(*request);
  if (!spec.ok()) return ToGrpc(spec.status());
  call.spec = *std::move(spec);
  call.send_buffer = request->send().buffer_id();
  call.send_offset = request->send().offset();
  call.recv_buffer = request->recv().buffer_id();
  call.recv_offset = request->recv().offset();
  call.deadline = DeadlineFrom(request->timeout_ms(), absl::Minutes(10));
  absl::StatusOr<std::string> algorithm = node_->RunCollective(call);
  if (!algorithm.ok()) return ToGrpc(algorithm.status());
  response->set_algorithm(*algorithm);
  return grpc::Status::OK;
}

grpc::Status ClientService::OpenChannel(grpc::ServerContext* context,
                                        const v1::OpenChannelRequest* request,
                                        v1::OpenChannelResponse*) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  return ToGrpc(node_->OpenChannel(request->session_id(), request->comm_tag(), request->rank(),
                                   request->buffer_id()));
}

grpc::Status ClientService::AbortCommunicator(grpc::ServerContext* context,
                                              const v1::AbortCommunicatorRequest* request,
                                              v1::AbortCommunicatorResponse*) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  // The reason reaches every rank's error messages: bound it.
  constexpr size_t kMaxReason = 512;
  const int32_t code =
      request->code() == 0 ? static_cast<int32_t>(absl::StatusCode::kAborted) : request->code();
  if (code < 1 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("abort code ", request->code(), " is not a status code")));
  }
  return ToGrpc(node_->AbortCommunicator(request->session_id(), request->comm_tag(),
                                         request->rank(), request->reason().substr(0, kMaxReason),
                                         static_cast<absl::StatusCode>(code),
                                         request->from_next_operation()));
}

grpc::Status ClientService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest* request,
                                      v1::DaemonStatus* response) {
  const Member& self = node_->self();
  response->set_node_name(self.node_name);
  response->set_version(info_.version);
  response->set_peer_address(self.peer_address);
  response->set_data_address(self.data_address);
  response->set_metrics_address(info_.metrics_address);
  response->set_pid(getpid());
  response->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - info_.started));
  response->set_sessions(node_->sessions().Count());
  for (const std::string& label : self.locality) response->add_locality(label);
  for (const std::shared_ptr<Communicator>& comm : node_->communicators().List()) {
    v1::CommunicatorStatus* entry = response->add_communicators();
    entry->set_comm_tag(comm->plan().comm_tag);
    entry->set_world_size(comm->plan().world_size);
    for (int rank : comm->local_ranks()) entry->add_local_ranks(rank);
    entry->set_daemon_count(static_cast<int>(comm->plan().daemons.size()));
    entry->set_ops_completed(comm->ops_completed());
    entry->set_state(comm->State());
  }
  if (request->probe_links()) node_->ProbeLinksNow();
  for (const LinkView& link : node_->Links()) {
    v1::LinkStatus* entry = response->add_links();
    entry->set_peer(link.peer.data_address);
    entry->set_peer_address(link.peer.peer_address);
    entry->set_peer_node(link.peer.node_name);
    for (const std::string& label : link.peer.locality) entry->add_peer_locality(label);
    entry->set_transport("tcp");
    entry->set_tx_bytes(link.traffic.tx_bytes);
    entry->set_rx_bytes(link.traffic.rx_bytes);
    entry->set_tx_messages(link.traffic.tx_messages);
    entry->set_rx_messages(link.traffic.rx_messages);
    entry->set_errors(link.traffic.errors);
    entry->set_retransmits(link.traffic.retransmits);
    entry->set_up(link.traffic.up);
    if (!link.health) continue;
    entry->set_peer_up(link.health->up);
    entry->set_rtt_seconds(absl::ToDoubleSeconds(link.health->rtt));
    entry->set_data_rtt_seconds(absl::ToDoubleSeconds(link.health->data_rtt));
    entry->set_bandwidth_bytes_per_second(link.health->bandwidth);
    entry->set_flagged_bandwidth(link.health->flagged_bandwidth);
    entry->set_flagged_rtt(link.health->flagged_rtt);
    entry->set_probes_ok(link.health->probes_ok);
    entry->set_probes_failed(link.health->probes_failed);
    entry->set_last_probe_error(link.health->last_error);
  }
  return grpc::Status::OK;
}

grpc::Status ClientService::Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                                    v1::ExplainResponse* response) {
  if (grpc::Status s = Authenticate(context, request->session_id()); !s.ok()) return s;
  std::optional<collective::Collective> kind = collective::ParseCollective(request->collective());
  if (!kind) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("unknown collective '", request->collective(), "'"));
  }
  absl::StatusOr<std::vector<collective::AlgorithmCost>> costs = node_->Explain(
      request->session_id(), request->comm_tag(), *kind, request->data_type(), request->count());
  if (!costs.ok()) return ToGrpc(costs.status());
  for (const collective::AlgorithmCost& cost : *costs) {
    v1::AlgorithmEstimate* estimate = response->add_estimates();
    estimate->set_algorithm(std::string{collective::AlgorithmName(cost.algorithm)});
    estimate->set_predicted_seconds(absl::ToDoubleSeconds(cost.predicted));
    if (cost.measured) estimate->set_measured_seconds(absl::ToDoubleSeconds(*cost.measured));
    estimate->set_measured_samples(cost.samples);
  }
  if (std::shared_ptr<Communicator> comm = node_->communicators().Find(request->comm_tag())) {
    response->set_daemons(static_cast<int>(comm->plan().daemons.size()));
    response->set_link_alpha_seconds(comm->plan().link_alpha_seconds);
    response->set_link_bytes_per_second(comm->plan().link_bytes_per_second);
  }
  return grpc::Status::OK;
}

grpc::Status ClientService::GetTopology(grpc::ServerContext*, const v1::GetTopologyRequest*,
                                        v1::Topology* response) {
  const NodeTopology& topology = node_->topology();
  response->set_node_name(node_->self().node_name);
  response->set_source(topology.source);
  response->set_graph_json(topology::GraphToJson(topology.graph));
  response->set_path_matrix(
      topology::FormatPathMatrix(topology.graph, topology::PathTable(topology.graph)));
  response->set_note(topology.note);
  return grpc::Status::OK;
}

}  // namespace baton::daemon
