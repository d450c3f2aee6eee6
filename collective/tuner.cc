#include "collective/tuner.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/doubling_all_reduce.h"
#include "collective/registry.h"

namespace baton::collective {
namespace {

absl::Duration Seconds(double seconds) { return absl::Seconds(seconds); }

AlgorithmCost Cost(Algorithm algorithm, absl::Duration predicted) {
  AlgorithmCost cost;
  cost.algorithm = algorithm;
  cost.predicted = predicted;
  return cost;
}

}  // namespace

absl::Duration RingAllReduceCost(int daemons, double bytes, double /*chunk_bytes*/,
                                 const LinkModel& model) {
  const double d = daemons;
  return 2 * (d - 1) * model.alpha +
         Seconds(2 * (d - 1) / d * bytes / (model.beta * kRingEfficiency));
}

absl::Duration TreeAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                 const LinkModel& model) {
  const double depth = std::bit_width(static_cast<unsigned>(daemons - 1));
  const double message = std::min(bytes / 2, chunk_bytes);
  const double efficiency = message <= static_cast<double>(kTreeSmallMessageBytes)
                                ? kTreeEfficiency
                                : kTreePipelinedEfficiency;
  return 2 * depth * model.alpha + Seconds(2 * bytes / (model.beta * efficiency));
}

namespace {

// One step of doubling or halving-doubling: `step_bytes` each way, chunk by chunk, each chunk
// waiting for the partner's, at what these exchanges reach of the link with messages of that size.
absl::Duration ExchangeStep(double step_bytes, double chunk_bytes, const LinkModel& model) {
  const double chunks = std::max(1.0, std::ceil(step_bytes / chunk_bytes));
  const double efficiency = step_bytes / chunks <= static_cast<double>(kTreeSmallMessageBytes)
                                ? kRingEfficiency
                                : kExchangeLargeEfficiency;
  return chunks * model.alpha + Seconds(step_bytes / (model.beta * efficiency));
}

}  // namespace

// Every step exchanges the whole buffer.
absl::Duration DoublingAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                     const LinkModel& model) {
  return DoublingSteps(daemons) * ExchangeStep(bytes, chunk_bytes, model);
}

// Halving moves half, a quarter, ... of the buffer, doubling the same back. Pairs (a size that is
// not a power of two) hand the whole buffer over and back.
absl::Duration HalvingDoublingAllReduceCost(int daemons, double bytes, double chunk_bytes,
                                            const LinkModel& model) {
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(daemons)));
  absl::Duration total;
  for (int part = 2; part <= p; part *= 2)
    total += 2 * ExchangeStep(bytes / part, chunk_bytes, model);
  if (p != daemons) total += 2 * ExchangeStep(bytes, chunk_bytes, model);
  return total;
}

namespace {

std::string HumanDuration(absl::Duration d) {
  const double us = absl::ToDoubleMicroseconds(d);
  if (us < 1000) return absl::StrFormat("%.0f us", us);
  if (us < 1e6) return absl::StrFormat("%.2f ms", us / 1e3);
  return absl::StrFormat("%.3f s", us / 1e6);
}

// How many of `costs` (cheapest predicted first) are candidates: predicted within
// MeasuredTimes::kCandidateFactor of the cheapest.
size_t CandidateCount(const std::vector<AlgorithmCost>& costs) {
  size_t count = 0;
  while (count < costs.size() &&
         costs[count].predicted <= costs.front().predicted * MeasuredTimes::kCandidateFactor) {
    ++count;
  }
  return count;
}

// Among `candidates` (at least one), the measured one with the lowest time, the first of equals;
// the model's cheapest while none is measured.
const AlgorithmCost& Preferred(std::span<const AlgorithmCost> candidates) {
  const AlgorithmCost* preferred = &candidates.front();
  for (const AlgorithmCost& candidate : candidates) {
    if (candidate.measured &&
        (!preferred->measured || *candidate.measured < *preferred->measured)) {
      preferred = &candidate;
    }
  }
  return *preferred;
}

}  // namespace

LinkModel DefaultLinkModel() { return LinkModel{absl::Microseconds(50), 1.25e9}; }

std::vector<AlgorithmCost> PredictCosts(Collective collective, int daemons, size_t bytes,
                                        size_t chunk_bytes, const LinkModel& model_in) {
  const LinkModel model = model_in.valid() ? model_in : DefaultLinkModel();
  const double n = static_cast<double>(bytes);
  std::vector<AlgorithmCost> costs;
  for (const OpImplementation& entry : Implementations()) {
    if (entry.collective != collective) continue;
    costs.push_back(Cost(entry.algorithm,
                         entry.cost == nullptr
                             ? absl::ZeroDuration()
                             : entry.cost(daemons, n, static_cast<double>(chunk_bytes), model)));
  }
  std::stable_sort(costs.begin(), costs.end(), [](const AlgorithmCost& a, const AlgorithmCost& b) {
    return a.predicted < b.predicted;
  });
  return costs;
}

Algorithm ChooseByCost(Collective collective, int daemons, size_t bytes, size_t chunk_bytes,
                       const LinkModel& model) {
  return PredictCosts(collective, daemons, bytes, chunk_bytes, model).front().algorithm;
}

int SizeClass(size_t bytes) {
  return std::min(kSizeClasses - 1, std::max(0, static_cast<int>(std::bit_width(bytes)) - 1));
}

int MeasuredTimes::Cell(size_t bytes, Algorithm algorithm) {
  return SizeClass(bytes) * kAlgorithms + static_cast<int>(algorithm);
}

void MeasuredTimes::Add(size_t bytes, Algorithm algorithm, absl::Duration took) {
  const int cell = Cell(bytes, algorithm);
  pending_sum_[cell] += absl::ToInt64Nanoseconds(std::max(took, absl::ZeroDuration()));
  ++pending_count_[cell];
}

std::vector<int64_t> MeasuredTimes::TakePending() {
  std::vector<int64_t> counters(pending_sum_.begin(), pending_sum_.end());
  counters.insert(counters.end(), pending_count_.begin(), pending_count_.end());
  pending_sum_.fill(0);
  pending_count_.fill(0);
  return counters;
}

std::vector<int64_t> MeasuredTimes::Agreed() const {
  std::vector<int64_t> counters(sum_.begin(), sum_.end());
  counters.insert(counters.end(), count_.begin(), count_.end());
  return counters;
}

absl::Status MeasuredTimes::Merge(std::span<const int64_t> summed) {
  if (summed.size() != 2 * static_cast<size_t>(kCells)) {
    return absl::InvalidArgumentError(
        absl::StrCat("measured times: ", summed.size(), " counters, expected ", 2 * kCells));
  }
  for (int cell = 0; cell < kCells; ++cell) {
    if (summed[cell] < 0 || summed[kCells + cell] < 0) {
      return absl::InvalidArgumentError("measured times: a negative counter");
    }
  }
  for (int cell = 0; cell < kCells; ++cell) {
    sum_[cell] += summed[cell];
    count_[cell] += summed[kCells + cell];
    if (count_[cell] > kMaxSamples) {
      sum_[cell] /= 2;
      count_[cell] /= 2;
    }
  }
  return absl::OkStatus();
}

int64_t MeasuredTimes::Samples(size_t bytes, Algorithm algorithm) const {
  return count_[Cell(bytes, algorithm)];
}

std::optional<absl::Duration> MeasuredTimes::Mean(size_t bytes, Algorithm algorithm) const {
  const int cell = Cell(bytes, algorithm);
  if (count_[cell] < kMinSamples) return std::nullopt;
  return absl::Nanoseconds(sum_[cell] / count_[cell]);
}

Algorithm MeasuredTimes::Choose(size_t bytes, const std::vector<AlgorithmCost>& costs) {
  if (costs.empty()) return Algorithm::kRing;
  const int size_class = Cell(bytes, Algorithm::kRing) / kAlgorithms;
  const bool explore = ++chosen_[size_class] % kExploreEvery == 0;
  std::vector<AlgorithmCost> candidates(
      costs.begin(), costs.begin() + static_cast<std::ptrdiff_t>(CandidateCount(costs)));
  for (AlgorithmCost& candidate : candidates) {
    candidate.measured = Mean(bytes, candidate.algorithm);
    candidate.samples = Samples(bytes, candidate.algorithm);
  }
  const AlgorithmCost& best = Preferred(candidates);
  if (explore) {
    // The least measured candidate, if it is unmeasured or far behind the best.
    const int64_t enough = best.measured ? best.samples / 64 : kMinSamples;
    const AlgorithmCost* least = nullptr;
    for (const AlgorithmCost& candidate : candidates) {
      if ((candidate.samples < kMinSamples || candidate.samples < enough) &&
          (least == nullptr || candidate.samples < least->samples)) {
        least = &candidate;
      }
    }
    if (least != nullptr) return least->algorithm;
  }
  return best.algorithm;
}

std::string ExplainCosts(const std::vector<AlgorithmCost>& costs) {
  std::string text;
  for (const AlgorithmCost& cost : costs) {
    absl::StrAppend(&text, text.empty() ? "" : ", ", AlgorithmName(cost.algorithm), " ",
                    HumanDuration(cost.predicted));
    if (cost.measured) absl::StrAppend(&text, " (measured ", HumanDuration(*cost.measured), ")");
  }
  if (costs.empty()) return text;
  // What MeasuredTimes::Choose runs outside its explorations.
  const std::span<const AlgorithmCost> candidates(costs.data(), CandidateCount(costs));
  absl::StrAppend(&text, " -> ", AlgorithmName(Preferred(candidates).algorithm));
  return text;
}

}  // namespace baton::collective
