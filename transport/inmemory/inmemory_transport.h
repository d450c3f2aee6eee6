#pragma once

// An in-process transport for tests: endpoints created on one Fabric exchange messages through
// memory, and write one-sided into the regions their peers expose (a copy under the fabric's
// lock). A fabric can also take an endpoint down to simulate a lost peer, and ask for connection
// data to be exchanged per pair and for flow control (InMemoryFabricOptions). Messages cost no
// bytes beyond their payload: LinkStats count payload bytes only.
//
// With a window (InMemoryFabricOptions), its endpoints use flow control as TCP's do
// (transport/flow_control.h): each grants each peer that window, a send waits for credit or a
// clear-to-send, and the links report kCreditViolationsCounter. Without (the default), a send
// never waits and nothing bounds what a receiver keeps unexpected.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace baton::transport {

class InMemoryFabric {
 public:
  virtual ~InMemoryFabric() = default;

  // Creates an endpoint whose address is `address`. AlreadyExists if the address is taken.
  // The endpoint must not outlive the fabric.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(const std::string& address) = 0;

  // An in-memory Transport whose Listen() creates the endpoint `address` on this fabric (once:
  // AlreadyExists after). It reaches every peer that advertises an "inmemory" address, and
  // moves host memory, which needs no registration. Must not outlive the fabric.
  virtual std::unique_ptr<Transport> NewTransport(const std::string& address) = 0;

  // Simulates the loss of the endpoint at `address`: its peers' pending and future operations
  // with it fail with Unavailable naming it, as when a daemon's process dies.
  virtual void Kill(const std::string& address) = 0;
};

inline constexpr std::string_view kInMemoryTransportName = "inmemory";

struct InMemoryFabricOptions {
  // Each endpoint's link with a peer carries messages and writes only once both have exchanged
  // connection data (Endpoint::ConnectionData, Endpoint::Connect), as a verbs transport's queue
  // pairs need: ConnectionData(peer) is a random token the endpoint makes for that peer, and
  // Connect(peer, data) takes only the token the peer made for this endpoint (InvalidArgument
  // otherwise; Unavailable while there is no such peer). A send or write over a link not
  // connected both ways fails with FailedPrecondition naming the peer. Off: there is no
  // connection data (Endpoint's defaults).
  bool require_connection_data = false;
  // As TcpOptions' fields of the same names: the credit each endpoint grants each peer (0: no
  // flow control), and what those windows may add up to per endpoint (0: no bound).
  uint64_t max_unexpected_bytes_per_peer = 0;
  uint64_t max_unexpected_bytes_total = 0;
};

std::unique_ptr<InMemoryFabric> NewInMemoryFabric(const InMemoryFabricOptions& options = {});

}  // namespace baton::transport
