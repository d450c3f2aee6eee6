// The node arena's all-reduce latency and bandwidth with ranks as processes on this machine
// (collective/node_arena.h), the floor of the intra-node fast path before any daemon or
// library is involved (docs/node-arena.md):
//   cmake --build BUILD --target node_arena_bench && BUILD/bin/node_arena_bench [ranks...]
// For each world size (default 2 4) and float32 sum sizes of 8 B to 1 MiB, prints the median
// time per operation of the slowest rank over runs of `iterations` operations, and the context
// switches per operation (voluntary: a rank blocked on the arena's bell; involuntary: the
// scheduler took its core) summed over the ranks, from getrusage. $BATON_ARENA_SPIN_US sets how
// long a waiter looks before it blocks (collective/arena/rounds.cc).

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collective/node_arena.h"

namespace {

using baton::collective::DataType;
using baton::collective::NodeArena;
using baton::collective::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr size_t kSlot = size_t{1} << 20;
constexpr int kRuns = 5;

int Bench(int ranks) {
  const size_t size = NodeArena::Bytes(ranks, kSlot);
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  const std::vector<size_t> sizes = {8, 64, 512, 4096, 32768, 65536, 262144, 1048576};
  // Per rank and size: the median microseconds per operation, then the voluntary and
  // involuntary context switches per operation over all runs.
  constexpr size_t kFigures = 3;
  auto* results =
      static_cast<double*>(mmap(nullptr, sizeof(double) * kFigures * ranks * sizes.size(),
                                PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (memory == MAP_FAILED || results == MAP_FAILED ||
      !NodeArena::Initialize(memory, size, ranks, kSlot).ok()) {
    std::fprintf(stderr, "cannot set up the arena\n");
    return 1;
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      NodeArena arena = *NodeArena::Attach(memory, size, rank);
      const absl::Time deadline = absl::Now() + absl::Seconds(120);
      for (size_t s = 0; s < sizes.size(); ++s) {
        const size_t count = sizes[s] / sizeof(float);
        std::vector<float> data(count, 1.0f);
        const int iterations = sizes[s] <= 4096 ? 2000 : sizes[s] <= 65536 ? 500 : 100;
        std::vector<double> runs;
        rusage before{};
        getrusage(RUSAGE_SELF, &before);
        for (int run = 0; run < kRuns; ++run) {
          const Clock::time_point start = Clock::now();
          for (int i = 0; i < iterations; ++i) {
            std::fill(data.begin(), data.end(), 1.0f);
            if (!arena
                     .AllReduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum,
                                deadline)
                     .ok() ||
                data[count - 1] != static_cast<float>(ranks)) {
              _exit(1);
            }
          }
          runs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                         iterations);
        }
        rusage after{};
        getrusage(RUSAGE_SELF, &after);
        std::nth_element(runs.begin(), runs.begin() + kRuns / 2, runs.end());
        double* mine = results + kFigures * (rank * sizes.size() + s);
        const double operations = static_cast<double>(kRuns) * iterations;
        mine[0] = runs[kRuns / 2];
        mine[1] = static_cast<double>(after.ru_nvcsw - before.ru_nvcsw) / operations;
        mine[2] = static_cast<double>(after.ru_nivcsw - before.ru_nivcsw) / operations;
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "a rank failed\n");
    return 1;
  }
  std::printf("%d ranks (processes), float32 sum, median of %d runs, slowest rank:\n", ranks,
              kRuns);
  std::printf("  %8s    %9s     %8s       %s\n", "size", "time", "algbw",
              "context switches per operation, all ranks: voluntary / involuntary");
  for (size_t s = 0; s < sizes.size(); ++s) {
    double slowest = 0;
    double voluntary = 0;
    double involuntary = 0;
    for (int r = 0; r < ranks; ++r) {
      const double* figures = results + kFigures * (r * sizes.size() + s);
      slowest = std::max(slowest, figures[0]);
      voluntary += figures[1];
      involuntary += figures[2];
    }
    std::printf("  %8zu B  %9.2f us  %8.2f GB/s  %6.2f / %6.2f\n", sizes[s], slowest,
                static_cast<double>(sizes[s]) / slowest / 1e3, voluntary, involuntary);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> worlds;
  for (int i = 1; i < argc; ++i) worlds.push_back(std::atoi(argv[i]));
  if (worlds.empty()) worlds = {2, 4};
  for (int ranks : worlds) {
    if (ranks < 1 || ranks > NodeArena::kMaxRanks || Bench(ranks) != 0) return 1;
  }
  return 0;
}
