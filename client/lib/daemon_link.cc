#include "client/lib/daemon_link.h"

#include <utility>

#include "common/status_macros.h"
#include "common/submission_channel.h"
#include "grpcpp/grpcpp.h"
#include "wire/op_codec.h"

namespace baton::core {

absl::StatusOr<std::string> DaemonLink::Run(const Call& call,
                                            const std::optional<v1::BufferRef>& send,
                                            const std::optional<v1::BufferRef>& recv,
                                            const CallOptions& options) {
  // The channel's page holds the counts of all_to_all_v for worlds up to kMaxVectorRanks;
  // larger ones go through gRPC (in order: this rank has one operation in flight at a time).
  const bool on_channel = channel_ != nullptr && wire::FitsChannel(call.spec);
  absl::StatusOr<std::string> ran =
      on_channel ? RunOnChannel(call, send, recv, options) : RunOnGrpc(call, send, recv, options);
  if (!ran.ok()) return abort_->Explain(ran.status());
  return ran;
}

absl::Status DaemonLink::AbortOnDaemon(absl::string_view reason, absl::StatusCode code,
                                       bool from_next_operation) {
  v1::AbortCommunicatorRequest request;
  request.set_session_id(session_->id());
  request.set_comm_tag(comm_tag_);
  request.set_rank(rank_);
  request.set_reason(std::string{reason.substr(0, kMaxReason)});
  request.set_code(static_cast<int32_t>(code));
  request.set_from_next_operation(from_next_operation);
  v1::AbortCommunicatorResponse response;
  grpc::ClientContext context;
  session_->Prepare(context, kAbortTimeout);
  return FromGrpc(session_->stub()->AbortCommunicator(&context, request, &response));
}

absl::StatusOr<std::string> DaemonLink::RunOnChannel(const Call& call,
                                                     const std::optional<v1::BufferRef>& send,
                                                     const std::optional<v1::BufferRef>& recv,
                                                     const CallOptions& options) {
  channel::OpDescriptor op;
  BATON_RETURN_IF_ERROR(wire::ToChannel(call.spec, &op, &channel_->vectors()));
  if (send) {
    op.send_buffer = send->buffer_id();
    op.send_offset = send->offset();
  }
  if (recv) {
    op.recv_buffer = recv->buffer_id();
    op.recv_offset = recv->offset();
  }
  op.timeout_ms = absl::ToInt64Milliseconds(options.timeout);
  if (call.stream_value != 0) {
    ChannelClient::Streams* streams = channel_->streams();
    if (streams == nullptr) {
      return absl::InternalError("a stream-ordered call came before the channel's streams");
    }
    op.event_set = streams->event_set;
    op.event_slot = call.event_slot;
    op.stream_value = call.stream_value;
  }
  return channel_->Run(op, options.timeout, *session_, abort_->flag());
}

absl::StatusOr<std::string> DaemonLink::RunOnGrpc(const Call& call,
                                                  const std::optional<v1::BufferRef>& send,
                                                  const std::optional<v1::BufferRef>& recv,
                                                  const CallOptions& options) {
  if (call.stream_value != 0) {
    return absl::InternalError("a stream-ordered call cannot go over gRPC");
  }
  v1::CollectiveRequest request;
  request.set_session_id(session_->id());
  request.set_comm_tag(comm_tag_);
  request.set_rank(rank_);
  wire::ToProto(call.spec, &request);
  request.set_timeout_ms(absl::ToInt64Milliseconds(options.timeout));
  if (send) *request.mutable_send() = *send;
  if (recv) *request.mutable_recv() = *recv;
  v1::CollectiveResponse response;
  grpc::ClientContext context;
  // The daemon enforces the timeout; the RPC deadline only guards against a daemon that
  // vanished.
  session_->Prepare(context, options.timeout + absl::Seconds(10));
  // Abort cancels it.
  BATON_RETURN_IF_ERROR(abort_->Cancellable(context, [&] {
    return FromGrpc(session_->stub()->Collective(&context, request, &response));
  }));
  return response.algorithm();
}

}  // namespace baton::core
