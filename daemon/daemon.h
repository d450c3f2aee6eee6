#pragma once

// batond as an object: binds every listener, serves until Shutdown. main.cc wraps it with flags
// and signals; integration tests run it as a process through the same main.

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config.h"

namespace baton::daemon {

class Daemon {
 public:
  // Takes the socket's lock (FailedPrecondition naming the owner's pid if another daemon holds
  // it), binds the client socket, peer port, data port and metrics port, and starts serving.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Config& config);
  virtual ~Daemon() = default;

  // Stops serving: in-flight operations fail with Unavailable, peers are told, listeners close,
  // and the socket file is removed. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace baton::daemon
