#pragma once

// The arena route: a collective of ranks that share a daemon runs in the node's shared arena
// (collective/node_arena.h) instead of going through the daemon; across nodes local rank 0 runs
// the step between nodes through the daemon for the whole node (OpSpec::node_part), on a buffer
// in the arena. The arena is opened on the communicator's first collective; the daemon answers
// every local rank alike, so every one uses it or none does. Internal to libbaton; used by one
// operation at a time (the communicator's order).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "client/lib/call.h"
#include "client/lib/client_core.h"
#include "client/lib/daemon_link.h"
#include "client/lib/routes/router.h"
#include "collective/node_arena.h"
#include "common/shared_memory.h"

namespace baton::core {

class ArenaRoute {
 public:
  // Runs a call through the daemon (the daemon route, with the communicator's handling of a
  // call it refuses), with `send_bytes` read and `recv_bytes` written; returns the algorithm.
  using ThroughDaemon =
      absl::FunctionRef<absl::StatusOr<std::string>(Call& call, size_t send, size_t recv)>;

  // `link` and `router` must outlive this.
  ArenaRoute(DaemonLink& link, Router& router) : link_(link), router_(router) {}

  // What the arena says about `call` (CallFacts::arena_slot_bytes, arena_rank): unset when the
  // communicator has no arena (fewer than two ranks on this daemon, or the daemon keeps none)
  // or for a send or recv, which are outside the collective order. The first collective opens
  // it; an error when that failed for another reason, looked for again at the next call.
  absl::Status Describe(const Call& call, CallFacts& facts);

  // Runs `call` in the arena (RouteKind::kArena); returns "arena", or across nodes the
  // algorithm the daemons ran between them. A failure aborts the arena (every local rank fails
  // with it) and fails the communicator from this call on through the daemon.
  absl::StatusOr<std::string> Run(Call& call, const CallOptions& options,
                                  ThroughDaemon through_daemon);
  // Runs `call` (RouteKind::kArenaOrDaemon) where the local ranks agree, as local rank 0
  // proposes; learns the time each such call took.
  absl::StatusOr<std::string> RunWhereChosen(Call& call, const RouteChoice& choice,
                                             size_t send_bytes, size_t recv_bytes,
                                             const CallOptions& options,
                                             ThroughDaemon through_daemon);
  // A collective that runs elsewhere takes its place in the arena as a call that went to the
  // daemon (NodeArena::RecordDaemonCall), so that local ranks that run it in the arena find a
  // call that differs and fail at once. OK without an arena. Waits, by `deadline`, only for the
  // local ranks to reach the call before it.
  absl::Status RecordElsewhere(const Call& call, absl::Time deadline);

 private:
  absl::StatusOr<collective::NodeArena*> ArenaFor(const Call& call);
  absl::StatusOr<std::string> RunAcrossNodes(collective::NodeArena& arena, const Call& call,
                                             absl::Time deadline, ThroughDaemon through_daemon);
  static absl::Status RunOnNode(collective::NodeArena& arena, const Call& call,
                                absl::Time deadline);

  DaemonLink& link_;
  Router& router_;
  enum class State { kUnknown, kOpen, kNone };
  State state_ = State::kUnknown;
  std::shared_ptr<SharedMemory> memory_;
  std::optional<collective::NodeArena> arena_;
  // The last kArenaOrDaemon call, until its time is known (local rank 0 learns it at the next).
  struct Routed {
    collective::Collective collective;
    size_t bytes;
    ArenaOrDaemon route;
  };
  std::optional<Routed> last_routed_;
};

}  // namespace baton::core
