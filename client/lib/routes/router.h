#pragma once

// Where a rank's call runs, decided in one place. A communicator's Router holds everything the
// decision depends on besides the call itself: the communicator's shape, the settings read from
// the environment once ($BATON_ARENA, $BATON_ARENA_LARGE, $BATON_ALGO, $BATON_SUBMIT) and the
// node arena's route tuner (collective/route_tuner.h). Choose reads nothing else and talks to
// no daemon, so it is tested on its own (tests/client/router_test.cc).
//
// The routes live beside this file, one per file: DaemonRoute (host memory through the daemon),
// DeviceRoute (device memory through the daemon, stream-ordered or not) and ArenaRoute (the
// node's shared arena, whose step between nodes goes through the daemon). A new route is a new
// file, a RouteKind and one line in Choose.

#include <cstddef>
#include <map>
#include <optional>

#include "absl/status/statusor.h"
#include "collective/algorithm.h"
#include "collective/op_spec.h"
#include "collective/route_tuner.h"

namespace baton::core {

enum class RouteKind {
  kDaemon,  // host memory, through the daemon
  kDevice,  // device memory, through the daemon
  kArena,   // in the node arena
  // In the arena or through the daemon, as local rank 0 proposes and every local rank agrees
  // (ArenaRoute::RunWhereChosen): an all_reduce within the node too large for a slot, or a
  // reduce_scatter, which the arena runs a slot at a time.
  kArenaOrDaemon,
};
const char* RouteKindName(RouteKind kind);

using ArenaOrDaemon = collective::RouteTuner::Route;

// The settings of routing, as the environment gives them.
struct RouteSettings {
  bool arena = true;  // $BATON_ARENA is not "0"
  // $BATON_ARENA_LARGE: "arena" or "daemon" forces where a kArenaOrDaemon call runs; unset,
  // empty or "auto" leaves it to the tuner; anything else is an error the call reports.
  absl::StatusOr<std::optional<ArenaOrDaemon>> arena_large = std::nullopt;
  // $BATON_ALGO (like NCCL_ALGO): the algorithm of every collective it implements, unless the
  // call asks for one; an error when it names none.
  absl::StatusOr<std::optional<collective::Algorithm>> algorithm = std::nullopt;
  bool channel = true;  // $BATON_SUBMIT is not "grpc": operations go through the channel

  static RouteSettings FromEnvironment();
};

// What the communicator looks like from this rank.
struct CommShape {
  int world_size = 1;
  int rank = 0;
  int daemon_count = 1;
  int local_ranks = 1;  // its ranks on this rank's daemon
};

// What a call's buffers and the communicator's arena say about it.
struct CallFacts {
  bool device_memory = false;  // a buffer is device memory, or the call is stream-ordered
  // The arena's slot size and this rank's place in it, when the communicator has a node arena
  // and the call is a collective; unset otherwise.
  std::optional<size_t> arena_slot_bytes;
  int arena_rank = 0;
  size_t send_bytes = 0;  // this rank's input
};

struct RouteChoice {
  RouteKind kind = RouteKind::kDaemon;
  // kArenaOrDaemon at local rank 0: where it proposes the call runs ($BATON_ARENA_LARGE, else
  // the tuner); the error of a $BATON_ARENA_LARGE it does not understand. kArena elsewhere.
  absl::StatusOr<ArenaOrDaemon> proposal = ArenaOrDaemon::kArena;
};

class Router {
 public:
  Router(CommShape shape, RouteSettings settings) : shape_(shape), settings_(std::move(settings)) {}

  const CommShape& shape() const { return shape_; }
  const RouteSettings& settings() const { return settings_; }

  // The algorithm a call of `collective` runs: `asked` (the call's own choice), else $BATON_ALGO's
  // where that implements the collective, else none (the daemon's tuner picks). InvalidArgument
  // when $BATON_ALGO names no algorithm.
  absl::StatusOr<std::optional<collective::Algorithm>> Algorithm(
      collective::Collective collective, std::optional<collective::Algorithm> asked) const;

  // Where the call `spec` runs. Ranks whose calls match decide alike.
  RouteChoice Choose(const collective::OpSpec& spec, const CallFacts& facts);

  // A kArenaOrDaemon call of `collective` with `bytes` of input took `took` on `route`, timed to
  // its slowest local rank (local rank 0 learns it at the next such call).
  void Learn(collective::Collective collective, size_t bytes, ArenaOrDaemon route,
             absl::Duration took);

 private:
  const CommShape shape_;
  const RouteSettings settings_;
  std::map<collective::Collective, collective::RouteTuner> tuners_;
};

}  // namespace baton::core
