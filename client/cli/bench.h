#pragma once

// `baton bench`: an nccl-tests-style sweep of message sizes over a running cluster. The parent
// process creates the communicator id and launches one worker process per rank (ranks are placed
// on daemons in blocks of --ranks-per-daemon); workers time the operation and check every
// element; the parent prints one table.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace baton::client {

struct BenchOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = 64 << 20;
  int64_t step_factor = 2;
  int64_t iters = 20;
  int64_t warmup_iters = 5;
  bool check = true;
  int64_t ranks_per_daemon = 2;
  // Any collective (collective/algorithm.h names) but send and recv, or "sendrecv" (nccl-tests'
  // sendrecv_perf: each rank sends to rank + 1 and receives from rank - 1, in a group).
  std::string op = "all_reduce";
  std::string data_type = "float32";
  std::string reduce_op = "sum";
  int64_t root = 0;  // broadcast, reduce, gather and scatter
  // Empty: the daemons choose. A comma-separated list ("auto,ring,tree"; "auto" lets the daemons
  // choose) compares them: each size runs the algorithms in turn, iteration by iteration, so they
  // meet the same conditions, and the table shows each one's median time and the first one's
  // ratio to the best of the others.
  std::string algorithm;
  bool explain = false;  // add the tuner's predicted cost of each algorithm per size
  bool median = false;   // single-algorithm table: each rank's median iteration, not the mean
  // Every iteration starts after an untimed barrier, as the peer libraries' benchmarks time theirs
  // (always so when comparing algorithms); else they run back to back.
  bool barrier = false;
  // One buffer for input and result (all_reduce, broadcast and reduce: send == recv; all_to_all:
  // the blocks are exchanged within it), as nccl-tests' in-place column; the input is put back,
  // untimed, before every iteration.
  bool in_place = false;
  std::vector<std::string> sockets;  // one per daemon
  int64_t timeout_ms = 120000;       // per operation
};

// Runs the benchmark and prints the table on stdout. Returns an error if any rank failed or if any
// element was wrong.
absl::Status RunBench(const BenchOptions& options);

// The worker: one rank. Prints "RESULT <bytes> <count> <seconds> <wrong> <algorithm that ran>
// <requested>" lines, one per size and requested algorithm (seconds: the mean of the iterations,
// or their median when comparing algorithms or with `median`); with `explain`, rank 0 first prints
// "EXPLAIN <bytes> <the tuner's candidates and choice>".
// Inputs are small integers chosen so that every result is exact in every data type.
absl::Status RunBenchRank(const BenchOptions& options, const std::string& socket,
                          const std::string& comm_id, int world_size, int rank);

// nccl-tests' busbw factor: 2(n-1)/n for all_reduce; (n-1)/n for reduce_scatter, all_gather,
// all_to_all, gather, scatter and all_to_all_v; 1 for broadcast, reduce and sendrecv; 0 for
// barrier.
double BusBwFactor(absl::string_view op, int world_size);

}  // namespace baton::client
