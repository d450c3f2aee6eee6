#pragma once

// The registry: every (collective, algorithm) Baton implements, with the schedule that runs it on
// a daemon's local ranks (collective/schedule.h), the cost model the tuner predicts it with and
// a one-line summary. IsSupported, the tuner's candidates, the daemon's dispatch, error messages
// and --help texts all read it; adding an operation or an algorithm is one entry here plus its
// own files.

#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/schedule.h"
#include "collective/tuner.h"

namespace baton::collective {

// Predicted time across `daemons` (>= 2) daemons for one daemon's worth of `bytes`.
using CostFn = absl::Duration (*)(int daemons, double bytes, double chunk_bytes,
                                  const LinkModel& model);

struct OpImplementation {
  Collective collective;
  Algorithm algorithm;
  // The hierarchical schedule. Null for send and recv, which do not run in the communicator's
  // collective sequence (collective/point_to_point.h moves them).
  ScheduleFn run;
  // The tuner's model; null where an algorithm is the collective's only one (not modelled).
  CostFn cost;
  const char* summary;
};

// Every implementation; a collective's first entry is its default (the one a single daemon
// reports, and the tuner's choice when there is nothing to choose).
std::span<const OpImplementation> Implementations();

// The entry for (collective, algorithm), or null when there is none.
const OpImplementation* FindImplementation(Collective collective, Algorithm algorithm);

// The algorithms implementing `collective`, in registry order (never empty for a valid one).
std::vector<Algorithm> AlgorithmsOf(Collective collective);

// "ring, tree, doubling, halving_doubling": the algorithms of `collective`, for messages.
std::string AlgorithmNamesOf(Collective collective);

// One line per collective, "  all_reduce       ring, tree, doubling, halving_doubling", for
// --help texts.
std::string DescribeImplementations();

}  // namespace baton::collective
