#include "client/cli/bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/lib/absl_interop.h"
#include "client/local_cluster.h"
#include "collective/element.h"
#include "collective/tuner.h"
#include "common/status_macros.h"

namespace baton::client {
namespace {

// The element helpers of collective/ take its own enums, which have the public ones' values.
collective::DataType Internal(DataType type) { return static_cast<collective::DataType>(type); }
collective::Algorithm Internal(Algorithm algorithm) {
  return static_cast<collective::Algorithm>(static_cast<int>(algorithm) - 1);
}

// What rank r contributes at element i to a reduction: one rank per element holds the "hot"
// value, the others the neutral one, so the result is exact in every type and wrong if any rank
// is counted twice or missed.
double Contribution(ReduceOp op, int world, int rank, size_t i) {
  const bool hot = (i + static_cast<size_t>(rank)) % static_cast<size_t>(world) == 0;
  switch (op) {
    case ReduceOp::kSum:
      return hot ? 1 : 0;
    case ReduceOp::kProd:
      return hot ? 2 : 1;
    case ReduceOp::kMin:
      return hot ? 1 : 2;
    case ReduceOp::kMax:
      return hot ? 2 : 1;
    case ReduceOp::kAvg:
      return hot ? world : 0;
  }
  return 0;
}

double Reduced(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 1;
    case ReduceOp::kProd:
      return 2;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kAvg:
      return 1;
  }
  return 0;
}

// What rank r holds at element i of a moved (not reduced) buffer.
double Tagged(int rank, size_t i) {
  return static_cast<double>((static_cast<size_t>(rank) * 3 + i) % 11);
}

// all_to_all_v's uneven pattern: rank i sends (i + j) % 3 + 1 shares to rank j (symmetric, so a
// rank receives as many shares as it sends).
size_t Shares(int from, int to) { return static_cast<size_t>((from + to) % 3 + 1); }

// The most shares any rank sends: the largest buffer is that many shares.
size_t MostShares(int world) {
  size_t most = 0;
  for (int i = 0; i < world; ++i) {
    size_t total = 0;
    for (int j = 0; j < world; ++j) total += Shares(i, j);
    most = std::max(most, total);
  }
  return most;
}

// Rank `rank`'s all_to_all_v counts and displacements for shares of `share` elements.
struct VectorLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};
VectorLayout LayoutFor(int world, int rank, size_t share) {
  VectorLayout v;
  size_t sent = 0, received = 0;
  for (int j = 0; j < world; ++j) {
    v.send_displs.push_back(sent);
    v.send_counts.push_back(Shares(rank, j) * share);
    sent += v.send_counts.back();
    v.recv_displs.push_back(received);
    v.recv_counts.push_back(Shares(j, rank) * share);
    received += v.recv_counts.back();
  }
  return v;
}

// Where rank `from`'s block for rank `to` starts in `from`'s send buffer.
size_t SendDispl(int from, int to, size_t share) {
  size_t displ = 0;
  for (int k = 0; k < to; ++k) displ += Shares(from, k) * share;
  return displ;
}

std::vector<int64_t> Sizes(const BenchOptions& options) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
       bytes = options.step_factor > 1 ? bytes * options.step_factor : bytes + 1) {
    sizes.push_back(bytes);
    if (options.step_factor <= 1 || bytes == 0) break;
  }
  return sizes;
}

// The requested algorithms: {"auto"} for "", else the comma-separated names.
std::vector<std::string> RequestedAlgorithms(const std::string& text) {
  if (text.empty()) return {"auto"};
  return absl::StrSplit(text, ',', absl::SkipWhitespace());
}

struct RankResult {
  double seconds = 0;
  int64_t wrong = 0;
  std::string algorithm;
};

// Elements per rank buffer for a benchmark size (nccl-tests: the size is the largest buffer).
size_t CountFor(Collective op, int64_t bytes, size_t element, int world) {
  const size_t elements = static_cast<size_t>(bytes) / element;
  switch (op) {
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
    case Collective::kGather:
    case Collective::kScatter:
      return elements / static_cast<size_t>(world);
    case Collective::kAllToAllV:  // elements per share
      return elements / MostShares(world);
    case Collective::kBarrier:
      return 0;
    default:
      return elements;
  }
}

}  // namespace

double BusBwFactor(absl::string_view op, int world_size) {
  if (world_size <= 0) return 0;
  const double n = world_size;
  if (op == "all_reduce") return 2 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all") return (n - 1) / n;
  if (op == "gather" || op == "scatter" || op == "all_to_all_v") return (n - 1) / n;
  if (op == "broadcast" || op == "reduce" || op == "sendrecv") return 1;
  return 0;
}

absl::Status RunBenchRank(const BenchOptions& options, const std::string& socket,
                          const std::string& comm_id, int world_size, int rank) {
  // sendrecv (nccl-tests' sendrecv_perf) runs as kSend here: a Send and a Recv in a group.
  std::optional<Collective> op = options.op == "sendrecv"
                                     ? std::optional<Collective>(Collective::kSend)
                                     : ParseCollective(options.op);
  std::optional<DataType> type = ParseDataType(options.data_type);
  std::optional<ReduceOp> reduce_op = ParseReduceOp(options.reduce_op);
  if (!op || !type || !reduce_op) return absl::InvalidArgumentError("bad -o, -d or -r");
  // The algorithms to run: "" (the daemons choose) or forced ones.
  std::vector<std::string> requested = RequestedAlgorithms(options.algorithm);
  std::vector<CallOptions> calls;
  for (const std::string& name : requested) {
    CallOptions call;
    call.timeout = std::chrono::milliseconds(options.timeout_ms);
    if (name != "auto") call.algorithm = ParseAlgorithm(name);
    calls.push_back(call);
  }
  const bool comparing = requested.size() > 1;
  const int root = static_cast<int>(options.root);
  const size_t element = DataTypeSize(*type);

  StatusOr<std::unique_ptr<Client>> client = Client::Connect(socket);
  if (!client.ok()) return ToAbsl(client.status());
  StatusOr<std::unique_ptr<Communicator>> comm =
      (*client)->Join(comm_id, world_size, rank, std::chrono::seconds(60));
  if (!comm.ok()) return ToAbsl(comm.status());
  const size_t max_elements = std::max<size_t>(1, static_cast<size_t>(options.max_bytes) / element);
  StatusOr<void*> send_memory = (*client)->Allocate(max_elements * element);
  if (!send_memory.ok()) return ToAbsl(send_memory.status());
  void* send = *send_memory;
  void* recv = send;
  if (!options.in_place) {
    StatusOr<void*> recv_memory = (*client)->Allocate(max_elements * element);
    if (!recv_memory.ok()) return ToAbsl(recv_memory.status());
    recv = *recv_memory;
  }

  for (int64_t bytes : Sizes(options)) {
    const size_t count = CountFor(*op, bytes, element, world_size);
    const size_t world = static_cast<size_t>(world_size);
    // Inputs for this size.
    const VectorLayout vectors = LayoutFor(world_size, rank, count);
    const int next = (rank + 1) % world_size;
    const int previous = (rank + world_size - 1) % world_size;
    size_t send_elements = count;
    size_t recv_elements = count;
    switch (*op) {
      case Collective::kReduceScatter:
        send_elements = count * world;
        break;
      case Collective::kAllGather:
        recv_elements = count * world;
        break;
      case Collective::kAllToAll:
        send_elements = recv_elements = count * world;
        break;
      case Collective::kGather:
        recv_elements = rank == root ? count * world : 0;
        break;
      case Collective::kScatter:
        send_elements = rank == root ? count * world : 0;
        break;
      case Collective::kAllToAllV:
        send_elements = vectors.send_displs.back() + vectors.send_counts.back();
        recv_elements = vectors.recv_displs.back() + vectors.recv_counts.back();
        break;
      default:
        break;
    }
    for (size_t i = 0; i < send_elements; ++i) {
      const bool reduces = *op == Collective::kAllReduce || *op == Collective::kReduce ||
                           *op == Collective::kReduceScatter;
      collective::SetElement(
          Internal(*type), send, i,
          reduces ? Contribution(*reduce_op, world_size, rank, i) : Tagged(rank, i));
    }
    // In place, each iteration starts from the input again.
    std::vector<std::byte> input;
    if (options.in_place) {
      input.assign(static_cast<const std::byte*>(send),
                   static_cast<const std::byte*>(send) + send_elements * element);
    }
    auto restore_input = [&] {
      if (options.in_place) std::memcpy(send, input.data(), input.size());
    };
    auto run = [&](const CallOptions& call) -> absl::Status {
      Communicator& c = **comm;
      return ToAbsl([&]() -> Status {
        switch (*op) {
          case Collective::kAllReduce:
            return c.AllReduce(send, recv, count, *type, *reduce_op, call);
          case Collective::kReduceScatter:
            return c.ReduceScatter(send, recv, count, *type, *reduce_op, call);
          case Collective::kAllGather:
            return c.AllGather(send, recv, count, *type, call);
          case Collective::kBroadcast:
            return c.Broadcast(send, recv, count, *type, root, call);
          case Collective::kReduce:
            return c.Reduce(send, recv, count, *type, *reduce_op, root, call);
          case Collective::kAllToAll:
            return c.AllToAll(send, recv, count, *type, call);
          case Collective::kBarrier:
            return c.Barrier(call);
          case Collective::kGather:
            return c.Gather(send, recv, count, *type, root, call);
          case Collective::kScatter:
            return c.Scatter(send, recv, count, *type, root, call);
          case Collective::kAllToAllV:
            return c.AllToAllV(send, vectors.send_counts, vectors.send_displs, recv,
                               vectors.recv_counts, vectors.recv_displs, *type, call);
          case Collective::kSend: {  // sendrecv: to the next rank, from the previous one
            Group group;
            c.Send(send, count, *type, next, call);
            c.Recv(recv, count, *type, previous, call);
            return group.End();
          }
          case Collective::kRecv:
            break;
        }
        return Status(StatusCode::kInternal, "unreachable");
      }());
    };
    if (options.explain && rank == 0 && options.op != "sendrecv") {
      StatusOr<std::vector<AlgorithmEstimate>> estimates = (*comm)->Explain(*op, count, *type);
      if (!estimates.ok()) return ToAbsl(estimates.status());
      std::vector<collective::AlgorithmCost> costs;
      for (const AlgorithmEstimate& e : *estimates) {
        std::optional<absl::Duration> measured;
        if (e.measured) measured = ToAbsl(*e.measured);
        costs.push_back({Internal(e.algorithm), ToAbsl(e.predicted), measured, e.measured_samples});
      }
      std::printf("EXPLAIN %lld %s\n", static_cast<long long>(bytes),
                  costs.empty() ? "local (one daemon)" : collective::ExplainCosts(costs).c_str());
    }
    for (const CallOptions& call : calls) {
      for (int64_t i = 0; i < options.warmup_iters; ++i) {
        restore_input();
        BATON_RETURN_IF_ERROR(run(call));
      }
    }
    // Iteration by iteration, every requested algorithm in turn; `ran` is what each call ran
    // last (what "auto" chose).
    std::vector<std::vector<double>> times(calls.size());
    std::vector<std::string> ran(calls.size());
    for (int64_t i = 0; i < std::max<int64_t>(1, options.iters); ++i) {
      for (size_t a = 0; a < calls.size(); ++a) {
        // Start every algorithm's iteration together: without the (untimed) barrier, the
        // iteration after a slow one would absorb the other ranks' tail of it.
        restore_input();
        if (comparing || options.barrier) {
          BATON_RETURN_IF_ERROR(
              ToAbsl((*comm)->Barrier(std::chrono::milliseconds(options.timeout_ms))));
        }
        const absl::Time start = absl::Now();
        BATON_RETURN_IF_ERROR(run(calls[a]));
        times[a].push_back(absl::ToDoubleSeconds(absl::Now() - start));
        ran[a] = (*comm)->last_algorithm();
      }
    }
    for (size_t a = 0; a < calls.size(); ++a) {
      double seconds = 0;
      if (comparing || options.median) {
        std::vector<double> sorted = times[a];
        std::sort(sorted.begin(), sorted.end());
        seconds = sorted[sorted.size() / 2];
      } else {
        for (double t : times[a]) seconds += t;
        seconds /= static_cast<double>(times[a].size());
      }
      int64_t wrong = 0;
      if (options.check) {
        // A stale result must not pass. Only what this size writes: clearing the whole buffer
        // (sized for the largest size) cost small sizes milliseconds of CPU on every rank.
        if (options.in_place) {
          restore_input();  // an operation that left the buffer alone fails the check
        } else {
          std::memset(recv, 0xA5, recv_elements * element);
        }
        BATON_RETURN_IF_ERROR(run(calls[a]));
        ran[a] = (*comm)->last_algorithm();
        switch (*op) {
          case Collective::kAllReduce:
            for (size_t i = 0; i < count; ++i)
              wrong += collective::GetElement(Internal(*type), recv, i) != Reduced(*reduce_op);
            break;
          case Collective::kReduce:
            if (rank == root) {
              for (size_t i = 0; i < count; ++i)
                wrong += collective::GetElement(Internal(*type), recv, i) != Reduced(*reduce_op);
            }
            break;
          case Collective::kReduceScatter:
            for (size_t i = 0; i < count; ++i)
              wrong += collective::GetElement(Internal(*type), recv, i) != Reduced(*reduce_op);
            break;
          case Collective::kAllGather:
            for (size_t r = 0; r < world; ++r) {
              for (size_t i = 0; i < count; ++i) {
                wrong += collective::GetElement(Internal(*type), recv, r * count + i) !=
                         Tagged(static_cast<int>(r), i);
              }
            }
            break;
          case Collective::kBroadcast:
            for (size_t i = 0; i < count; ++i)
              wrong += collective::GetElement(Internal(*type), recv, i) != Tagged(root, i);
            break;
          case Collective::kAllToAll:
            // Block `rank` of rank r's input holds Tagged(r, rank * count + i).
            for (size_t r = 0; r < world; ++r) {
              for (size_t i = 0; i < count; ++i) {
                wrong += collective::GetElement(Internal(*type), recv, r * count + i) !=
                         Tagged(static_cast<int>(r), static_cast<size_t>(rank) * count + i);
              }
            }
            break;
          case Collective::kGather:
            if (rank == root) {
              for (size_t r = 0; r < world; ++r) {
                for (size_t i = 0; i < count; ++i) {
                  wrong += collective::GetElement(Internal(*type), recv, r * count + i) !=
                           Tagged(static_cast<int>(r), i);
                }
              }
            }
            break;
          case Collective::kScatter:
            // Block `rank` of the root's input holds Tagged(root, rank * count + i).
            for (size_t i = 0; i < count; ++i) {
              wrong += collective::GetElement(Internal(*type), recv, i) !=
                       Tagged(root, static_cast<size_t>(rank) * count + i);
            }
            break;
          case Collective::kAllToAllV:
            // The block from rank r starts at r's displacement for this rank in r's input.
            for (int r = 0; r < world_size; ++r) {
              const size_t from = SendDispl(r, rank, count);
              for (size_t i = 0; i < vectors.recv_counts[r]; ++i) {
                wrong += collective::GetElement(Internal(*type), recv,
                                                vectors.recv_displs[r] + i) != Tagged(r, from + i);
              }
            }
            break;
          case Collective::kSend:
            for (size_t i = 0; i < count; ++i) {
              wrong += collective::GetElement(Internal(*type), recv, i) != Tagged(previous, i);
            }
            break;
          case Collective::kBarrier:
          case Collective::kRecv:
            break;
        }
      }
      std::printf("RESULT %lld %zu %.9f %lld %s %s\n", static_cast<long long>(bytes), count,
                  seconds, static_cast<long long>(wrong), ran[a].c_str(), requested[a].c_str());
      std::fflush(stdout);
    }
    if (*op == Collective::kBarrier) break;  // one row: a barrier has no size
  }
  return ToAbsl((*comm)->Destroy());
}
// The comparison table: per size, each requested algorithm's median time and busbw (and the
// algorithm that ran for "auto"), then the first algorithm's time over the best of the others.
void PrintComparison(
    const BenchOptions& options, const std::vector<std::string>& requested, int world_size,
    const std::map<int64_t, std::pair<size_t, std::map<std::string, RankResult>>>& table,
    const std::map<int64_t, std::string>& explained, int64_t& total_wrong) {
  std::string header = absl::StrFormat("# %12s", "size (B)");
  for (const std::string& name : requested) {
    absl::StrAppendFormat(&header, " %11s %8s", absl::StrCat(name, " (us)"), "busbw");
  }
  absl::StrAppendFormat(&header, " %9s", absl::StrCat(requested.front(), "/best"));
  if (options.explain) absl::StrAppend(&header, "   predicted (tuner)");
  std::printf(
      "#\n# median time per operation (the slowest rank's median of its iterations),\n"
      "# algorithms taking turns iteration by iteration, after a barrier; busbw in GB/s\n%s\n",
      header.c_str());
  std::vector<double> ratios;
  for (const auto& [bytes, entry] : table) {
    const auto& rows = entry.second;
    std::string line = absl::StrFormat("  %12lld", static_cast<long long>(bytes));
    double best_other = 0;
    double first = 0;
    for (size_t a = 0; a < requested.size(); ++a) {
      auto it = rows.find(requested[a]);
      if (it == rows.end()) {
        absl::StrAppendFormat(&line, " %11s %8s", "-", "-");
        continue;
      }
      const RankResult& row = it->second;
      total_wrong += row.wrong;
      const double algbw = row.seconds > 0 ? static_cast<double>(bytes) / row.seconds / 1e9 : 0;
      const std::string time = requested[a] == "auto"
                                   ? absl::StrFormat("%.1f %s", row.seconds * 1e6, row.algorithm)
                                   : absl::StrFormat("%.1f", row.seconds * 1e6);
      absl::StrAppendFormat(&line, " %11s %8.3f", time,
                            algbw * BusBwFactor(options.op, world_size));
      if (a == 0) {
        first = row.seconds;
      } else if (best_other == 0 || row.seconds < best_other) {
        best_other = row.seconds;
      }
    }
    if (first > 0 && best_other > 0) {
      ratios.push_back(first / best_other);
      absl::StrAppendFormat(&line, " %9.2f", first / best_other);
    }
    if (auto it = explained.find(bytes); options.explain && it != explained.end()) {
      absl::StrAppend(&line, "   ", it->second);
    }
    std::printf("%s\n", line.c_str());
  }
  if (!ratios.empty()) {
    std::printf(
        "# %s/best: worst %.2f, median %.2f over %zu sizes\n", requested.front().c_str(),
        *std::max_element(ratios.begin(), ratios.end()),
        [&] {
          std::vector<double> sorted = ratios;
          std::sort(sorted.begin(), sorted.end());
          return sorted[sorted.size() / 2];
        }(),
        ratios.size());
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
              total_wrong == 0 ? "OK" : "FAILED");
}

absl::Status RunBench(const BenchOptions& options) {
  if (options.sockets.empty()) return absl::InvalidArgumentError("no daemons to run on");
  if (options.ranks_per_daemon < 1) {
    return absl::InvalidArgumentError("--ranks-per-daemon must be at least 1");
  }
  if (options.min_bytes < 0 || options.max_bytes < options.min_bytes) {
    return absl::InvalidArgumentError("need 0 <= --minbytes <= --maxbytes");
  }
  if (options.op == "send" || options.op == "recv") {
    return absl::InvalidArgumentError(
        "-o sendrecv runs send and recv (each rank sends to the next and receives from the "
        "previous, in a group)");
  }
  if (options.op != "sendrecv" && !ParseCollective(options.op)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown operation '", options.op, "'"));
  }
  if (!ParseDataType(options.data_type)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown data type '", options.data_type, "'"));
  }
  if (!ParseReduceOp(options.reduce_op)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op '", options.reduce_op, "'"));
  }
  const std::vector<std::string> requested = RequestedAlgorithms(options.algorithm);
  if (requested.empty()) return absl::InvalidArgumentError("--algorithm lists no algorithm");
  for (const std::string& name : requested) {
    if (name != "auto" && !ParseAlgorithm(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown algorithm '", name, "' (auto, ",
                                                     collective::AlgorithmNames(), ")"));
    }
  }
  if (options.in_place && options.op != "all_reduce" && options.op != "broadcast" &&
      options.op != "reduce" && options.op != "all_to_all") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--in-place runs all_reduce, broadcast, reduce and all_to_all, not ", options.op));
  }
  const bool comparing = requested.size() > 1;
  const int world_size = static_cast<int>(options.sockets.size() * options.ranks_per_daemon);
  if (options.root < 0 || options.root >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", options.root, " is out of range for ", world_size, " ranks"));
  }
  StatusOr<std::unique_ptr<Client>> root = Client::Connect(options.sockets.front());
  if (!root.ok()) return ToAbsl(root.status());
  StatusOr<std::string> comm_id = (*root)->CreateCommId();
  if (!comm_id.ok()) return ToAbsl(comm_id.status());

  std::printf("# baton bench: %s, %d ranks on %zu daemons (%lld per daemon), root %lld\n",
              options.op.c_str(), world_size, options.sockets.size(),
              static_cast<long long>(options.ranks_per_daemon),
              static_cast<long long>(options.root));
  std::printf(
      "# sizes %lld..%lld bytes, factor %lld, %lld iterations after %lld warm-up, check %s, "
      "time: the slowest rank's %s%s%s\n",
      static_cast<long long>(options.min_bytes), static_cast<long long>(options.max_bytes),
      static_cast<long long>(options.step_factor), static_cast<long long>(options.iters),
      static_cast<long long>(options.warmup_iters), options.check ? "on" : "off",
      options.median || comparing ? "median" : "mean",
      options.barrier || comparing ? ", each iteration after a barrier" : "",
      options.in_place ? ", in place" : "");
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
                                     absl::StrCat("--timeout-ms=", options.timeout_ms),
                                     "--op=" + options.op,
                                     "--datatype=" + options.data_type,
                                     "--redop=" + options.reduce_op,
                                     absl::StrCat("--root=", options.root),
                                     "--algorithm=" + options.algorithm,
                                     absl::StrCat("--explain=", options.explain ? 1 : 0),
                                     absl::StrCat("--median=", options.median ? 1 : 0),
                                     absl::StrCat("--barrier=", options.barrier ? 1 : 0),
                                     absl::StrCat("--in-place=", options.in_place ? 1 : 0)};
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      close(pipe_fds[0]);
      dup2(pipe_fds[1], STDOUT_FILENO);
      close(pipe_fds[1]);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(self, argv.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    workers.push_back({pid, fdopen(pipe_fds[0], "r")});
  }

  // Collect every worker's results: time is the slowest rank's, #wrong the sum over ranks.
  // Per size: the count, and per requested algorithm the result.
  std::map<int64_t, std::pair<size_t, std::map<std::string, RankResult>>> table;
  std::map<int64_t, std::string> explained;  // --explain: the tuner's view per size
  std::vector<std::string> failures;
  for (int rank = 0; rank < world_size; ++rank) {
    char line[512];
    while (std::fgets(line, sizeof(line), workers[rank].out) != nullptr) {
      absl::string_view text = absl::StripAsciiWhitespace(line);
      if (absl::ConsumePrefix(&text, "EXPLAIN ")) {
        std::pair<std::string, std::string> parts = absl::StrSplit(text, absl::MaxSplits(' ', 1));
        int64_t bytes = 0;
        if (absl::SimpleAtoi(parts.first, &bytes)) explained[bytes] = parts.second;
        continue;
      }
      std::vector<std::string> f = absl::StrSplit(text, ' ');
      if (f.size() < 7 || f[0] != "RESULT") continue;
      int64_t bytes = 0, wrong = 0;
      size_t count = 0;
      double seconds = 0;
      if (!absl::SimpleAtoi(f[1], &bytes) || !absl::SimpleAtoi(f[2], &count) ||
          !absl::SimpleAtod(f[3], &seconds) || !absl::SimpleAtoi(f[4], &wrong)) {
        continue;
      }
      auto& [row_count, rows] = table[bytes];
      row_count = count;
      RankResult& row = rows[f[6]];
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

  int64_t total_wrong = 0;
  if (comparing) {
    PrintComparison(options, requested, world_size, table, explained, total_wrong);
  } else {
    std::printf("#\n# %12s %12s %8s %6s %10s %8s %8s %8s %6s%s\n", "size", "count", "type", "redop",
                "time", "algbw", "busbw", "#wrong", "algo",
                options.explain ? "   predicted (tuner)" : "");
    std::printf("# %12s %12s %8s %6s %10s %8s %8s %8s %6s\n", "(B)", "(elements)", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "");
    double busbw_sum = 0;
    for (auto& [bytes, entry] : table) {
      auto& [count, rows] = entry;
      const RankResult& row = rows.begin()->second;
      const double algbw = row.seconds > 0 ? static_cast<double>(bytes) / row.seconds / 1e9 : 0;
      const double busbw = algbw * BusBwFactor(options.op, world_size);
      busbw_sum += busbw;
      total_wrong += row.wrong;
      std::printf("  %12lld %12zu %8s %6s %10.1f %8.3f %8.3f %8lld %6s%s\n",
                  static_cast<long long>(bytes), count, options.data_type.c_str(),
                  options.reduce_op.c_str(), row.seconds * 1e6, algbw, busbw,
                  static_cast<long long>(row.wrong), row.algorithm.c_str(),
                  options.explain ? absl::StrCat("   ", explained[bytes]).c_str() : "");
    }
    if (!table.empty()) {
      std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                  total_wrong == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %.3f GB/s\n",
                  busbw_sum / static_cast<double>(table.size()));
    }
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
