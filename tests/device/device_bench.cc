// device_bench: what libbaton's C API costs on device memory, with real processes: all_reduce
// bus bandwidth, stream-to-stream latency at 8 bytes, and how far a rank's own GPU work
// overlaps the collectives.
//
// Like device_collectives_check it starts one batond with --device=<device> (ranks on one node
// share their node's daemon) and, for each world size R of --ranks, forks R rank processes, all
// on device ordinal 0, with BATON_DEVICE=<device>; each rank process has its own default stream
// (nullptr), which is the stream of its stream-ordered calls. Each rank measures:
//
//   1. all_reduce float32 sum of --mib MiB per rank on baton_client_alloc_device memory:
//      blocking, the median of --reps calls after a warm-up (steady_clock around each call);
//      stream-ordered, --reps calls enqueued back to back then Device::Synchronize, the whole
//      time over --reps. algbw = bytes / time, busbw = 2 (R - 1) / R * bytes / time (NCCL's
//      definition).
//   2. latency at 8 bytes (2 float32): stream-ordered call + Synchronize, one at a time, the
//      median of --latency-reps; --pipelined calls enqueued back to back then one Synchronize,
//      the time over the count; blocking calls, the median of --latency-reps.
//   3. overlap: the rank's "compute" is the device's own kernels (Device::NewKernels, a stream of
//      their own) running ReduceMany over two --compute-mib MiB float32 buffers, a number of
//      iterations calibrated (slowest rank) to take as long as the collective loop, which is
//      --overlap-calls blocking all_reduces of --mib MiB (fewer, at least 3, where that many would
//      take over a second: a slow path must not blow the run's time budget). It times compute
//      alone, the loop alone, and both at once (compute in a thread), --overlap-rounds times,
//      medians, and prints overlap = (T_compute + T_collective - T_both) / min(T_compute,
//      T_collective): 1 when both run as if alone, 0 when they serialise.
//
// Every phase starts with a barrier, so the ranks start together and every rank's time is the
// job's; the parent prints, per quantity, the slowest rank's value. Results are checked: the
// inputs are small integers, so the sums are exact, and each phase's last call writes into a
// receive buffer zeroed just before it (untimed), which is read back and compared element for
// element, and stream-ordered phases check baton_comm_get_async_error. A bench that computes
// nothing fails instead of reporting a fast time.
//
// Device memory is filled and read through device/device.h only (no CUDA header), so the same
// program runs on the host fake (ctest's smoke run: numbers without meaning, the path exercised)
// and on CUDA with --device=cuda --batond=PATH. It links libbaton's code statically: the host
// fake's device memory is a per-process registry that it and libbaton must share.
//
// Exit status: 0 when it ran and every check passed; 1 on a failed call or check; 2 for bad
// flags or setup (temporary directory, batond that does not start); 77 when the device is
// unavailable (e.g. --device=cuda without a GPU).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "baton/baton.h"
#include "collective/data_type.h"
#include "common/status_macros.h"
#include "device/device.h"
#include "tests/device/rank_processes.h"

namespace baton::device_bench {
namespace {

using device_check::Clock;
using device_check::Seconds;

constexpr int kMaxRanks = 16;
constexpr int64_t kCallTimeoutMs = 30000;
constexpr int64_t kJoinTimeoutMs = 60000;
constexpr size_t kLatencyCount = 2;  // 8 bytes of float32
constexpr int kCalibrationIterations = 5;
// The overlap's collective loop is cut to about this long (at least kMinOverlapCalls calls).
constexpr double kOverlapLoopSeconds = 1.0;
constexpr int kMinOverlapCalls = 3;
// Inputs are (i * 7 + rank * 13) % kPeriod: small integers, so every float32 sum is exact and
// the expected image is one period tiled.
constexpr size_t kPeriod = 251;

struct Options {
  std::string device = "fake";
#ifdef BATOND_PATH
  std::string batond = BATOND_PATH;
#else
  std::string batond = "batond";
#endif
  std::vector<int> ranks = {2, 4};
  size_t mib = 256;
  int reps = 10;
  int latency_reps = 200;
  int pipelined = 1000;
  size_t compute_mib = 0;  // 0: 1024 on cuda, 16 on the fake
  int overlap_calls = 20;
  int overlap_rounds = 3;
  int timeout_s = 120;  // per world size
  bool keep = false;
};

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

absl::Status Called(baton_code_t code, absl::string_view what) {
  if (code == BATON_OK) return absl::OkStatus();
  return absl::UnknownError(
      absl::StrCat(what, " returned ", baton_code_name(code), ": ", baton_last_error()));
}

// ---- One rank ----------------------------------------------------------------------------

class BenchRank {
 public:
  BenchRank(const Options& o, int world, int rank, device::Device& device,
            device::DeviceKernels& kernels, baton_client_t* client)
      : o_(o),
        world_(world),
        rank_(rank),
        count_(o.mib << 20 >> 2),
        compute_count_(o.compute_mib << 20 >> 2),
        device_(device),
        kernels_(kernels),
        client_(client) {}

  // Joins `comm_id`, runs the three phases, releases everything. The first failure stops it
  // (and aborts the communicator, so that the other ranks stop too).
  void Run(const std::string& comm_id);

  // "VALUE\t<key>\t<seconds or count>" lines, "ERROR\t<message>" lines, then "DONE".
  void Write(std::FILE* out) const;
  bool failed() const { return !error_.ok(); }

 private:
  absl::Status Setup(const std::string& comm_id);
  absl::Status Bandwidth();
  absl::Status Latency();
  absl::Status Overlap();
  void Teardown();

  absl::Status AllReduce(size_t count, bool on_stream) {
    baton_call_options_t options;
    baton_call_options_init(&options);
    options.timeout_ms = kCallTimeoutMs;
    options.on_stream = on_stream ? 1 : 0;
    options.stream = nullptr;  // this process's default stream
    return Called(baton_all_reduce(comm_, send_, recv_, count, BATON_FLOAT32, BATON_SUM, &options),
                  on_stream ? "stream-ordered baton_all_reduce" : "baton_all_reduce");
  }
  absl::Status Barrier() {
    baton_call_options_t options;
    baton_call_options_init(&options);
    options.timeout_ms = kCallTimeoutMs;
    return Called(baton_barrier(comm_, &options), "baton_barrier");
  }
  absl::Status Synchronize() {
    return Annotate(device_.Synchronize(nullptr), "Synchronize(default stream)");
  }
  // Zeroes the first `count` elements of the receive buffer, so that the next call must write
  // them. Untimed.
  absl::Status ZeroRecv(size_t count) {
    kernels_.Zero(recv_, count * sizeof(float));
    return Annotate(kernels_.last_error(), "zeroing the receive buffer");
  }
  // Reads back the first `count` elements and compares them with the exact sums; for
  // stream-ordered calls also the communicator's asynchronous error.
  absl::Status Verify(size_t count, absl::string_view what, bool on_stream);
  // The slowest rank's value of `value` (a host all_reduce, max).
  absl::StatusOr<double> Slowest(double value);

  void Record(const std::string& key, double value) { values_.emplace_back(key, value); }

  const Options& o_;
  const int world_;
  const int rank_;
  const size_t count_;          // elements per rank in the bandwidth and overlap calls
  const size_t compute_count_;  // elements per compute buffer
  device::Device& device_;
  device::DeviceKernels& kernels_;
  baton_client_t* const client_;
  baton_comm_t* comm_ = nullptr;
  float* send_ = nullptr;
  float* recv_ = nullptr;
  std::unique_ptr<device::Allocation> compute_[2];
  std::vector<float> expected_period_;  // the sums, one period
  double blocking_median_ = 0;          // seconds per blocking bandwidth call
  std::vector<std::pair<std::string, double>> values_;
  absl::Status error_;
};

absl::Status BenchRank::Setup(const std::string& comm_id) {
  BATON_RETURN_IF_ERROR(
      Called(baton_client_join(client_, comm_id.c_str(), world_, rank_, kJoinTimeoutMs, &comm_),
             "baton_client_join"));
  const size_t bytes = count_ * sizeof(float);
  void* memory = nullptr;
  BATON_RETURN_IF_ERROR(
      Called(baton_client_alloc_device(client_, bytes, 0, &memory), "baton_client_alloc_device"));
  send_ = static_cast<float*>(memory);
  BATON_RETURN_IF_ERROR(
      Called(baton_client_alloc_device(client_, bytes, 0, &memory), "baton_client_alloc_device"));
  recv_ = static_cast<float*>(memory);

  expected_period_.assign(kPeriod, 0.0f);
  std::vector<float> mine(kPeriod);
  for (size_t i = 0; i < kPeriod; ++i) {
    for (int r = 0; r < world_; ++r) {
      const float value = static_cast<float>((i * 7 + static_cast<size_t>(r) * 13) % kPeriod);
      expected_period_[i] += value;
      if (r == rank_) mine[i] = value;
    }
  }
  std::vector<float> image(count_);
  for (size_t i = 0; i < count_; ++i) image[i] = mine[i % kPeriod];
  BATON_RETURN_IF_ERROR(
      Annotate(device_.CopyAsync(send_, image.data(), bytes, nullptr), "uploading the input"));
  BATON_RETURN_IF_ERROR(Synchronize());

  const size_t compute_bytes = compute_count_ * sizeof(float);
  for (std::unique_ptr<device::Allocation>& buffer : compute_) {
    absl::StatusOr<std::unique_ptr<device::Allocation>> allocation =
        device_.Allocate(compute_bytes, 0);
    BATON_RETURN_IF_ERROR(Annotate(allocation.status(), "allocating the compute buffers"));
    buffer = *std::move(allocation);
    // Zeros stay zeros under the sums, whatever the iteration count.
    kernels_.Zero(buffer->data(), compute_bytes);
  }
  return Annotate(kernels_.last_error(), "zeroing the compute buffers");
}

absl::Status BenchRank::Verify(size_t count, absl::string_view what, bool on_stream) {
  if (on_stream) {
    BATON_RETURN_IF_ERROR(Called(baton_comm_get_async_error(comm_),
                                 absl::StrCat(what, ": baton_comm_get_async_error")));
  }
  std::vector<float> got(count);
  BATON_RETURN_IF_ERROR(
      Annotate(device_.CopyAsync(got.data(), recv_, count * sizeof(float), nullptr),
               absl::StrCat(what, ": reading back")));
  BATON_RETURN_IF_ERROR(Synchronize());
  size_t differing = 0;
  size_t first = count;
  for (size_t i = 0; i < count; ++i) {
    // Bitwise: exact sums, and a NaN must not compare unequal to itself silently.
    const float want = expected_period_[i % kPeriod];
    if (std::memcmp(&got[i], &want, sizeof(float)) == 0) continue;
    if (first == count) first = i;
    ++differing;
  }
  if (differing == 0) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(what, ": element ", first, " of ", count, " is ", got[first], ", expected ",
                   expected_period_[first % kPeriod], " (", differing, " elements differ)"));
}

absl::StatusOr<double> BenchRank::Slowest(double value) {
  baton_call_options_t options;
  baton_call_options_init(&options);
  options.timeout_ms = kCallTimeoutMs;
  double result = 0;
  BATON_RETURN_IF_ERROR(
      Called(baton_all_reduce(comm_, &value, &result, 1, BATON_FLOAT64, BATON_MAX, &options),
             "baton_all_reduce (host, max)"));
  return result;
}

absl::Status BenchRank::Bandwidth() {
  // Blocking: one warm-up, then --reps calls timed one by one; the last one's receive buffer
  // is zeroed first.
  BATON_RETURN_IF_ERROR(Barrier());
  BATON_RETURN_IF_ERROR(AllReduce(count_, false));
  std::vector<double> times;
  for (int rep = 0; rep < o_.reps; ++rep) {
    if (rep == o_.reps - 1) BATON_RETURN_IF_ERROR(ZeroRecv(count_));
    const Clock::time_point start = Clock::now();
    BATON_RETURN_IF_ERROR(AllReduce(count_, false));
    times.push_back(Seconds(start));
  }
  BATON_RETURN_IF_ERROR(Verify(count_, "blocking all_reduce", false));
  blocking_median_ = Median(times);
  Record("bw_blocking", blocking_median_);

  // Stream-ordered: one warm-up (with its Synchronize), then --reps calls back to back and one
  // Synchronize, all timed.
  BATON_RETURN_IF_ERROR(AllReduce(count_, true));
  BATON_RETURN_IF_ERROR(Synchronize());
  BATON_RETURN_IF_ERROR(ZeroRecv(count_));
  BATON_RETURN_IF_ERROR(Barrier());
  const Clock::time_point start = Clock::now();
  for (int rep = 0; rep < o_.reps; ++rep) BATON_RETURN_IF_ERROR(AllReduce(count_, true));
  BATON_RETURN_IF_ERROR(Synchronize());
  Record("bw_stream", Seconds(start) / o_.reps);
  return Verify(count_, "stream-ordered all_reduce", true);
}

absl::Status BenchRank::Latency() {
  // Stream-ordered, one at a time: call, then wait for the stream.
  BATON_RETURN_IF_ERROR(AllReduce(kLatencyCount, true));
  BATON_RETURN_IF_ERROR(Synchronize());
  BATON_RETURN_IF_ERROR(Barrier());
  std::vector<double> times;
  for (int rep = 0; rep < o_.latency_reps; ++rep) {
    if (rep == o_.latency_reps - 1) BATON_RETURN_IF_ERROR(ZeroRecv(kLatencyCount));
    const Clock::time_point start = Clock::now();
    BATON_RETURN_IF_ERROR(AllReduce(kLatencyCount, true));
    BATON_RETURN_IF_ERROR(Synchronize());
    times.push_back(Seconds(start));
  }
  BATON_RETURN_IF_ERROR(Verify(kLatencyCount, "8 B stream-ordered all_reduce", true));
  Record("lat_stream", Median(times));

  // Pipelined: --pipelined calls queued back to back, one Synchronize.
  BATON_RETURN_IF_ERROR(ZeroRecv(kLatencyCount));
  BATON_RETURN_IF_ERROR(Barrier());
  Clock::time_point start = Clock::now();
  for (int call = 0; call < o_.pipelined; ++call) {
    BATON_RETURN_IF_ERROR(AllReduce(kLatencyCount, true));
  }
  BATON_RETURN_IF_ERROR(Synchronize());
  Record("lat_pipelined", Seconds(start) / o_.pipelined);
  BATON_RETURN_IF_ERROR(Verify(kLatencyCount, "8 B pipelined all_reduce", true));

  // Blocking.
  BATON_RETURN_IF_ERROR(Barrier());
  times.clear();
  for (int rep = 0; rep < o_.latency_reps; ++rep) {
    if (rep == o_.latency_reps - 1) BATON_RETURN_IF_ERROR(ZeroRecv(kLatencyCount));
    start = Clock::now();
    BATON_RETURN_IF_ERROR(AllReduce(kLatencyCount, false));
    times.push_back(Seconds(start));
  }
  Record("lat_blocking", Median(times));
  return Verify(kLatencyCount, "8 B blocking all_reduce", false);
}

absl::Status BenchRank::Overlap() {
  void* const a = compute_[0]->data();
  const void* const sources[2] = {compute_[0]->data(), compute_[1]->data()};
  auto compute = [&](int64_t iterations) {
    for (int64_t i = 0; i < iterations; ++i) {
      kernels_.ReduceMany(collective::DataType::kFloat32, collective::ReduceOp::kSum, a, sources,
                          compute_count_);
    }
  };
  // The loop's length: --overlap-calls, fewer when the calls are so slow (a staged path) that
  // it would run past kOverlapLoopSeconds, which keeps the whole run within its budget.
  BATON_ASSIGN_OR_RETURN(const double call_time, Slowest(blocking_median_));
  const int calls = static_cast<int>(
      std::clamp<double>(std::floor(kOverlapLoopSeconds / std::max(call_time, 1e-9)),
                         std::min(kMinOverlapCalls, o_.overlap_calls), o_.overlap_calls));
  Record("ov_calls", calls);
  auto collectives = [&]() -> absl::Status {
    for (int call = 0; call < calls; ++call) {
      BATON_RETURN_IF_ERROR(AllReduce(count_, false));
    }
    return absl::OkStatus();
  };

  // Calibration, with every rank computing at once (as in the measurement): the loop's time,
  // and a first guess of the iterations from a few, corrected by timing that many once, since
  // a few short kernels misjudge a long run. Every time is the slowest rank's, so all ranks
  // run the same count.
  BATON_RETURN_IF_ERROR(Barrier());
  Clock::time_point start = Clock::now();
  BATON_RETURN_IF_ERROR(collectives());
  BATON_ASSIGN_OR_RETURN(const double loop, Slowest(Seconds(start)));
  BATON_RETURN_IF_ERROR(Barrier());
  compute(1);  // warm-up
  start = Clock::now();
  compute(kCalibrationIterations);
  BATON_ASSIGN_OR_RETURN(const double few, Slowest(Seconds(start)));
  int64_t iterations =
      std::max<int64_t>(1, std::llround(loop / std::max(few / kCalibrationIterations, 1e-9)));
  BATON_RETURN_IF_ERROR(Barrier());
  start = Clock::now();
  compute(iterations);
  BATON_ASSIGN_OR_RETURN(const double guessed, Slowest(Seconds(start)));
  iterations = std::max<int64_t>(
      1, std::llround(static_cast<double>(iterations) * loop / std::max(guessed, 1e-9)));
  BATON_RETURN_IF_ERROR(Annotate(kernels_.last_error(), "compute kernels"));
  Record("ov_iterations", static_cast<double>(iterations));

  std::vector<double> alone_compute, alone_collective, both, both_compute, both_collective;
  for (int round = 0; round < o_.overlap_rounds; ++round) {
    BATON_RETURN_IF_ERROR(Barrier());
    start = Clock::now();
    compute(iterations);
    alone_compute.push_back(Seconds(start));

    BATON_RETURN_IF_ERROR(Barrier());
    start = Clock::now();
    BATON_RETURN_IF_ERROR(collectives());
    alone_collective.push_back(Seconds(start));

    // Both: the compute in a thread, the collective loop here; the last round's last call
    // writes into a zeroed buffer.
    if (round == o_.overlap_rounds - 1) BATON_RETURN_IF_ERROR(ZeroRecv(count_));
    BATON_RETURN_IF_ERROR(Barrier());
    start = Clock::now();
    double compute_done = 0;
    std::thread worker([&] {
      compute(iterations);
      compute_done = Seconds(start);
    });
    const absl::Status looped = collectives();
    const double collective_done = Seconds(start);
    worker.join();
    both.push_back(Seconds(start));
    BATON_RETURN_IF_ERROR(looped);
    both_compute.push_back(compute_done);
    both_collective.push_back(collective_done);
  }
  BATON_RETURN_IF_ERROR(Annotate(kernels_.last_error(), "compute kernels"));
  BATON_RETURN_IF_ERROR(Verify(count_, "all_reduce alongside compute", false));
  Record("ov_compute", Median(alone_compute));
  Record("ov_collective", Median(alone_collective));
  Record("ov_both", Median(both));
  Record("ov_both_compute", Median(both_compute));
  Record("ov_both_collective", Median(both_collective));
  return absl::OkStatus();
}

void BenchRank::Teardown() {
  if (comm_ != nullptr) {
    const baton_code_t code = baton_comm_destroy(comm_);
    if (code != BATON_OK && error_.ok()) error_ = Called(code, "baton_comm_destroy");
    comm_ = nullptr;
  }
  for (float* buffer : {send_, recv_}) {
    if (buffer == nullptr) continue;
    const baton_code_t code = baton_client_free_device(client_, buffer);
    if (code != BATON_OK && error_.ok()) error_ = Called(code, "baton_client_free_device");
  }
  send_ = recv_ = nullptr;
  for (std::unique_ptr<device::Allocation>& buffer : compute_) buffer.reset();
}

void BenchRank::Run(const std::string& comm_id) {
  error_ = Setup(comm_id);
  if (error_.ok()) error_ = Bandwidth();
  if (error_.ok()) error_ = Latency();
  if (error_.ok()) error_ = Overlap();
  if (!error_.ok() && comm_ != nullptr) {
    baton_comm_abort(comm_, absl::StrCat("rank ", rank_, " failed").c_str());
  }
  Teardown();
}

void BenchRank::Write(std::FILE* out) const {
  for (const auto& [key, value] : values_) {
    std::fprintf(out, "VALUE\t%s\t%.9g\n", key.c_str(), value);
  }
  if (!error_.ok()) {
    std::string message = error_.ToString();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(out, "ERROR\trank %d: %s\n", rank_, message.c_str());
  }
  std::fprintf(out, "DONE\n");
}

// The rank process: exits 0 when it ran and its checks passed.
int RankMain(const Options& o, const std::string& socket, int world, int rank,
             const std::string& comm_id, const std::string& report) {
  setenv("BATON_DEVICE", o.device.c_str(), 1);
  std::FILE* out = std::fopen(report.c_str(), "w");
  if (out == nullptr) return 2;
  auto fail = [&](const std::string& message) {
    std::fprintf(out, "ERROR\trank %d: %s\nDONE\n", rank, message.c_str());
    std::fclose(out);
    return 1;
  };
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::OpenDevice(o.device);
  if (!device.ok() || *device == nullptr) {
    return fail(
        absl::StrCat("device ", o.device, ": ", device.ok() ? "none" : device.status().ToString()));
  }
  absl::StatusOr<std::unique_ptr<device::DeviceKernels>> kernels = (*device)->NewKernels(0);
  if (!kernels.ok()) return fail(absl::StrCat("NewKernels(0): ", kernels.status().ToString()));
  baton_client_t* client = nullptr;
  const baton_code_t code = baton_client_connect(socket.c_str(), 10000, &client);
  if (code != BATON_OK) return fail(Called(code, "baton_client_connect").ToString());
  BenchRank r(o, world, rank, **device, **kernels, client);
  r.Run(comm_id);
  baton_client_close(client);
  r.Write(out);
  std::fclose(out);
  return r.failed() ? 1 : 0;
}

// ---- The parent ----------------------------------------------------------------------------

std::string Now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

std::string Duration(double seconds) {
  if (seconds < 1e-3) return absl::StrFormat("%8.1f us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%8.3f ms", seconds * 1e3);
  return absl::StrFormat("%8.3f s ", seconds);
}

// Runs one world size and prints its table. False if anything failed.
bool RunWorld(const Options& o, const device_check::Daemon& daemon, const std::string& dir,
              const std::string& description, int world) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::vector<std::string>> ids = device_check::MakeCommIds(daemon.socket(), 1);
  if (!ids.ok()) {
    std::printf("R=%d FAIL %s\n", world, ids.status().ToString().c_str());
    return false;
  }
  std::vector<pid_t> pids;
  std::vector<std::string> reports;
  for (int rank = 0; rank < world; ++rank) {
    reports.push_back(absl::StrCat(dir, "/bench-r", world, "-rank", rank, ".txt"));
    pids.push_back(device_check::ForkChild(
        [&, rank] { return RankMain(o, daemon.socket(), world, rank, (*ids)[0], reports[rank]); }));
  }
  const Clock::time_point deadline = start + std::chrono::seconds(o.timeout_s);
  std::vector<std::string> errors;
  for (int rank = 0; rank < world; ++rank) {
    const int rc = device_check::WaitChild(pids[rank], deadline);
    if (rc == -SIGKILL && Clock::now() > deadline) {
      errors.push_back(
          absl::StrCat("rank ", rank, " killed after the ", o.timeout_s, " s timeout (--timeout)"));
    } else if (rc < 0) {
      errors.push_back(absl::StrCat("rank ", rank, " died of signal ", -rc));
    }
  }

  // The slowest rank's value of each quantity, and how many ranks reported it.
  std::map<std::string, double> slowest;
  std::map<std::string, int> reported;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(reports[rank]);
    std::string row;
    bool done = false;
    while (std::getline(in, row)) {
      const std::vector<std::string> f = absl::StrSplit(row, absl::MaxSplits('\t', 2));
      double value = 0;
      if (f[0] == "VALUE" && f.size() == 3 && absl::SimpleAtod(f[2], &value)) {
        slowest[f[1]] = std::max(slowest[f[1]], value);
        ++reported[f[1]];
      } else if (f[0] == "ERROR" && f.size() >= 2) {
        errors.push_back(row.substr(6));
      } else if (f[0] == "DONE") {
        done = true;
      }
    }
    if (!done) errors.push_back(absl::StrCat("rank ", rank, " wrote no complete report"));
  }
  auto have = [&](const char* key) { return reported[key] == world; };

  const double bytes = static_cast<double>(o.mib << 20);
  const double bus_factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  std::printf("\n== R=%d ranks on device 0 of: %s; %s\n", world, description.c_str(),
              Now().c_str());
  std::printf(
      "all_reduce float32 sum, %zu MiB per rank, baton_client_alloc_device memory "
      "(slowest rank)\n",
      o.mib);
  std::printf("  %-46s %11s %12s %12s\n", "mode", "time", "algbw", "busbw");
  auto bandwidth_row = [&](const char* key, const std::string& label) {
    if (!have(key)) {
      std::printf("  %-46s %11s\n", label.c_str(), "-");
      return;
    }
    const double t = slowest[key];
    std::printf("  %-46s %s %7.1f GB/s %7.1f GB/s\n", label.c_str(), Duration(t).c_str(),
                bytes / t / 1e9, bus_factor * bytes / t / 1e9);
  };
  bandwidth_row("bw_blocking", absl::StrCat("blocking, median of ", o.reps));
  bandwidth_row("bw_stream", absl::StrCat("stream-ordered, ", o.reps, " queued + Synchronize"));

  std::printf("latency, 8 B (2 x float32), slowest rank\n");
  auto latency_row = [&](const char* key, const std::string& label) {
    std::printf("  %-46s %s\n", label.c_str(), have(key) ? Duration(slowest[key]).c_str() : "-");
  };
  latency_row("lat_stream", absl::StrCat("stream: call + Synchronize, median of ", o.latency_reps));
  latency_row("lat_pipelined",
              absl::StrCat("stream: ", o.pipelined, " queued + Synchronize, per call"));
  latency_row("lat_blocking", absl::StrCat("blocking, median of ", o.latency_reps));

  if (have("ov_iterations") && have("ov_calls")) {
    std::printf(
        "overlap: compute = %lld x ReduceMany(2 x %zu MiB float32) on the device's own "
        "kernels; collective = %lld blocking %zu MiB all_reduces (medians of %d rounds, "
        "slowest rank)\n",
        static_cast<long long>(slowest["ov_iterations"]), o.compute_mib,
        static_cast<long long>(slowest["ov_calls"]), o.mib, o.overlap_rounds);
  } else {
    std::printf("overlap:\n");
  }
  if (have("ov_compute") && have("ov_collective") && have("ov_both")) {
    const double compute = slowest["ov_compute"];
    const double collective = slowest["ov_collective"];
    const double both = slowest["ov_both"];
    const double overlap = (compute + collective - both) / std::min(compute, collective);
    std::printf("  %-46s %s\n", "compute alone", Duration(compute).c_str());
    std::printf("  %-46s %s\n", "collective loop alone", Duration(collective).c_str());
    std::printf("  %-46s %s (compute done at %s, collectives at %s)\n", "both at once",
                Duration(both).c_str(), Duration(slowest["ov_both_compute"]).c_str(),
                Duration(slowest["ov_both_collective"]).c_str());
    std::printf(
        "  overlap = (T_compute + T_collective - T_both) / min = %.2f "
        "(1 = perfect overlap, 0 = serialized)\n",
        overlap);
    std::string reading;
    if (overlap >= 0.7) {
      reading = "compute and collectives ran concurrently: the collective cost little on top";
    } else if (overlap < 0) {
      reading =
          "worse than serialized: running both at once took longer than one after the other "
          "(contention beyond taking turns)";
    } else if (overlap <= 0.3) {
      reading =
          "serialized: the rank's kernels and the daemon's reduction kernels took turns (separate "
          "processes on one device time-slice without MPS), so a collective costs its full time "
          "even alongside compute";
    } else {
      reading =
          "partial overlap: the two share the device (time-slicing or contention for memory "
          "bandwidth), each slowed by the other";
    }
    if (o.device == "fake") {
      absl::StrAppend(&reading, " [host fake: the \"kernels\" are host threads on ",
                      std::thread::hardware_concurrency(), " CPUs; no meaning for a GPU]");
    }
    std::printf("  => %s\n", reading.c_str());
  } else {
    std::printf("  -\n");
  }

  for (const std::string& e : errors) std::printf("R=%d ERROR %s\n", world, e.c_str());
  const bool ok = errors.empty();
  std::printf("R=%d: %s in %.1f s\n", world, ok ? "every result checked and correct" : "FAILED",
              Seconds(start));
  return ok;
}

int Usage(const std::string& error) {
  std::fprintf(stderr,
               "%s\nusage: device_bench [--device=fake|cuda] [--batond=PATH] [--ranks=2,4]\n"
               "         [--mib=256] [--reps=10] [--latency-reps=200] [--pipelined=1000]\n"
               "         [--compute-mib=N (1024 on cuda, 16 on fake)] [--overlap-calls=20]\n"
               "         [--overlap-rounds=3] [--timeout=SECONDS per world size] [--keep]\n",
               error.c_str());
  return 2;
}

// Parses a positive integer flag value into `out`; false when it is not one in [1, max].
template <typename T>
bool Positive(const std::string& value, T max, T& out) {
  T parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 1 || parsed > max) return false;
  out = parsed;
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (name == "--device" && (value == "fake" || value == "cuda")) {
      o.device = value;
    } else if (name == "--batond" && !value.empty()) {
      o.batond = value;
    } else if (name == "--ranks") {
      o.ranks.clear();
      for (absl::string_view r : absl::StrSplit(value, ',')) {
        int n = 0;
        if (!Positive(std::string(r), kMaxRanks, n)) {
          return Usage(absl::StrCat("--ranks: each between 1 and ", kMaxRanks));
        }
        o.ranks.push_back(n);
      }
    } else if (name == "--mib") {
      if (!Positive<size_t>(value, 16384, o.mib)) return Usage("--mib: 1 to 16384");
    } else if (name == "--reps") {
      if (!Positive(value, 100000, o.reps)) return Usage("--reps: 1 to 100000");
    } else if (name == "--latency-reps") {
      if (!Positive(value, 1000000, o.latency_reps)) return Usage("--latency-reps: 1 to 1000000");
    } else if (name == "--pipelined") {
      if (!Positive(value, 1000000, o.pipelined)) return Usage("--pipelined: 1 to 1000000");
    } else if (name == "--compute-mib") {
      if (!Positive<size_t>(value, 16384, o.compute_mib)) return Usage("--compute-mib: 1 to 16384");
    } else if (name == "--overlap-calls") {
      if (!Positive(value, 100000, o.overlap_calls)) return Usage("--overlap-calls: 1 to 100000");
    } else if (name == "--overlap-rounds") {
      if (!Positive(value, 1000, o.overlap_rounds)) return Usage("--overlap-rounds: 1 to 1000");
    } else if (name == "--timeout") {
      if (!Positive(value, 86400, o.timeout_s)) return Usage("--timeout: seconds");
    } else if (arg == "--keep") {
      o.keep = true;
    } else {
      return Usage("unknown or bad flag: " + arg);
    }
  }
  if (o.compute_mib == 0) o.compute_mib = o.device == "cuda" ? 1024 : 16;
  signal(SIGPIPE, SIG_IGN);
  const Clock::time_point start = Clock::now();
  std::printf(
      "device_bench: --device=%s --batond=%s --mib=%zu --reps=%d --latency-reps=%d "
      "--pipelined=%d --compute-mib=%zu --overlap-calls=%d --overlap-rounds=%d\n",
      o.device.c_str(), o.batond.c_str(), o.mib, o.reps, o.latency_reps, o.pipelined, o.compute_mib,
      o.overlap_calls, o.overlap_rounds);
  const absl::StatusOr<std::string> probe = device_check::ProbeDevice(o.device);
  if (absl::IsUnavailable(probe.status())) {
    std::printf("device %s unavailable: %s\n", o.device.c_str(),
                std::string(probe.status().message()).c_str());
    return 77;
  }
  if (!probe.ok()) {
    std::printf("FAIL: %s\n", std::string(probe.status().message()).c_str());
    return 1;
  }
  std::printf("device: %s\n", probe->c_str());
  const absl::StatusOr<std::string> temp_dir = device_check::MakeTempDir("baton-devbench-");
  if (!temp_dir.ok()) {
    std::printf("FAIL: %s\n", std::string(temp_dir.status().message()).c_str());
    return 2;
  }
  const std::string& dir = *temp_dir;
  bool ok = true;
  {
    device_check::Daemon daemon;
    const absl::Status started =
        daemon.Start({.batond = o.batond, .device = o.device, .node_name = "devbench"}, dir);
    if (!started.ok()) {
      std::printf("FAIL: %s\n", started.ToString().c_str());
      return 2;
    }
    for (int world : o.ranks) ok = RunWorld(o, daemon, dir, *probe, world) && ok;
  }
  std::printf("\nsummary: %s in %.1f s\n", ok ? "PASS" : "FAIL", Seconds(start));
  if (ok && !o.keep) {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
  } else {
    std::printf("logs and rank reports: %s\n", dir.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace baton::device_bench

int main(int argc, char** argv) { return baton::device_bench::Main(argc, argv); }
