#include "daemon/peer_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {

v1::Member MemberToProto(const Member& member) {
  v1::Member proto;
  proto.set_node_name(member.node_name);
  proto.set_peer_address(member.peer_address);
  proto.set_data_address(member.data_address);
  for (const std::string& label : member.locality) proto.add_locality(label);
  for (const transport::TransportAddress& transport : member.transports) {
    v1::TransportAddress* entry = proto.add_transports();
    entry->set_transport(transport.transport);
    entry->set_address(transport.address);
  }
  return proto;
}

Member MemberFromProto(const v1::Member& proto) {
  Member member{proto.node_name(),
                proto.peer_address(),
                proto.data_address(),
                {proto.locality().begin(), proto.locality().end()}};
  // Bounded, whatever a peer sends: no daemon has more transports than that.
  constexpr int kMaxTransports = 16;
  for (const v1::TransportAddress& entry : proto.transports()) {
    if (static_cast<int>(member.transports.size()) == kMaxTransports) break;
    member.transports.push_back(transport::TransportAddress{entry.transport(), entry.address()});
  }
  return member;
}

void AbortNoticeToProto(const AbortNotice& notice, v1::AbortRequest& request) {
  request.set_code(static_cast<int>(notice.reason.code()));
  request.set_message(std::string{notice.reason.message()});
  if (notice.from_operation.has_value()) request.set_from_operation(*notice.from_operation);
  if (notice.departed.has_value()) {
    request.set_departed_rank(notice.departed->rank);
    for (const auto& [dst, messages] : notice.departed->sent) {
      v1::SentMessages* sent = request.add_sent();
      sent->set_rank(dst);
      sent->set_messages(messages);
    }
  }
}

AbortNotice AbortNoticeFromProto(const v1::AbortRequest& request) {
  AbortNotice notice{
      absl::Status(static_cast<absl::StatusCode>(request.code()), request.message())};
  if (request.has_from_operation()) notice.from_operation = request.from_operation();
  if (request.has_departed_rank()) {
    collective::Departure& departed = notice.departed.emplace();
    departed.rank = request.departed_rank();
    departed.sent.reserve(static_cast<size_t>(request.sent_size()));
    for (const v1::SentMessages& sent : request.sent()) {
      departed.sent.emplace_back(sent.rank(), sent.messages());
    }
  }
  return notice;
}

v1::Plan PlanToProto(const Plan& plan) {
  v1::Plan proto;
  proto.set_comm_tag(plan.comm_tag);
  proto.set_world_size(plan.world_size);
  proto.set_link_alpha_seconds(plan.link_alpha_seconds);
  proto.set_link_bytes_per_second(plan.link_bytes_per_second);
  proto.set_chunk_bytes(plan.chunk_bytes);
  proto.set_model_only(plan.model_only);
  for (int64_t counter : plan.measured_seed) proto.add_measured_seed(counter);
  for (const PlanDaemon& daemon : plan.daemons) {
    v1::PlanDaemon* entry = proto.add_daemons();
    *entry->mutable_member() = MemberToProto(daemon.member);
    for (int rank : daemon.ranks) entry->add_ranks(rank);
  }
  return proto;
}

Plan PlanFromProto(const v1::Plan& proto) {
  Plan plan;
  plan.comm_tag = proto.comm_tag();
  plan.world_size = proto.world_size();
  plan.link_alpha_seconds = proto.link_alpha_seconds();
  plan.link_bytes_per_second = proto.link_bytes_per_second();
  plan.chunk_bytes = proto.chunk_bytes();
  plan.model_only = proto.model_only();
  plan.measured_seed.assign(proto.measured_seed().begin(), proto.measured_seed().end());
  for (const v1::PlanDaemon& entry : proto.daemons()) {
    plan.daemons.push_back(
        PlanDaemon{MemberFromProto(entry.member()), {entry.ranks().begin(), entry.ranks().end()}});
  }
  return plan;
}

std::shared_ptr<v1::Peer::Stub> PeerClient::StubFor(const std::string& address, bool fresh) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<v1::Peer::Stub>& stub = stubs_[address];
  if (stub == nullptr || fresh) {
    stub = v1::Peer::NewStub(grpc::CreateChannel(address, channel_credentials_));
  }
  return stub;
}

absl::StatusOr<Plan> PeerClient::JoinRank(const std::string& root_address,
                                          const std::string& secret, int world_size, int rank,
                                          const Member& member, absl::Time deadline) {
  v1::JoinRankRequest request;
  request.set_secret(secret);
  request.set_world_size(world_size);
  request.set_rank(rank);
  *request.mutable_member() = MemberToProto(member);
  // The call ends at the join's deadline, whatever the root does: a root that is gone (its
  // channel in connection backoff) or stopped fails the join then, not later. The root is asked
  // to give up a little before it, so that its own DeadlineExceeded, which names the missing
  // ranks, comes back in time: a twentieth of the time left, at most a second.
  const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
  const absl::Duration margin = std::min(left / 20, absl::Seconds(1));
  request.set_timeout_ms(absl::ToInt64Milliseconds(left - margin));
  v1::JoinRankResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  if (!Track(&context)) return absl::UnavailableError("this daemon is shutting down");
  grpc::Status status = StubFor(root_address)->JoinRank(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::CANCELLED) {
      return absl::UnavailableError(absl::StrCat(
          "this daemon shut down while the join waited for root daemon ", root_address));
    }
    // The root's own DeadlineExceeded (naming missing ranks) passes through; only a root that
    // never answered at all is reported as such.
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("root daemon ", root_address,
                       " did not answer before the join's deadline (it is down, unreachable or "
                       "not responding)"));
    }
    return Annotate(FromGrpc(status), absl::StrCat("root daemon ", root_address));
  }
  return PlanFromProto(response.plan());
}

void PeerClient::AbortAsync(const std::string& address, uint64_t comm_tag,
                            const AbortNotice& notice, const std::string& from_node,
                            const std::string& proof) {
  struct Call {
    grpc::ClientContext context;
    v1::AbortRequest request;
    v1::AbortResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request.set_comm_tag(comm_tag);
  AbortNoticeToProto(notice, call->request);
  call->request.set_from_node(from_node);
  call->request.set_proof(proof);
  // A notice that does not arrive leaves that daemon's ranks waiting until their deadline with
  // no reason (and its node arena's ranks with none at all): it waits through a connection
  // that is still being made or failed for a moment (wait_for_ready), for as long as an
  // operation's default deadline, rather than give up after a few seconds on a loaded node.
  call->context.set_wait_for_ready(true);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + kAbortNoticeTimeout));
  std::shared_ptr<v1::Peer::Stub> stub = StubFor(address);
  stub->async()->Abort(&call->context, &call->request, &call->response,
                       [call, stub, address, comm_tag](const grpc::Status& status) {
                         if (!status.ok()) {
                           spdlog::warn("abort notice for communicator {:x} to {} failed: {}",
                                        comm_tag, address, status.error_message());
                         }
                       });
}

absl::StatusOr<Member> PeerClient::Probe(const std::string& address, size_t send_bytes,
                                         absl::Time deadline) {
  v1::ProbeRequest request;
  request.mutable_payload()->resize(send_bytes);
  v1::ProbeResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  if (!Track(&context)) return absl::CancelledError("this daemon is shutting down");
  grpc::Status status = StubFor(address)->Probe(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(FromGrpc(status), absl::StrCat("probe of ", address));
  Member answered = MemberFromProto(response.member());
  // Who answered is what the link monitor records this link's times against.
  if (absl::Status certified =
          CheckCertified(context.auth_context().get(), certified_peers_, answered.node_name);
      !certified.ok()) {
    return Annotate(certified, absl::StrCat("probe of ", address));
  }
  return answered;
}

absl::StatusOr<std::string> PeerClient::DataKey(const std::string& address, const std::string& node,
                                                const std::string& own_data_address,
                                                absl::Time deadline) {
  v1::DataKeyRequest request;
  request.set_address(own_data_address);
  v1::DataKeyResponse response;
  const std::string where = absl::StrCat("data key from ", node, " at ", address);
  // The cached channel may be waiting out its reconnection backoff after the peer went away
  // (a daemon restarted on the same address): a refused call is tried once more on a channel
  // of its own, which dials at once, so that a peer that is back is reached within the deadline.
  grpc::Status status;
  std::unique_ptr<grpc::ClientContext> context;
  for (bool fresh : {false, true}) {
    context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(deadline));
    if (!Track(context.get())) return absl::CancelledError("this daemon is shutting down");
    status = StubFor(address, fresh)->DataKey(context.get(), request, &response);
    Untrack(context.get());
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() >= deadline) break;
  }
  if (!status.ok()) return Annotate(FromGrpc(status), where);
  if (absl::Status certified =
          CheckCertified(context->auth_context().get(), certified_peers_, node);
      !certified.ok()) {
    return Annotate(certified, where);
  }
  return std::move(*response.mutable_key());
}

void PeerClient::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

bool PeerClient::Track(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return false;
  in_flight_.insert(context);
  return true;
}

void PeerClient::Untrack(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(context);
}

absl::StatusOr<PeerClient::PairData> PeerClient::ConnectPair(
    const std::string& address, const std::string& node, uint64_t comm_tag,
    const std::string& own_node, const std::string& own_data_address, const std::string& data,
    const std::string& proof, absl::Time deadline) {
  v1::ConnectPairRequest request;
  request.set_comm_tag(comm_tag);
  request.set_from_node(own_node);
  request.set_from_data_address(own_data_address);
  request.set_data(data);
  request.set_proof(proof);
  // The peer may not have the communicator yet (its ranks' plan is on its way): it waits for it
  // until a little before our deadline, so that its own error comes back in time.
  const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
  request.set_timeout_ms(absl::ToInt64Milliseconds(left - std::min(left / 20, absl::Seconds(1))));
  v1::ConnectPairResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  context.set_wait_for_ready(true);
  const std::string where =
      absl::StrCat("connection data exchange with node ", node, " at ", address);
  if (!Track(&context)) return absl::CancelledError("this daemon is shutting down");
  grpc::Status status = StubFor(address)->ConnectPair(&context, request, &response);
  Untrack(&context);
  if (!status.ok()) return Annotate(FromGrpc(status), where);
  if (absl::Status certified = CheckCertified(context.auth_context().get(), certified_peers_, node);
      !certified.ok()) {
    return Annotate(certified, where);
  }
  return PairData{std::move(*response.mutable_data()), std::move(*response.mutable_proof())};
}

}  // namespace baton::daemon
