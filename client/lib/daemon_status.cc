#include "client/lib/daemon_status.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "baton/v1/baton.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {

absl::StatusOr<v1::DaemonStatus> FetchDaemonStatus(const std::string& socket, bool probe_links,
                                                   absl::Duration timeout) {
  // GetStatus names no session, so it needs neither a session nor its token.
  auto channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Client::Stub> stub = v1::Client::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::GetStatusRequest request;
  request.set_probe_links(probe_links);
  v1::DaemonStatus status;
  const grpc::Status rpc = stub->GetStatus(&context, request, &status);
  if (!rpc.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach batond at ", socket, ": ", rpc.error_message()));
  }
  return status;
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &text, print).ok()) {
    return absl::InternalError("cannot render JSON");
  }
  return text;
}

}  // namespace baton::core
