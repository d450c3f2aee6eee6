#pragma once

// The one place where absl::Status and grpc::Status meet. Canonical codes map 1:1.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace baton::daemon {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string{status.message()});
}

inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace baton::daemon
