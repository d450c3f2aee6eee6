#pragma once

// An in-process transport for tests: endpoints created on one Fabric exchange messages through
// memory. A fabric can also take an endpoint down to simulate a lost peer.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace baton::transport {

class InMemoryFabric {
 public:
  virtual ~InMemoryFabric() = default;

  // Creates an endpoint whose address is `address`. AlreadyExists if the address is taken.
  // The endpoint must not outlive the fabric.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(const std::string& address) = 0;

  // Simulates the loss of the endpoint at `address`: its peers' pending and future operations
  // with it fail with Unavailable naming it, as when a daemon's process dies.
  virtual void Kill(const std::string& address) = 0;
};

std::unique_ptr<InMemoryFabric> NewInMemoryFabric();

}  // namespace baton::transport
