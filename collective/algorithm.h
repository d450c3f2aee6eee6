#pragma once

// The collectives Baton runs and the algorithm families that implement them, with their names as
// users, metrics and the daemon's replies write them, and which combinations exist.
//
//   collective       ring                           tree                  direct           doubling
//   all_reduce       RingAllReduce                  TreeAllReduce         - DoublingAllReduce
//   reduce_scatter   RingReduceScatter              -                     -
//   all_gather       RingAllGather                  -                     -
//   broadcast        RingBroadcast (chain)          -                     -
//   reduce           RingReduce (chain)             -                     -
//   all_to_all       -                              -                     DirectAllToAll
//   barrier          -                              -                     DisseminationBarrier

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace baton::collective {

enum class Collective {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kBarrier,
  kGather,     // the root receives every rank's block, in rank order
  kScatter,    // the root sends block r to rank r
  kAllToAllV,  // all_to_all with per-peer counts and displacements (MPI_Alltoallv)
  kSend,       // point to point: this rank's buffer to one peer rank
  kRecv,       // point to point: one peer rank's message into this rank's buffer
};

enum class Algorithm {
  kRing,             // neighbours on a ring (chains for the rooted collectives)
  kTree,             // the double binary tree
  kDirect,           // every participant talks to the peers it needs directly
  kDoubling,         // recursive doubling: log2(size) exchanges of the whole buffer
  kHalvingDoubling,  // recursive halving then doubling: 2 log2(size) exchanges of shrinking parts
};

// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier",
// "gather", "scatter", "all_to_all_v", "send", "recv"; "unknown" for a value outside the enum.
absl::string_view CollectiveName(Collective collective);
std::optional<Collective> ParseCollective(absl::string_view name);

// "ring", "tree", "direct", "doubling", "halving_doubling"; "unknown" for a value outside the enum.
absl::string_view AlgorithmName(Algorithm algorithm);
std::optional<Algorithm> ParseAlgorithm(absl::string_view name);
// Every algorithm's name, comma-separated, for messages and help texts.
std::string AlgorithmNames();

// Whether collective/ implements `collective` with `algorithm` (the table above).
bool IsSupported(Collective collective, Algorithm algorithm);

}  // namespace baton::collective
