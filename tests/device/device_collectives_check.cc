// device_collectives_check: every collective of libbaton's C API on device memory, with real
// processes, checked bit for bit against a CPU reference.
//
// It starts one batond (ranks on one node share their node's daemon) with --device=<device>,
// then for each world size R of --ranks forks R rank processes, all on device ordinal 0 (several
// ranks sharing one GPU), with BATON_DEVICE=<device>. Each rank joins one communicator per kind
// of memory:
//   vmm:     buffers from baton_client_alloc_device (memory shared with the daemon);
//   foreign: buffers that the device layer allocated (device::Device::Allocate on CUDA; on the
//            host fake, a HostFakeDevice allocation in three segments that the buffers straddle),
//            at an offset inside the allocation, registered by libbaton on first use and
//            deregistered (baton_client_deregister_device) before they are freed;
// and runs, blocking and stream-ordered (on_stream = 1 on the default stream; the host then
// waits with the device's Synchronize and checks baton_comm_get_async_error), every collective
// for every dtype and every reduce op, at several counts (odd ones, and >= --large-bytes per
// rank), plus in-place all_reduce, all_gather and reduce_scatter.
//
// Every rank computes, from the case alone, the bytes its receive buffer must hold
// (tests/device/device_check_reference.h: exact-valued reductions, arbitrary bits for data
// movement), including the bytes a call must not write (a receive buffer's tail, a non-root's
// receive buffer, all_to_all_v's gaps), and compares all of them. Barriers are checked with an
// arrival counter in shared memory.
//
// Device memory is filled and read only through device/device.h (CopyAsync + Synchronize), so
// the same program runs on the host fake and on CUDA. It links libbaton's code statically
// (baton_client_core) and calls only <baton/baton.h>: the host fake's device memory is a
// per-process registry, which libbaton and this program must share for the foreign pass.
//
// Output: one line per (ranks, memory, collective) with PASS/FAIL and counts, failures with the
// rank, mode, dtype, op, count and the first differing element, then a summary. Exit status: 0
// when everything passed, 1 on a failure, 2 for bad flags or a daemon that does not start, 77
// when the device is unavailable (e.g. --device=cuda without a GPU).

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/baton.h"
#include "device/device.h"
#include "device/host_fake.h"
#include "tests/device/device_check_reference.h"
#include "tests/device/rank_processes.h"

namespace baton::device_check {
namespace {

constexpr size_t kBufferOffset = 256;  // foreign buffers start this far into the allocation
constexpr int64_t kCallTimeoutMs = 30000;
constexpr size_t kMessagesPerLine = 3;  // failure messages kept per rank and report line

// ---- Memory kinds and modes ------------------------------------------------------------

enum class Memory { kVmm, kForeign };
constexpr int kMemories = 2;
const char* MemoryName(Memory memory) { return memory == Memory::kVmm ? "vmm" : "foreign"; }

enum class Mode { kBlocking, kStream };
const char* ModeName(Mode mode) { return mode == Mode::kBlocking ? "blocking" : "stream"; }

// ---- One rank --------------------------------------------------------------------------------

// What a rank saw, per (memory, check, mode), written for the parent to add up.
struct Tally {
  uint64_t checks[2] = {0, 0};
  uint64_t failures[2] = {0, 0};
  std::vector<std::string> messages;
};

// The shared page the parent maps before forking: barrier arrivals, per memory.
struct SharedPage {
  std::atomic<uint64_t> arrived[kMemories];
};

class Rank {
 public:
  Rank(int world, int rank, device::Device& device, std::string device_name, baton_client_t* client,
       SharedPage& shared)
      : world_(world),
        rank_(rank),
        device_(device),
        device_name_(std::move(device_name)),
        client_(client),
        shared_(shared) {}

  // Joins communicator comm_ids[m] for memory m, then runs every case of `plan` on each memory
  // in both modes. Each case's images are computed once for the four runs.
  void Run(const std::vector<Case>& plan, const std::vector<std::string>& comm_ids);

  // Writes the tallies and errors, one line each (read by RunWorld).
  void Write(std::FILE* out) const;
  bool failed() const { return failed_; }

 private:
  struct Buffers {
    uint8_t* send = nullptr;
    uint8_t* recv = nullptr;
  };
  // One memory's communicator and buffers.
  struct Pass {
    Memory memory = Memory::kVmm;
    baton_comm_t* comm = nullptr;
    Buffers buffers;
    void* vmm[2] = {nullptr, nullptr};
    std::unique_ptr<device::Allocation> foreign;
    bool alive = false;  // joined, has buffers, and no call has failed
  };

  void Setup(Pass& pass, const std::string& comm_id, size_t capacity);
  void Teardown(Pass& pass);
  // False when the pass cannot go on (a call failed; the communicator is aborted).
  bool RunCase(const Case& c, const Images& im, Pass& pass, Mode mode);
  bool Barrier(Pass& pass, Mode mode, Tally& tally);
  void Fail(Tally& tally, Mode mode, const std::string& message);
  void Error(const std::string& message) {
    errors_.push_back(absl::StrCat("rank ", rank_, ": ", message));
    failed_ = true;
  }
  static std::string CallError(const char* what, baton_code_t code) {
    return absl::StrCat(what, " returned ", baton_code_name(code), ": ", baton_last_error());
  }
  std::string Where(const Case& c, Memory memory, Mode mode) const {
    return absl::StrCat("rank ", rank_, " ", MemoryName(memory), " ", ModeName(mode), " ",
                        CheckName(c.check), " ", baton_dtype_name(c.type),
                        Reduces(c.check) ? absl::StrCat(" ", baton_reduce_op_name(c.op)) : "",
                        " count=", c.count,
                        c.check == Check::kBroadcast || c.check == Check::kReduce ||
                                c.check == Check::kGather || c.check == Check::kScatter
                            ? absl::StrCat(" root=", c.root)
                            : "");
  }
  baton_code_t Call(baton_comm_t* comm, const Case& c, const Images& im, const Buffers& b,
                    Mode mode) const;

  const int world_;
  const int rank_;
  device::Device& device_;
  const std::string device_name_;
  baton_client_t* const client_;
  SharedPage& shared_;
  uint64_t barriers_[kMemories] = {0, 0};
  std::map<std::pair<int, int>, Tally> tallies_;  // (memory, check)
  std::vector<std::string> errors_;
  bool failed_ = false;
};

void Rank::Fail(Tally& tally, Mode mode, const std::string& message) {
  ++tally.failures[static_cast<int>(mode)];
  if (tally.messages.size() < kMessagesPerLine) tally.messages.push_back(message);
  failed_ = true;
}

baton_code_t Rank::Call(baton_comm_t* comm, const Case& c, const Images& im, const Buffers& b,
                        Mode mode) const {
  baton_call_options_t options;
  baton_call_options_init(&options);
  options.timeout_ms = kCallTimeoutMs;
  options.on_stream = mode == Mode::kStream ? 1 : 0;
  options.stream = nullptr;  // the default stream
  const baton_dtype_t type = c.type;
  const size_t n = c.count;
  void* send = b.send;
  void* recv = b.recv;
  switch (c.check) {
    case Check::kAllReduce:
      return baton_all_reduce(comm, send, recv, n, type, c.op, &options);
    case Check::kAllReduceInPlace:
      return baton_all_reduce(comm, recv, recv, n, type, c.op, &options);
    case Check::kReduceScatter:
      return baton_reduce_scatter(comm, send, recv, n, type, c.op, &options);
    case Check::kReduceScatterInPlace:
      return baton_reduce_scatter(comm, recv, recv, n, type, c.op, &options);
    case Check::kAllGather:
      return baton_all_gather(comm, send, recv, n, type, &options);
    case Check::kAllGatherInPlace:  // NCCL's in place: this rank's block of recv is its send
      return baton_all_gather(comm, b.recv + im.send_offset, recv, n, type, &options);
    case Check::kBroadcast:
      return baton_broadcast(comm, send, recv, n, type, c.root, &options);
    case Check::kReduce:
      return baton_reduce(comm, send, recv, n, type, c.op, c.root, &options);
    case Check::kAllToAll:
      return baton_all_to_all(comm, send, recv, n, type, &options);
    case Check::kAllToAllV:
      return baton_all_to_all_v(comm, send, im.v.send_counts.data(), im.v.send_displs.data(), recv,
                                im.v.recv_counts.data(), im.v.recv_displs.data(),
                                static_cast<size_t>(world_), type, &options);
    case Check::kGather:
      return baton_gather(comm, send, recv, n, type, c.root, &options);
    case Check::kScatter:
      return baton_scatter(comm, send, recv, n, type, c.root, &options);
    case Check::kSendRecv: {
      // A send returns once the daemon has the data, so every rank sends first.
      const baton_code_t sent = baton_send(comm, send, n, type, (rank_ + 1) % world_, &options);
      if (sent != BATON_OK) return sent;
      return baton_recv(comm, recv, n, type, (rank_ + world_ - 1) % world_, &options);
    }
    case Check::kBarrier:
      return baton_barrier(comm, &options);
  }
  return BATON_INTERNAL;
}

bool Rank::RunCase(const Case& c, const Images& im, Pass& pass, Mode mode) {
  Tally& tally = tallies_[{static_cast<int>(pass.memory), static_cast<int>(c.check)}];
  if (c.check == Check::kBarrier) return Barrier(pass, mode, tally);
  ++tally.checks[static_cast<int>(mode)];
  auto fail = [&](const std::string& what) {
    Fail(tally, mode, absl::StrCat(Where(c, pass.memory, mode), ": ", what));
  };
  const Buffers& b = pass.buffers;
  // Upload on the default stream. A blocking call is not ordered with any stream, so the host
  // waits for the upload first; a stream-ordered call follows it on the stream.
  absl::Status s = absl::OkStatus();
  if (!im.send.empty()) s = device_.CopyAsync(b.send, im.send.data(), im.send.size(), nullptr);
  if (s.ok()) s = device_.CopyAsync(b.recv, im.recv.data(), im.recv.size(), nullptr);
  if (s.ok() && mode == Mode::kBlocking) s = device_.Synchronize(nullptr);
  if (!s.ok()) {
    fail(absl::StrCat("upload: ", s.ToString()));
    return false;
  }
  const baton_code_t code = Call(pass.comm, c, im, b, mode);
  if (code != BATON_OK) {
    fail(CallError("the call", code));
    baton_comm_abort(pass.comm, absl::StrCat("rank ", rank_, " failed a call").c_str());
    return false;
  }
  std::vector<uint8_t> got(im.expected.size());
  s = device_.CopyAsync(got.data(), b.recv, got.size(), nullptr);
  if (s.ok()) s = device_.Synchronize(nullptr);
  if (!s.ok()) {
    fail(absl::StrCat("read back: ", s.ToString()));
    return false;
  }
  if (mode == Mode::kStream) {
    const baton_code_t async = baton_comm_get_async_error(pass.comm);
    if (async != BATON_OK) {
      fail(CallError("baton_comm_get_async_error", async));
      return false;
    }
  }
  const TypeInfo& t = Info(c.type);
  const size_t recv_elements = Extent(c, world_, rank_).second;
  auto differs = [&](size_t i) {
    return (i < im.ignore_from || i >= im.ignore_to) && got[i] != im.expected[i];
  };
  size_t first = got.size();
  size_t differing = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!differs(i)) continue;
    if (first == got.size()) first = i;
    ++differing;
  }
  if (differing == 0) return true;
  const size_t element = first / t.size;
  if (element >= recv_elements) {
    fail(absl::StrCat("wrote byte ", first - recv_elements * t.size, " past the end of its ",
                      recv_elements, "-element receive buffer (", differing,
                      " bytes differ in all)"));
  } else {
    uint64_t want = 0;
    uint64_t have = 0;
    std::memcpy(&want, im.expected.data() + element * t.size, t.size);
    std::memcpy(&have, got.data() + element * t.size, t.size);
    fail(absl::StrCat("element ", element, " of ", recv_elements, ": expected ", Describe(t, want),
                      ", got ", Describe(t, have), " (", differing, " bytes differ in all)"));
  }
  return true;
}

// Every rank counts its arrival in shared memory before the barrier; once the barrier is done
// (for a stream-ordered one, once the stream has passed it), all of them must have arrived.
bool Rank::Barrier(Pass& pass, Mode mode, Tally& tally) {
  ++tally.checks[static_cast<int>(mode)];
  const int m = static_cast<int>(pass.memory);
  const uint64_t round = ++barriers_[m];
  // The last rank arrives late, so that a barrier that does not wait is seen.
  if (rank_ == world_ - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  shared_.arrived[m].fetch_add(1);
  const std::string where = absl::StrCat("rank ", rank_, " ", MemoryName(pass.memory), " ",
                                         ModeName(mode), " barrier ", round);
  const baton_code_t code = Call(pass.comm, Case{}, Images{}, Buffers{}, mode);
  if (code != BATON_OK) {
    Fail(tally, mode, absl::StrCat(where, ": ", CallError("baton_barrier", code)));
    baton_comm_abort(pass.comm, absl::StrCat("rank ", rank_, " failed a barrier").c_str());
    return false;
  }
  if (mode == Mode::kStream) {
    const absl::Status s = device_.Synchronize(nullptr);
    const baton_code_t async = baton_comm_get_async_error(pass.comm);
    if (!s.ok() || async != BATON_OK) {
      Fail(tally, mode,
           absl::StrCat(where, ": ", s.ok() ? CallError("async error", async) : s.ToString()));
      return false;
    }
  }
  const uint64_t arrived = shared_.arrived[m].load();
  const uint64_t before = (round - 1) * static_cast<uint64_t>(world_);
  if (arrived < round * static_cast<uint64_t>(world_)) {
    Fail(tally, mode,
         absl::StrCat(where, ": returned when ", arrived - before, " of ", world_,
                      " ranks had arrived"));
  }
  return true;
}

void Rank::Setup(Pass& pass, const std::string& comm_id, size_t capacity) {
  const char* kind = MemoryName(pass.memory);
  baton_code_t code =
      baton_client_join(client_, comm_id.c_str(), world_, rank_, 120000, &pass.comm);
  if (code != BATON_OK) {
    pass.comm = nullptr;
    Error(absl::StrCat(kind, ": ", CallError("baton_client_join", code)));
    return;
  }
  if (pass.memory == Memory::kVmm) {
    for (void*& buffer : pass.vmm) {
      code = baton_client_alloc_device(client_, capacity, 0, &buffer);
      if (code != BATON_OK) {
        buffer = nullptr;
        Error(absl::StrCat(kind, ": ", CallError("baton_client_alloc_device", code)));
        return;
      }
    }
    pass.buffers = {static_cast<uint8_t*>(pass.vmm[0]), static_cast<uint8_t*>(pass.vmm[1])};
  } else {
    // Both buffers in one allocation of the device layer, past its base; on the fake in three
    // segments, so that the buffers straddle segment boundaries.
    const size_t total = 2 * (kBufferOffset + capacity);
    absl::StatusOr<std::unique_ptr<device::Allocation>> allocation;
    if (device_name_ == "fake") {
      auto& fake = dynamic_cast<device::HostFakeDevice&>(device_);
      const size_t third = (total / 3 + 4095) / 4096 * 4096;
      allocation = fake.AllocateSegmented({third, third, total - 2 * third + 4096}, 0);
    } else {
      allocation = device_.Allocate(total, 0);
    }
    if (!allocation.ok()) {
      Error(absl::StrCat(kind, ": device allocation: ", allocation.status().ToString()));
      return;
    }
    pass.foreign = *std::move(allocation);
    auto* base = static_cast<uint8_t*>(pass.foreign->data());
    pass.buffers = {base + kBufferOffset, base + 2 * kBufferOffset + capacity};
  }
  pass.alive = true;
}

void Rank::Teardown(Pass& pass) {
  const char* kind = MemoryName(pass.memory);
  if (pass.comm != nullptr) {
    const baton_code_t code = baton_comm_destroy(pass.comm);
    pass.comm = nullptr;
    if (code != BATON_OK && pass.alive) {
      Error(absl::StrCat(kind, ": ", CallError("baton_comm_destroy", code)));
    }
  }
  for (void* buffer : pass.vmm) {
    if (buffer == nullptr) continue;
    const baton_code_t code = baton_client_free_device(client_, buffer);
    if (code != BATON_OK) {
      Error(absl::StrCat(kind, ": ", CallError("baton_client_free_device", code)));
    }
  }
  if (pass.foreign != nullptr) {
    // The daemon keeps its mapping until told: deregister before the memory is freed.
    const baton_code_t code = baton_client_deregister_device(client_, pass.buffers.send);
    if (code != BATON_OK) {
      Error(absl::StrCat(kind, ": ", CallError("baton_client_deregister_device", code)));
    }
    pass.foreign.reset();
  }
}

void Rank::Run(const std::vector<Case>& plan, const std::vector<std::string>& comm_ids) {
  size_t capacity = 0;
  for (const Case& c : plan) {
    const auto [send_elements, recv_elements] = Extent(c, world_, rank_);
    const size_t size = Info(c.type).size;
    capacity = std::max({capacity, send_elements * size, recv_elements * size + kGuardBytes});
  }
  capacity = (capacity + 4095) / 4096 * 4096;
  Pass passes[kMemories];
  for (int m = 0; m < kMemories; ++m) {
    passes[m].memory = static_cast<Memory>(m);
    Setup(passes[m], comm_ids[m], capacity);
  }
  for (const Case& c : plan) {
    if (!passes[0].alive && !passes[1].alive) break;
    const Images im = c.check == Check::kBarrier ? Images{} : MakeImages(c, world_, rank_);
    for (Pass& pass : passes) {
      for (Mode mode : {Mode::kBlocking, Mode::kStream}) {
        if (pass.alive && !RunCase(c, im, pass, mode)) {
          pass.alive = false;
          Error(absl::StrCat(MemoryName(pass.memory),
                             ": stopped this memory's cases after a failed call"));
        }
      }
    }
  }
  for (Pass& pass : passes) Teardown(pass);
}

void Rank::Write(std::FILE* out) const {
  for (const auto& [key, tally] : tallies_) {
    std::fprintf(out, "TALLY\t%d\t%d\t%llu\t%llu\t%llu\t%llu\n", key.first, key.second,
                 static_cast<unsigned long long>(tally.checks[0]),
                 static_cast<unsigned long long>(tally.checks[1]),
                 static_cast<unsigned long long>(tally.failures[0]),
                 static_cast<unsigned long long>(tally.failures[1]));
    for (const std::string& m : tally.messages) {
      std::fprintf(out, "MESSAGE\t%d\t%d\t%s\n", key.first, key.second, m.c_str());
    }
  }
  for (const std::string& e : errors_) std::fprintf(out, "ERROR\t%s\n", e.c_str());
  std::fprintf(out, "DONE\n");
}

// ---- The parent ----------------------------------------------------------------------------

struct Options {
  std::string device = "fake";
#ifdef BATOND_PATH
  std::string batond = BATOND_PATH;
#else
  std::string batond = "batond";
#endif
  std::vector<int> ranks = {2, 4};
  size_t large_bytes = size_t{1} << 20;
  int timeout_s = 300;  // per world size
  bool keep = false;
};

// The rank process: exits 0 when everything it checked passed.
int RankMain(const Options& o, const std::string& socket, int world, int rank,
             const std::vector<std::string>& ids, const std::string& report, SharedPage& shared) {
  setenv("BATON_DEVICE", o.device.c_str(), 1);
  std::FILE* out = std::fopen(report.c_str(), "w");
  if (out == nullptr) return 2;
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::OpenDevice(o.device);
  if (!device.ok() || *device == nullptr) {
    std::fprintf(out, "ERROR\trank %d: device %s: %s\nDONE\n", rank, o.device.c_str(),
                 device.ok() ? "none" : device.status().ToString().c_str());
    std::fclose(out);
    return 1;
  }
  baton_client_t* client = nullptr;
  const baton_code_t code = baton_client_connect(socket.c_str(), 10000, &client);
  if (code != BATON_OK) {
    std::fprintf(out, "ERROR\trank %d: baton_client_connect: %s: %s\nDONE\n", rank,
                 baton_code_name(code), baton_last_error());
    std::fclose(out);
    return 1;
  }
  Rank r(world, rank, **device, o.device, client, shared);
  r.Run(Plan(world, o.large_bytes), ids);
  baton_client_close(client);
  r.Write(out);
  std::fclose(out);
  return r.failed() ? 1 : 0;
}

struct Totals {
  int lines = 0, failed_lines = 0;
  uint64_t checks = 0;
};

// Runs one world size; prints its lines. False if anything failed.
bool RunWorld(const Options& o, const Daemon& daemon, const std::string& dir, int world,
              Totals& totals) {
  const Clock::time_point start = Clock::now();
  bool ok = true;
  absl::StatusOr<std::vector<std::string>> ids = MakeCommIds(daemon.socket(), kMemories);
  if (!ids.ok()) {
    std::printf("R=%d FAIL %s\n", world, ids.status().ToString().c_str());
    return false;
  }
  void* page =
      mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    std::printf("R=%d FAIL mmap: %s\n", world, std::strerror(errno));
    return false;
  }
  auto* shared = new (page) SharedPage{};
  std::vector<pid_t> pids;
  std::vector<std::string> reports;
  for (int rank = 0; rank < world; ++rank) {
    reports.push_back(absl::StrCat(dir, "/r", world, "-rank", rank, ".txt"));
    pids.push_back(ForkChild([&, rank] {
      return RankMain(o, daemon.socket(), world, rank, *ids, reports[rank], *shared);
    }));
  }
  const Clock::time_point deadline = start + std::chrono::seconds(o.timeout_s);
  std::vector<std::string> errors;
  for (int rank = 0; rank < world; ++rank) {
    const int rc = WaitChild(pids[rank], deadline);
    if (rc == -SIGKILL && Clock::now() > deadline) {
      errors.push_back(
          absl::StrCat("rank ", rank, " killed after the ", o.timeout_s, " s timeout (--timeout)"));
    } else if (rc < 0) {
      errors.push_back(absl::StrCat("rank ", rank, " died of signal ", -rc));
    }
  }
  munmap(page, sizeof(SharedPage));

  // Add up the ranks' tallies per (memory, check); what a rank did not report counts as missing.
  struct Line {
    uint64_t expected[2] = {0, 0}, checks[2] = {0, 0}, failures[2] = {0, 0};
    std::vector<std::string> messages;
  };
  std::map<std::pair<int, int>, Line> lines;
  const std::vector<Case> plan = Plan(world, o.large_bytes);
  for (int m = 0; m < kMemories; ++m) {
    for (const Case& c : plan) {
      Line& line = lines[{m, static_cast<int>(c.check)}];
      line.expected[0] += world;
      line.expected[1] += world;
    }
  }
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(reports[rank]);
    std::string row;
    bool done = false;
    while (std::getline(in, row)) {
      const std::vector<std::string> f = absl::StrSplit(row, absl::MaxSplits('\t', 6));
      int memory = 0, check = 0;
      if (f[0] == "TALLY" && f.size() == 7 && absl::SimpleAtoi(f[1], &memory) &&
          absl::SimpleAtoi(f[2], &check)) {
        Line& line = lines[{memory, check}];
        for (int k = 0; k < 2; ++k) {
          uint64_t checks = 0, failures = 0;
          if (absl::SimpleAtoi(f[3 + k], &checks)) line.checks[k] += checks;
          if (absl::SimpleAtoi(f[5 + k], &failures)) line.failures[k] += failures;
        }
      } else if (f[0] == "MESSAGE" && f.size() >= 4 && absl::SimpleAtoi(f[1], &memory) &&
                 absl::SimpleAtoi(f[2], &check)) {
        std::vector<std::string>& messages = lines[{memory, check}].messages;
        if (messages.size() < 2 * kMessagesPerLine) {
          messages.push_back(f[3]);
        }
      } else if (f[0] == "ERROR" && f.size() >= 2) {
        errors.push_back(row.substr(6));
      } else if (f[0] == "DONE") {
        done = true;
      }
    }
    if (!done) errors.push_back(absl::StrCat("rank ", rank, " wrote no complete report"));
  }
  for (const auto& [key, line] : lines) {
    const uint64_t checks = line.checks[0] + line.checks[1];
    const uint64_t failures = line.failures[0] + line.failures[1];
    const uint64_t missing = line.expected[0] + line.expected[1] - checks;
    const bool pass = failures == 0 && missing == 0;
    ok = ok && pass;
    ++totals.lines;
    totals.failed_lines += pass ? 0 : 1;
    totals.checks += checks;
    std::printf("R=%d %-7s %-25s %s  %llu checks (blocking %llu, stream %llu)", world,
                MemoryName(static_cast<Memory>(key.first)),
                CheckName(static_cast<Check>(key.second)), pass ? "PASS" : "FAIL",
                static_cast<unsigned long long>(checks),
                static_cast<unsigned long long>(line.checks[0]),
                static_cast<unsigned long long>(line.checks[1]));
    if (failures > 0) std::printf(", %llu failed", static_cast<unsigned long long>(failures));
    if (missing > 0) std::printf(", %llu not run", static_cast<unsigned long long>(missing));
    std::printf("\n");
    for (const std::string& m : line.messages) std::printf("    %s\n", m.c_str());
  }
  for (const std::string& e : errors) std::printf("R=%d ERROR %s\n", world, e.c_str());
  ok = ok && errors.empty();
  std::printf("R=%d: %s in %.1f s\n", world, ok ? "all passed" : "FAILED", Seconds(start));
  return ok;
}

int Usage(const std::string& error) {
  std::fprintf(stderr,
               "%s\nusage: device_collectives_check [--device=fake|cuda] [--batond=PATH]\n"
               "         [--ranks=2,4] [--large-bytes=1048576] [--timeout=SECONDS] [--keep]\n",
               error.c_str());
  return 2;
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
        if (!absl::SimpleAtoi(r, &n) || n < 1 || n > kMaxRanks) {
          return Usage(absl::StrCat("--ranks: each between 1 and ", kMaxRanks));
        }
        o.ranks.push_back(n);
      }
    } else if (name == "--large-bytes") {
      if (!absl::SimpleAtoi(value, &o.large_bytes) || o.large_bytes < 8) {
        return Usage("--large-bytes: a byte count of at least 8");
      }
    } else if (name == "--timeout") {
      if (!absl::SimpleAtoi(value, &o.timeout_s) || o.timeout_s < 1) {
        return Usage("--timeout: seconds");
      }
    } else if (arg == "--keep") {
      o.keep = true;
    } else {
      return Usage("unknown or bad flag: " + arg);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  const Clock::time_point start = Clock::now();
  std::printf("device_collectives_check: --device=%s --batond=%s --large-bytes=%zu\n",
              o.device.c_str(), o.batond.c_str(), o.large_bytes);
  const absl::StatusOr<std::string> probe = ProbeDevice(o.device);
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
  const absl::StatusOr<std::string> temp_dir = MakeTempDir("baton-devcheck-");
  if (!temp_dir.ok()) {
    std::printf("FAIL: %s\n", std::string(temp_dir.status().message()).c_str());
    return 2;
  }
  const std::string& dir = *temp_dir;
  bool ok = true;
  Totals totals;
  {
    Daemon daemon;
    if (const absl::Status started = daemon.Start({.batond = o.batond, .device = o.device}, dir);
        !started.ok()) {
      std::printf("FAIL: %s\n", started.ToString().c_str());
      return 2;
    }
    for (int world : o.ranks) ok = RunWorld(o, daemon, dir, world, totals) && ok;
  }
  std::printf("summary: %s: %d lines, %d failed, %llu checks, %.1f s\n", ok ? "PASS" : "FAIL",
              totals.lines, totals.failed_lines, static_cast<unsigned long long>(totals.checks),
              Seconds(start));
  if (ok && !o.keep) {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
  } else {
    std::printf("logs and rank reports: %s\n", dir.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace baton::device_check

int main(int argc, char** argv) { return baton::device_check::Main(argc, argv); }
