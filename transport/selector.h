#pragma once

// Which transport carries the messages between this daemon and one peer: the first of this
// daemon's transports, in its order of preference, that can reach the peer (Transport::CanReach,
// as NCCL's canConnect), given what the peer advertises. TCP reaches every daemon that has it;
// shared memory (later) only daemons on the same node, so it comes first where it exists.

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace baton::transport {

struct SelectedTransport {
  Transport* transport = nullptr;  // one of those given; not owned
  std::string address;             // the peer's advertised address on it
};

// Picks the first of `transports` (not null) that can reach `peer` from `self` and for which the
// peer advertises an address. FailedPrecondition naming the peer's node, what it advertises and
// what this daemon has, when none can.
absl::StatusOr<SelectedTransport> SelectTransport(std::span<Transport* const> transports,
                                                  const PeerInfo& self, const PeerInfo& peer);

// "tcp at 10.0.0.2:7461, shm at node-b": what a daemon advertises, for error messages.
std::string DescribeTransports(const PeerInfo& info);

}  // namespace baton::transport
