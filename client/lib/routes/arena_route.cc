#include "client/lib/routes/arena_route.h"

#include <utility>

#include "collective/schedule.h"
#include "common/status_macros.h"

namespace baton::core {

absl::StatusOr<collective::NodeArena*> ArenaRoute::ArenaFor(const Call& call) {
  if (router_.shape().local_ranks < 2 || call.spec.PointToPoint()) return nullptr;
  if (state_ == State::kUnknown) {
    absl::StatusOr<Session::Arena> opened =
        link_.session().OpenArena(link_.comm_tag(), router_.shape().rank);
    // The daemon answers FailedPrecondition when it has none for this communicator.
    if (absl::IsFailedPrecondition(opened.status())) {
      state_ = State::kNone;
      return nullptr;
    }
    if (!opened.ok()) return opened.status();
    BATON_ASSIGN_OR_RETURN(collective::NodeArena attached,
                           collective::NodeArena::Attach(opened->memory->data(),
                                                         opened->memory->size(), opened->rank));
    memory_ = std::move(opened->memory);
    arena_.emplace(attached);
    state_ = State::kOpen;
  }
  return state_ == State::kOpen ? &*arena_ : nullptr;
}

absl::Status ArenaRoute::Describe(const Call& call, CallFacts& facts) {
  BATON_ASSIGN_OR_RETURN(collective::NodeArena * arena, ArenaFor(call));
  if (arena == nullptr) return absl::OkStatus();
  facts.arena_slot_bytes = arena->slot_bytes();
  facts.arena_rank = arena->rank();
  return absl::OkStatus();
}

absl::Status ArenaRoute::RecordElsewhere(const Call& call, absl::Time deadline) {
  BATON_ASSIGN_OR_RETURN(collective::NodeArena * arena, ArenaFor(call));
  return arena == nullptr ? absl::OkStatus() : arena->RecordDaemonCall(call.spec, deadline);
}

absl::StatusOr<std::string> ArenaRoute::RunWhereChosen(Call& call, const RouteChoice& choice,
                                                       size_t send_bytes, size_t recv_bytes,
                                                       const CallOptions& options,
                                                       ThroughDaemon through_daemon) {
  BATON_ASSIGN_OR_RETURN(collective::NodeArena * arena, ArenaFor(call));
  if (arena == nullptr) return absl::InternalError("a call chosen for the arena found none");
  if (!choice.proposal.ok()) {
    // Every local rank fails with the reason, at once.
    arena->Abort(choice.proposal.status());
    link_
        .AbortOnDaemon(choice.proposal.status().message(), choice.proposal.status().code(),
                       /*from_next_operation=*/true)
        .IgnoreError();
    return choice.proposal.status();
  }
  absl::StatusOr<collective::NodeArena::RouteAgreement> agreed = arena->AgreeOnRoute(
      call.spec, *choice.proposal == ArenaOrDaemon::kArena, absl::Now() + options.timeout);
  if (!agreed.ok()) {
    link_
        .AbortOnDaemon(agreed.status().message(), agreed.status().code(),
                       /*from_next_operation=*/true)
        .IgnoreError();
    return agreed.status();
  }
  // The previous such call, timed to its slowest rank (rank 0 alone would see the daemon's
  // route finish early: the daemon wakes the ranks one after the other).
  if (agreed->last_took && last_routed_) {
    router_.Learn(last_routed_->collective, last_routed_->bytes, last_routed_->route,
                  *agreed->last_took);
  }
  const ArenaOrDaemon route = agreed->in_arena ? ArenaOrDaemon::kArena : ArenaOrDaemon::kDaemon;
  absl::StatusOr<std::string> ran = route == ArenaOrDaemon::kArena
                                        ? Run(call, options, through_daemon)
                                        : through_daemon(call, send_bytes, recv_bytes);
  last_routed_.reset();
  if (ran.ok()) {
    arena->FinishedRoute();
    last_routed_ = Routed{call.spec.collective, send_bytes, route};
  }
  return ran;
}

absl::StatusOr<std::string> ArenaRoute::Run(Call& call, const CallOptions& options,
                                            ThroughDaemon through_daemon) {
  BATON_ASSIGN_OR_RETURN(collective::NodeArena * arena, ArenaFor(call));
  if (arena == nullptr) return absl::InternalError("a call routed to the arena found none");
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<std::string> ran;
  if (router_.shape().daemon_count > 1) {
    ran = RunAcrossNodes(*arena, call, deadline, through_daemon);
  } else if (absl::Status status = RunOnNode(*arena, call, deadline); status.ok()) {
    ran = "arena";
  } else {
    ran = status;
  }
  if (!ran.ok() && !absl::IsInvalidArgument(ran.status())) {
    // The arena was aborted (a mismatch, a deadline, the daemon): the communicator fails from
    // this call on, as after a refused call. A peer waiting in the daemon because its call
    // differed fails at once with the reason instead of at its deadline; what the daemons
    // still run of earlier calls (another node may still finish the previous one) goes on,
    // which an abort of the whole communicator would cut short.
    link_
        .AbortOnDaemon(ran.status().message(), ran.status().code(),
                       /*from_next_operation=*/true)
        .IgnoreError();
  }
  return ran;
}

absl::Status ArenaRoute::RunOnNode(collective::NodeArena& arena, const Call& call,
                                   absl::Time deadline) {
  const collective::OpSpec& spec = call.spec;
  using collective::Collective;
  switch (spec.collective) {
    case Collective::kAllReduce:
      return arena.AllReduce(call.send, call.recv, spec.count, spec.type, spec.op, deadline);
    case Collective::kBroadcast:
      return arena.Broadcast(call.send, call.recv, spec.count, spec.type, spec.root, deadline);
    case Collective::kAllGather:
      return arena.AllGather(call.send, call.recv, spec.count, spec.type, deadline);
    case Collective::kReduce:
      return arena.Reduce(call.send, call.recv, spec.count, spec.type, spec.op, spec.root,
                          deadline);
    case Collective::kReduceScatter:
      return arena.ReduceScatter(call.send, call.recv, spec.count, spec.type, spec.op, deadline);
    case Collective::kAllToAll:
      return arena.AllToAll(call.send, call.recv, spec.count, spec.type, deadline);
    default:
      return arena.Barrier(deadline);
  }
}

// Local rank 0 runs the step between nodes through the daemon for the node (OpSpec::node_part),
// on a buffer in the arena that holds the node's part (collective/schedule.h,
// NodePartElements).
absl::StatusOr<std::string> ArenaRoute::RunAcrossNodes(collective::NodeArena& arena,
                                                       const Call& call, absl::Time deadline,
                                                       ThroughDaemon through_daemon) {
  using collective::Collective;
  const collective::OpSpec& spec = call.spec;
  const int world = router_.shape().world_size;
  const int rank = router_.shape().rank;
  const uint64_t node_elements = collective::NodePartElements(spec, world);
  const size_t node_bytes = node_elements * collective::DataTypeSize(spec.type);
  auto across = [&](void* buffer) -> absl::StatusOr<std::string> {
    Call node = call;
    node.spec.node_part = true;
    node.send = nullptr;  // the daemon reads and writes the one buffer
    node.recv = buffer;
    node.recv_elements = node_elements;
    return through_daemon(node, 0, node_bytes);
  };
  switch (spec.collective) {
    case Collective::kAllReduce:
      return arena.AllReduceAcross(call.send, call.recv, spec.count, spec.type, spec.op, deadline,
                                   across);
    case Collective::kBroadcast:
      return arena.BroadcastAcross(call.send, call.recv, spec.count, spec.type, spec.root,
                                   rank == spec.root, deadline, across);
    case Collective::kReduce:
      return arena.ReduceAcross(call.send, call.recv, spec.count, spec.type, spec.op, spec.root,
                                rank == spec.root, deadline, across);
    case Collective::kAllGather:
      return arena.AllGatherAcross(call.send, call.recv, spec.count, spec.type, rank, world,
                                   deadline, across);
    case Collective::kReduceScatter:
      return arena.ReduceScatterAcross(call.send, call.recv, spec.count, spec.type, spec.op, rank,
                                       world, deadline, across);
    default:
      return arena.BarrierAcross(deadline, across);
  }
}

}  // namespace baton::core
