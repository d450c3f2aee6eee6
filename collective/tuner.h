#pragma once

// The tuner: an α–β cost model that predicts each algorithm's time for one call across daemons
// and picks the cheapest, like NCCL's tuning model (src/graph/tuning.cc) but fed by the links the
// daemons measured instead of tables of hardware latencies.
//
// A message of m bytes between two neighbouring daemons costs alpha + m / beta. Per algorithm,
// for D daemons and an n-byte buffer:
//   ring all-reduce   2(D-1) steps:         2(D-1)·alpha + 2(D-1)/D · n / (beta·kRingEfficiency)
//   tree all-reduce   up and down, depth d: 2d·alpha + 2n / (beta·e)
//   doubling          s steps of c chunks:  s·(c·alpha + n / (beta·x))
//   halving-doubling  for each level j = 1..log2 p: 2·(c_j·alpha + n/2^j / (beta·x)),
//                     plus 2·(c·alpha + n / (beta·x)) when D is not a power of two
// where d = bit_width(D-1) is the depth of the double binary tree (collective/double_binary_tree.h)
// and e is kTreeEfficiency while each tree's messages, min(n/2, chunk), stay within
// kTreeSmallMessageBytes, kTreePipelinedEfficiency beyond (where the tree's single thread of
// blocking sends stops overlapping transfers); s = DoublingSteps(D) (log2 D, plus 2 when D is not
// a power of two) and c = ceil(n / chunk), since each step sends the whole buffer one chunk at a
// time; for halving-doubling p is the largest power of two <= D and c_j = ceil(n/2^j / chunk). x is
// kRingEfficiency while a step's messages stay within kTreeSmallMessageBytes and
// kExchangeLargeEfficiency beyond: an exchange waits for each chunk before the next and does not
// overlap its reductions with transfers, as the ring does (8 hosts at 1 Gbit/s: halving-doubling
// took 1.13–1.21 times the ring's time from 2 to 8 MiB). The
// efficiencies are what this data plane reaches of the link's bandwidth, measured on 8 hosts in
// network namespaces (docs/bench/2026-11-tuner-vs-forced.md). The constant overheads of a call
// (submission, the signature exchange) are the same for every algorithm and left out. Collectives
// that only one algorithm implements get that one.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"

namespace baton::collective {

inline constexpr double kRingEfficiency = 0.9;
inline constexpr double kTreeEfficiency = 1.0;
inline constexpr double kTreePipelinedEfficiency = 0.3;
inline constexpr size_t kTreeSmallMessageBytes = size_t{64} << 10;
inline constexpr double kExchangeLargeEfficiency = 0.8;

// The links of one communicator, as measured.
struct LinkModel {
  absl::Duration alpha;  // one message's latency between neighbouring daemons
  double beta = 0;       // bytes per second of the slowest link

  bool valid() const { return alpha >= absl::ZeroDuration() && beta > 0; }
};

// The all_reduce algorithms' α–β models (the registry's cost functions): predicted time across
// `daemons` (>= 2) for a buffer of `bytes`, messages cut into `chunk_bytes`.
absl::Duration RingAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                 const LinkModel& model);
absl::Duration TreeAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                 const LinkModel& model);
absl::Duration DoublingAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                     const LinkModel& model);
absl::Duration HalvingDoublingAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                            const LinkModel& model);

// Used until a communicator has measurements: 50 us and 1.25 GB/s (a 10 Gbit/s link).
LinkModel DefaultLinkModel();

struct AlgorithmCost {
  Algorithm algorithm = Algorithm::kRing;
  absl::Duration predicted;
  // The daemons' agreed measurements (MeasuredTimes), where Explain reports them: the mean, set
  // once there are MeasuredTimes::kMinSamples, and the number of samples.
  std::optional<absl::Duration> measured;
  int64_t samples = 0;
};

// Predicted time of every algorithm implementing `collective` across `daemons` daemons, for a
// buffer of `bytes` (all_reduce's count · element size), cheapest first (ties keep the ring
// first). `daemons` >= 2.
std::vector<AlgorithmCost> PredictCosts(Collective collective, int daemons, size_t bytes,
                                        size_t chunk_bytes, const LinkModel& model);

// The cheapest algorithm of PredictCosts.
Algorithm ChooseByCost(Collective collective, int daemons, size_t bytes, size_t chunk_bytes,
                       const LinkModel& model);

// The size class of a call of `bytes`: b for bytes in [2^b, 2^(b+1)) (0 for 0 and 1), at most
// kSizeClasses - 1. What MeasuredTimes and RouteTuner keep their times by.
inline constexpr int kSizeClasses = 48;
int SizeClass(size_t bytes);

// What the daemons of one communicator measured: per size class (bytes in [2^b, 2^(b+1))) and
// algorithm, the sum and number of all_reduce times. Each daemon adds its own measurements as
// *pending*; at the same operations everywhere the daemons sum their pending counters (an
// all-reduce of TakePending's integers) and Merge the sums, so that the *agreed* table, the only
// one a choice reads, is identical on every daemon. Not thread-safe: one operation at a time.
class MeasuredTimes {
 public:
  static constexpr int kClasses = kSizeClasses;
  static constexpr int kAlgorithms = 5;  // Algorithm's values
  // Fewer agreed samples than this (summed over daemons) and an algorithm counts as unmeasured.
  static constexpr int64_t kMinSamples = 16;
  // Beyond this many samples a cell halves at the next merge, so that old times fade.
  static constexpr int64_t kMaxSamples = 4096;
  // Every kExploreEvery-th operation of a size class may run an unmeasured candidate.
  static constexpr int64_t kExploreEvery = 16;
  // Candidates: algorithms the model predicts within this factor of its cheapest.
  static constexpr double kCandidateFactor = 2.0;

  // This daemon measured `took` for an all_reduce of `bytes` with `algorithm` (pending).
  void Add(size_t bytes, Algorithm algorithm, absl::Duration took);
  // The pending counters (sums in nanoseconds, then counts), cleared; kCells * 2 integers.
  std::vector<int64_t> TakePending();
  // The agreed table in the same layout (sums, then counts): what Merge into a fresh table
  // turns back into this one, so a later communicator of the same daemons can start from it.
  std::vector<int64_t> Agreed() const;
  // Adds every daemon's pending counters, summed, to the agreed table. InvalidArgument (and no
  // change) unless `summed` has kCells * 2 integers with non-negative counts.
  absl::Status Merge(std::span<const int64_t> summed);
  // The agreed mean time of `algorithm` for `bytes`; zero samples or fewer than kMinSamples:
  // nullopt.
  std::optional<absl::Duration> Mean(size_t bytes, Algorithm algorithm) const;
  int64_t Samples(size_t bytes, Algorithm algorithm) const;

  // The algorithm for the next all_reduce of `bytes`, given the model's `costs` (cheapest first):
  // among the candidates, the one with the lowest agreed mean, or the model's cheapest while none
  // is measured; every kExploreEvery-th call for a size class, a candidate that is unmeasured (or
  // has fewer than 1/64 of the samples of the best) runs instead, so it gets measured. Depends
  // only on the agreed table and the calls before, so every daemon that makes the same calls
  // chooses the same.
  Algorithm Choose(size_t bytes, const std::vector<AlgorithmCost>& costs);

 private:
  static constexpr int kCells = kClasses * kAlgorithms;
  static int Cell(size_t bytes, Algorithm algorithm);
  std::array<int64_t, kCells> pending_sum_{}, pending_count_{};
  std::array<int64_t, kCells> sum_{}, count_{};
  std::array<int64_t, kClasses> chosen_{};  // Choose calls per size class
};

// "ring 1.2 ms, tree 3.4 ms -> ring": the model's candidates, cheapest first, and its choice, for
// logs and --explain; a measured candidate reads "doubling 134 us (measured 120 us)".
std::string ExplainCosts(const std::vector<AlgorithmCost>& costs);

}  // namespace baton::collective
