#include "client/bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/baton.h"
#include "client/local_cluster.h"

namespace baton::client {
namespace {

// The value rank `rank` contributes at index i: small integers, so float sums are exact.
float InputValue(int rank, size_t i) { return static_cast<float>((rank + 1) + (i % 13)); }

float ExpectedSum(int world_size, size_t i) {
  // sum over r of (r + 1 + i % 13)
  return static_cast<float>(world_size * (world_size + 1) / 2 + world_size * (i % 13));
}

std::vector<int64_t> Sizes(const BenchOptions& options) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
       bytes = options.step_factor > 1 ? bytes * options.step_factor : bytes + 1) {
    sizes.push_back(bytes);
    if (options.step_factor <= 1) break;
  }
  return sizes;
}

struct RankResult {
  double seconds = 0;
  int64_t wrong = 0;
  std::string algorithm;
};

}  // namespace

double AllReduceBusBwFactor(int world_size) {
  return world_size > 0 ? 2.0 * (world_size - 1) / world_size : 0;
}

absl::Status RunBenchRank(const BenchOptions& options, const std::string& socket,
                          const std::string& comm_id, int world_size, int rank) {
  if (options.data_type != "float32" || options.reduce_op != "sum") {
    return absl::UnimplementedError("this bench checks float32 sum only so far");
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket);
  if (!client.ok()) return client.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      (*client)->Join(comm_id, world_size, rank, absl::Seconds(60));
  if (!comm.ok()) return comm.status();
  const size_t max_count = static_cast<size_t>(options.max_bytes) / sizeof(float);
  absl::StatusOr<void*> send_memory = (*client)->Allocate(max_count * sizeof(float));
  if (!send_memory.ok()) return send_memory.status();
  absl::StatusOr<void*> recv_memory = (*client)->Allocate(max_count * sizeof(float));
  if (!recv_memory.ok()) return recv_memory.status();
  auto* send = static_cast<float*>(*send_memory);
  auto* recv = static_cast<float*>(*recv_memory);
  for (size_t i = 0; i < max_count; ++i) send[i] = InputValue(rank, i);
  const absl::Duration timeout = absl::Milliseconds(options.timeout_ms);

  for (int64_t bytes : Sizes(options)) {
    const size_t count = static_cast<size_t>(bytes) / sizeof(float);
    auto run = [&]() {
      return (*comm)->AllReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, timeout);
    };
    for (int64_t i = 0; i < options.warmup_iters; ++i) {
      if (absl::Status status = run(); !status.ok()) return status;
    }
    std::memset(recv, 0, count * sizeof(float));
    const absl::Time start = absl::Now();
    for (int64_t i = 0; i < options.iters; ++i) {
      if (absl::Status status = run(); !status.ok()) return status;
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start) /
                           static_cast<double>(std::max<int64_t>(1, options.iters));
    int64_t wrong = 0;
    if (options.check) {
      if (options.iters == 0) {
        if (absl::Status status = run(); !status.ok()) return status;
      }
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != ExpectedSum(world_size, i);
    }
    std::printf("RESULT %lld %zu %.9f %lld %s\n", static_cast<long long>(bytes), count, seconds,
                static_cast<long long>(wrong), (*comm)->last_algorithm().c_str());
    std::fflush(stdout);
  }
  return (*comm)->Destroy();
}

absl::Status RunBench(const BenchOptions& options) {
  if (options.sockets.empty()) return absl::InvalidArgumentError("no daemons to run on");
  if (options.ranks_per_daemon < 1) {
    return absl::InvalidArgumentError("--ranks-per-daemon must be at least 1");
  }
  if (options.min_bytes < 0 || options.max_bytes < options.min_bytes) {
    return absl::InvalidArgumentError("need 0 <= --minbytes <= --maxbytes");
  }
  if (options.data_type != "float32" || options.reduce_op != "sum") {
    return absl::UnimplementedError("baton bench runs float32 sum so far (-d float32 -o sum)");
  }
  const int world_size = static_cast<int>(options.sockets.size() * options.ranks_per_daemon);
  absl::StatusOr<std::unique_ptr<Client>> root = Client::Connect(options.sockets.front());
  if (!root.ok()) return root.status();
  absl::StatusOr<std::string> comm_id = (*root)->CreateCommId();
  if (!comm_id.ok()) return comm_id.status();

  std::printf("# baton bench: all_reduce, %d ranks on %zu daemons (%lld per daemon)\n", world_size,
              options.sockets.size(), static_cast<long long>(options.ranks_per_daemon));
  std::printf(
      "# sizes %lld..%lld bytes, factor %lld, %lld iterations after %lld warm-up, check %s\n",
      static_cast<long long>(options.min_bytes), static_cast<long long>(options.max_bytes),
      static_cast<long long>(options.step_factor), static_cast<long long>(options.iters),
      static_cast<long long>(options.warmup_iters), options.check ? "on" : "off");
  std::fflush(stdout);

  // Launch one worker per rank with its output on a pipe.
  struct Worker {
    pid_t pid = 0;
    FILE* out = nullptr;
  };
  std::vector<Worker> workers;
  char self[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return absl::InternalError("cannot find the baton executable");
  for (int rank = 0; rank < world_size; ++rank) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
    const std::string& socket = options.sockets[rank / options.ranks_per_daemon];
    std::vector<std::string> args = {self,
                                     "bench-rank",
                                     "--socket=" + socket,
                                     "--comm-id=" + *comm_id,
                                     absl::StrCat("--world-size=", world_size),
                                     absl::StrCat("--rank=", rank),
                                     absl::StrCat("--minbytes=", options.min_bytes),
                                     absl::StrCat("--maxbytes=", options.max_bytes),
                                     absl::StrCat("--stepfactor=", options.step_factor),
                                     absl::StrCat("--iters=", options.iters),
                                     absl::StrCat("--warmup-iters=", options.warmup_iters),
                                     absl::StrCat("--check=", options.check ? 1 : 0),
                                     absl::StrCat("--timeout-ms=", options.timeout_ms)};
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      close(pipe_fds[0]);
      dup2(pipe_fds[1], STDOUT_FILENO);
      close(pipe_fds[1]);
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(self, argv.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    workers.push_back({pid, fdopen(pipe_fds[0], "r")});
  }

  // Collect every worker's results: time is the slowest rank's, #wrong the sum over ranks.
  std::map<int64_t, std::pair<size_t, RankResult>> table;
  std::vector<std::string> failures;
  for (int rank = 0; rank < world_size; ++rank) {
    char line[512];
    while (std::fgets(line, sizeof(line), workers[rank].out) != nullptr) {
      std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), ' ');
      if (f.size() < 6 || f[0] != "RESULT") continue;
      int64_t bytes = 0, wrong = 0;
      size_t count = 0;
      double seconds = 0;
      if (!absl::SimpleAtoi(f[1], &bytes) || !absl::SimpleAtoi(f[2], &count) ||
          !absl::SimpleAtod(f[3], &seconds) || !absl::SimpleAtoi(f[4], &wrong)) {
        continue;
      }
      auto& [row_count, row] = table[bytes];
      row_count = count;
      row.seconds = std::max(row.seconds, seconds);
      row.wrong += wrong;
      row.algorithm = f[5];
    }
    std::fclose(workers[rank].out);
    int status = 0;
    waitpid(workers[rank].pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failures.push_back(absl::StrCat("rank ", rank));
    }
  }

  std::printf("#\n# %12s %12s %8s %6s %10s %8s %8s %8s %6s\n", "size", "count", "type", "redop",
              "time", "algbw", "busbw", "#wrong", "algo");
  std::printf("# %12s %12s %8s %6s %10s %8s %8s %8s %6s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "");
  int64_t total_wrong = 0;
  double busbw_sum = 0;
  for (const auto& [bytes, entry] : table) {
    const auto& [count, row] = entry;
    const double algbw = row.seconds > 0 ? static_cast<double>(bytes) / row.seconds / 1e9 : 0;
    const double busbw = algbw * AllReduceBusBwFactor(world_size);
    busbw_sum += busbw;
    total_wrong += row.wrong;
    std::printf("  %12lld %12zu %8s %6s %10.1f %8.3f %8.3f %8lld %6s\n",
                static_cast<long long>(bytes), count, options.data_type.c_str(),
                options.reduce_op.c_str(), row.seconds * 1e6, algbw, busbw,
                static_cast<long long>(row.wrong), row.algorithm.c_str());
  }
  if (!table.empty()) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / table.size());
  }
  std::fflush(stdout);
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat(failures.size(), " rank(s) failed (", failures.front(),
                                            " first); their errors are above"));
  }
  if (total_wrong > 0) return absl::DataLossError(absl::StrCat(total_wrong, " wrong elements"));
  return absl::OkStatus();
}

}  // namespace baton::client
