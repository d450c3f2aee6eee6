// What the peer all-reduce benchmarks (Gloo, Open MPI) share: options, the size sweep, the
// inputs and their expected sum, statistics and the output lines. The benchmarks exist to
// compare Baton with other libraries (scripts/compare_allreduce.sh); they use nothing of Baton.
//
// Output, from rank 0, one line per size (stdout, flushed):
//   RESULT <bytes> <median s> <wrong> <mean s> <min s> <algbw GB/s> <busbw GB/s>
// Each iteration's time is the slowest rank's (every iteration starts after a barrier and the
// per-rank times are max-reduced at the end of the size); median, mean and min are over the
// timed iterations. algbw = bytes / median, busbw = algbw * 2(n-1)/n as in nccl-tests.
// <wrong> is the number of wrong elements, summed over ranks, of one extra checked iteration.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace baton::peerbench {

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = 64 << 20;
  int64_t step_factor = 2;
  int64_t iters = 20;
  int64_t warmup_iters = 5;
  bool check = true;
};

// Parses "64M", "1K", "3G" or a plain number (sizes and counts alike); -1 when malformed.
inline int64_t ParseBytes(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || value < 0) return -1;
  const std::string suffix(end);
  if (suffix.empty()) return value;
  if (suffix == "K" || suffix == "k") return value << 10;
  if (suffix == "M" || suffix == "m") return value << 20;
  if (suffix == "G" || suffix == "g") return value << 30;
  return -1;
}

// Consumes one common option at argv[*i] ("-b 8", "--minbytes=8", ...). Returns true when the
// argument was one of them (advancing *i past a separate value), false when it is not; sets
// *error for a malformed value.
inline bool ParseCommonOption(int argc, char** argv, int* i, Options* options, std::string* error) {
  const std::string arg = argv[*i];
  struct Spec {
    const char* short_name;
    const char* long_name;
    int64_t* target;
  };
  int64_t check = options->check ? 1 : 0;
  const Spec specs[] = {
      {"-b", "--minbytes", &options->min_bytes},        {"-e", "--maxbytes", &options->max_bytes},
      {"-f", "--stepfactor", &options->step_factor},    {"-n", "--iters", &options->iters},
      {"-w", "--warmup-iters", &options->warmup_iters}, {"-c", "--check", &check},
  };
  for (const Spec& spec : specs) {
    std::string value;
    const std::string long_prefix = std::string(spec.long_name) + "=";
    if (arg == spec.short_name || arg == spec.long_name) {
      if (*i + 1 >= argc) {
        *error = arg + " needs a value";
        return true;
      }
      value = argv[++*i];
    } else if (arg.rfind(long_prefix, 0) == 0) {
      value = arg.substr(long_prefix.size());
    } else {
      continue;
    }
    const int64_t parsed = ParseBytes(value);
    if (parsed < 0) *error = "bad value for " + arg + ": " + value;
    *spec.target = parsed;
    options->check = check != 0;
    return true;
  }
  return false;
}

inline std::string ValidateOptions(const Options& options) {
  if (options.min_bytes < 4 || options.max_bytes < options.min_bytes) {
    return "need 4 <= --minbytes <= --maxbytes";
  }
  if (options.step_factor < 2) return "--stepfactor must be at least 2";
  if (options.iters < 1) return "--iters must be at least 1";
  if (options.warmup_iters < 0) return "--warmup-iters must be at least 0";
  return "";
}

inline const char* CommonUsage() {
  return "  -b, --minbytes=8        smallest message size in bytes (K, M, G suffixes)\n"
         "  -e, --maxbytes=64M      largest message size\n"
         "  -f, --stepfactor=2      multiply the size by this each step\n"
         "  -n, --iters=20          timed iterations per size\n"
         "  -w, --warmup-iters=5    untimed iterations per size\n"
         "  -c, --check=1           check every element of one extra iteration (1) or not (0)\n";
}

// The sizes swept: min, min*f, ... up to max, each rounded down to whole float32 elements.
inline std::vector<int64_t> Sizes(const Options& options) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
       bytes *= options.step_factor) {
    sizes.push_back(bytes / 4 * 4);
  }
  return sizes;
}

// Rank r's input element i. Small integers, so every partial sum is exact in float32 and the
// result does not depend on the order the library reduces in.
inline float Contribution(int rank, size_t i) {
  return static_cast<float>(rank + 1 + static_cast<int>(i % 13));
}

inline float Expected(int world_size, size_t i) {
  const int n = world_size;
  return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 13));
}

inline void FillInput(float* data, size_t count, int rank) {
  for (size_t i = 0; i < count; ++i) data[i] = Contribution(rank, i);
}

inline int64_t CountWrong(const float* data, size_t count, int world_size) {
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += data[i] != Expected(world_size, i);
  return wrong;
}

inline double BusBwFactor(int world_size) {
  return world_size > 0 ? 2.0 * (world_size - 1) / world_size : 0.0;
}

struct Stats {
  double median = 0;
  double mean = 0;
  double min = 0;
};

inline Stats Summarise(std::vector<double> seconds) {
  Stats stats;
  if (seconds.empty()) return stats;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  stats.median = n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  double sum = 0;
  for (double s : seconds) sum += s;
  stats.mean = sum / static_cast<double>(n);
  stats.min = seconds.front();
  return stats;
}

inline void PrintHeader(const char* library, const char* algorithm, int world_size,
                        const Options& options) {
  std::printf(
      "# %s %s all-reduce float32 sum, %d ranks, %lld..%lld B x%lld, %lld iterations "
      "(%lld warm-up), check %s\n"
      "# RESULT bytes median_s wrong mean_s min_s algbw_GBps busbw_GBps  (time: slowest rank of "
      "each iteration; algbw, busbw from the median)\n",
      library, algorithm, world_size, static_cast<long long>(options.min_bytes),
      static_cast<long long>(options.max_bytes), static_cast<long long>(options.step_factor),
      static_cast<long long>(options.iters), static_cast<long long>(options.warmup_iters),
      options.check ? "on" : "off");
  std::fflush(stdout);
}

inline void PrintResult(int64_t bytes, const Stats& stats, int64_t wrong, int world_size) {
  const double algbw = stats.median > 0 ? static_cast<double>(bytes) / stats.median / 1e9 : 0;
  std::printf("RESULT %lld %.9f %lld %.9f %.9f %.4f %.4f\n", static_cast<long long>(bytes),
              stats.median, static_cast<long long>(wrong), stats.mean, stats.min, algbw,
              algbw * BusBwFactor(world_size));
  std::fflush(stdout);
}

}  // namespace baton::peerbench
