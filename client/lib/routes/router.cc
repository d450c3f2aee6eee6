#include "client/lib/routes/router.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "collective/data_type.h"

namespace baton::core {

const char* RouteKindName(RouteKind kind) {
  switch (kind) {
    case RouteKind::kDaemon:
      return "daemon";
    case RouteKind::kDevice:
      return "device";
    case RouteKind::kArena:
      return "arena";
    case RouteKind::kArenaOrDaemon:
      return "arena or daemon";
  }
  return "unknown";
}

RouteSettings RouteSettings::FromEnvironment() {
  auto env = [](const char* name) -> absl::string_view {
    const char* value = std::getenv(name);
    return value == nullptr ? absl::string_view() : absl::string_view(value);
  };
  RouteSettings settings;
  settings.arena = env("BATON_ARENA") != "0";
  const absl::string_view large = env("BATON_ARENA_LARGE");
  if (large == "arena") {
    settings.arena_large = ArenaOrDaemon::kArena;
  } else if (large == "daemon") {
    settings.arena_large = ArenaOrDaemon::kDaemon;
  } else if (!large.empty() && large != "auto") {
    settings.arena_large = absl::InvalidArgumentError(
        absl::StrCat("BATON_ARENA_LARGE='", large, "' is not one of auto, arena, daemon"));
  }
  if (const absl::string_view algo = env("BATON_ALGO"); !algo.empty()) {
    std::optional<collective::Algorithm> parsed = collective::ParseAlgorithm(algo);
    if (parsed) {
      settings.algorithm = parsed;
    } else {
      settings.algorithm = absl::InvalidArgumentError(
          absl::StrCat("BATON_ALGO='", algo, "' is not one of ", collective::AlgorithmNames()));
    }
  }
  settings.channel = env("BATON_SUBMIT") != "grpc";
  return settings;
}

absl::StatusOr<std::optional<collective::Algorithm>> Router::Algorithm(
    collective::Collective collective, std::optional<collective::Algorithm> asked) const {
  if (asked) return asked;
  if (!settings_.algorithm.ok()) return settings_.algorithm.status();
  const std::optional<collective::Algorithm>& forced = *settings_.algorithm;
  if (forced && collective::IsSupported(collective, *forced)) return forced;
  return std::nullopt;
}

RouteChoice Router::Choose(const collective::OpSpec& spec, const CallFacts& facts) {
  using collective::Collective;
  RouteChoice choice;
  const RouteKind through_daemon = facts.device_memory ? RouteKind::kDevice : RouteKind::kDaemon;
  choice.kind = through_daemon;
  // The arena takes host memory only, and no call that asks for an algorithm.
  if (!facts.arena_slot_bytes || !settings_.arena || facts.device_memory || spec.algorithm) {
    return choice;
  }
  // How many blocks of the call's count one slot must hold.
  size_t blocks = 1;
  switch (spec.collective) {
    case Collective::kBarrier:
      choice.kind = RouteKind::kArena;
      return choice;
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
      break;
    case Collective::kAllGather:
      // Across nodes local rank 0's slot holds the world's blocks (NodeArena::AllGatherAcross).
      if (shape_.daemon_count > 1) blocks = static_cast<size_t>(shape_.world_size);
      break;
    case Collective::kReduceScatter:
      blocks = static_cast<size_t>(shape_.world_size);
      break;
    case Collective::kAllToAll:
      // No local phase across nodes.
      if (shape_.daemon_count > 1) return choice;
      blocks = static_cast<size_t>(shape_.world_size);
      break;
    default:
      return choice;
  }
  const size_t element = collective::DataTypeSize(spec.type);
  if (element > 0 && spec.count <= *facts.arena_slot_bytes / element / blocks) {
    choice.kind = RouteKind::kArena;
    return choice;
  }
  const bool slot_at_a_time =
      spec.collective == Collective::kAllReduce || spec.collective == Collective::kReduceScatter;
  if (!slot_at_a_time || shape_.daemon_count != 1) return choice;
  choice.kind = RouteKind::kArenaOrDaemon;
  if (facts.arena_rank == 0) {
    // Only local rank 0's proposal counts (NodeArena::AgreeOnRoute).
    if (!settings_.arena_large.ok()) {
      choice.proposal = settings_.arena_large.status();
    } else if (settings_.arena_large->has_value()) {
      choice.proposal = **settings_.arena_large;
    } else {
      choice.proposal = tuners_[spec.collective].Choose(facts.send_bytes);
    }
  }
  return choice;
}

void Router::Learn(collective::Collective collective, size_t bytes, ArenaOrDaemon route,
                   absl::Duration took) {
  tuners_[collective].Add(bytes, route, took);
}

}  // namespace baton::core
