// OperationRunner (collective/operation_runner.h) as the daemons use it, without daemons: one
// runner per daemon over the in-memory fabric, each running its local ranks' parts on a thread of
// its own. Covers the signature check between daemons and between local ranks, the measured-time
// exchange every kMeasurementExchangeEvery-th operation, device memory (the host fake's: on the
// device with one daemon, staged through host memory otherwise) and how failures name peers.

#include "collective/operation_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bitset>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/device_staging.h"
#include "collective/layout.h"
#include "collective/op_spec.h"
#include "collective/op_stats.h"
#include "collective/schedule.h"
#include "collective/tuner.h"
#include "device/device.h"
#include "device/host_fake.h"
#include "device/kernels.h"
#include "device/operation_device.h"
#include "tests/testing/registered_only_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

namespace baton::collective {
namespace {

constexpr uint64_t kComm = 0xc0ffee;

std::string Address(int daemon) { return absl::StrCat("mem-", daemon); }
std::string NodeName(int daemon) { return absl::StrCat("node-", daemon); }

// Every daemon's runner, daemon d hosting ranks [d * local, (d + 1) * local), each over its own
// endpoint on one fabric. `configure` may change a daemon's options (by default: 30 s per
// operation, 4 KiB chunks so that operations take several messages). With `links_move_device`
// every endpoint says it moves device memory itself (as a GPUDirect transport would; the fake
// device's memory is host memory the fabric can move).
class Daemons {
 public:
  Daemons(int count, int local, const std::function<void(int, RunnerOptions&)>& configure = {},
          bool links_move_device = false)
      : fabric_(transport::NewInMemoryFabric()) {
    Layout layout;
    layout.world_size = count * local;
    for (int d = 0; d < count; ++d) {
      LayoutDaemon daemon;
      daemon.address = Address(d);
      daemon.name = NodeName(d);
      for (int r = 0; r < local; ++r) daemon.ranks.push_back(d * local + r);
      layout.daemons.push_back(daemon);
      absl::StatusOr<std::unique_ptr<transport::Endpoint>> endpoint =
          fabric_->CreateEndpoint(Address(d));
      EXPECT_TRUE(endpoint.ok()) << endpoint.status();
      endpoints_.push_back(std::move(endpoint).value());
      if (links_move_device) {
        wrappers_.push_back(std::make_unique<test::RegisteredOnlyEndpoint>(endpoints_.back().get(),
                                                                           /*moves_device=*/true));
      }
    }
    for (int d = 0; d < count; ++d) {
      layout.self = d;
      RunnerOptions options;
      options.op_timeout = absl::Seconds(30);
      options.chunk_bytes = 4096;
      if (configure) configure(d, options);
      transport::Endpoint* endpoint = links_move_device ? wrappers_[d].get() : endpoints_[d].get();
      runners_.push_back(std::make_unique<OperationRunner>(layout, kComm, endpoint, options));
    }
  }
  // The runners first: an endpoint closed under a running one would look like a lost peer.
  ~Daemons() {
    runners_.clear();
    wrappers_.clear();
    endpoints_.clear();
  }

  int count() const { return static_cast<int>(runners_.size()); }
  OperationRunner& runner(int d) { return *runners_[static_cast<size_t>(d)]; }

  // What a daemon does when an operation fails (daemon/communicator.cc): it aborts the
  // communicator on every daemon with the failure, so that those still waiting fail with it.
  void AbortEverywhere(const absl::Status& reason) {
    for (const std::unique_ptr<transport::Endpoint>& endpoint : endpoints_) {
      endpoint->Abort(kComm, reason);
    }
  }

  // Runs `body(d)` on a thread per daemon at once; returns each one's result.
  std::vector<absl::StatusOr<std::string>> Run(
      const std::function<absl::StatusOr<std::string>(int)>& body) {
    std::vector<absl::StatusOr<std::string>> results(static_cast<size_t>(count()),
                                                     absl::UnknownError("did not run"));
    std::vector<std::thread> threads;
    for (int d = 0; d < count(); ++d) {
      threads.emplace_back([&, d] { results[static_cast<size_t>(d)] = body(d); });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }

 private:
  std::unique_ptr<transport::InMemoryFabric> fabric_;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints_;
  std::vector<std::unique_ptr<test::RegisteredOnlyEndpoint>> wrappers_;
  std::vector<std::unique_ptr<OperationRunner>> runners_;
};

OpSpec AllReduce(size_t count, DataType type = DataType::kFloat32) {
  OpSpec spec;
  spec.collective = Collective::kAllReduce;
  spec.type = type;
  spec.op = ReduceOp::kSum;
  spec.count = count;
  return spec;
}

// Rank r's input element i: small integers, so that float sums are exact in any order.
float Input(int rank, size_t i) {
  return static_cast<float>(rank * 100 + static_cast<int>(i % 13));
}

// One daemon's local ranks' buffers for `spec` in host memory (float32 inputs from Input; the
// bytes of other types are whatever those floats' bytes are), and the parts that point at them.
struct HostBuffers {
  HostBuffers(const OpSpec& spec, const Layout& layout) {
    const size_t element = DataTypeSize(spec.type);
    for (int rank : layout.local_ranks()) {
      const size_t send_bytes = spec.SendElements(layout.world_size, rank) * element;
      std::vector<std::byte> input(send_bytes);
      for (size_t i = 0; i < send_bytes / sizeof(float); ++i) {
        const float value = Input(rank, i);
        std::memcpy(input.data() + i * sizeof(float), &value, sizeof(float));
      }
      send.push_back(std::move(input));
      recv.emplace_back(spec.RecvElements(layout.world_size, rank) * element);
    }
    for (size_t i = 0; i < send.size(); ++i)
      parts.push_back({&spec, send[i].data(), recv[i].data()});
  }
  std::vector<std::vector<std::byte>> send;
  std::vector<std::vector<std::byte>> recv;
  std::vector<LocalPart> parts;
};

// What rank `rank` of `world` receives from an all_reduce or reduce_scatter (sum, float32) of
// `count` elements whose inputs come from Input.
std::vector<float> Expected(const OpSpec& spec, int world, int rank) {
  std::vector<float> expected(spec.count, 0);
  const size_t offset =
      spec.collective == Collective::kReduceScatter ? static_cast<size_t>(rank) * spec.count : 0;
  for (size_t i = 0; i < spec.count; ++i) {
    for (int r = 0; r < world; ++r) expected[i] += Input(r, offset + i);
  }
  return expected;
}

std::vector<float> AsFloats(const void* data, size_t count) {
  std::vector<float> values(count);
  if (count > 0) std::memcpy(values.data(), data, count * sizeof(float));
  return values;
}

absl::StatusOr<std::string> RunParts(OperationRunner& runner, uint64_t seq,
                                     std::span<const LocalPart> parts,
                                     absl::Time deadline = absl::InfiniteFuture(),
                                     const device::OperationDevice* device = nullptr) {
  OpStats stats;
  std::string algorithm;
  absl::StatusOr<std::string> ran = runner.Run(seq, parts, stats, algorithm, deadline, device);
  // The name set as soon as the algorithm was chosen is the one returned.
  if (ran.ok() && *ran != algorithm) {
    return absl::InternalError(absl::StrCat("returned ", *ran, " but named ", algorithm));
  }
  return ran;
}

// ---- The signature check's cycle (SignatureCheckNeighbours) ----

// Whatever the size, the signature check runs along one cycle through every daemon, so that any
// disagreement shows between some pair of neighbours.
TEST(SignatureCheckNeighboursTest, FormOneCycleThroughEveryDaemon) {
  for (int size = 2; size <= 70; ++size) {
    std::vector<bool> seen(size, false);
    int at = 0;
    for (int hop = 0; hop < size; ++hop) {
      ASSERT_FALSE(seen[at]) << "size " << size << ": daemon " << at << " visited twice";
      seen[at] = true;
      const CheckNeighbours here = SignatureCheckNeighbours(at, size);
      ASSERT_GE(here.next, 0);
      ASSERT_LT(here.next, size);
      EXPECT_EQ(SignatureCheckNeighbours(here.next, size).prev, at) << "size " << size;
      at = here.next;
    }
    EXPECT_EQ(at, 0) << "size " << size << ": the cycle does not close";
  }
}

// With a power-of-two number of daemons, neighbours are partners of the pairwise all-reduces
// (positions one bit apart); otherwise the ring order.
TEST(SignatureCheckNeighboursTest, PowersOfTwoFollowTheGrayCodeElseTheRing) {
  for (int size : {4, 8, 16, 64}) {
    for (int self = 0; self < size; ++self) {
      const CheckNeighbours n = SignatureCheckNeighbours(self, size);
      EXPECT_EQ(std::bitset<32>(static_cast<unsigned>(self ^ n.next)).count(), 1u)
          << "size " << size << ", daemon " << self << " -> " << n.next;
    }
  }
  const int gray8[] = {0, 1, 3, 2, 6, 7, 5, 4};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(SignatureCheckNeighbours(gray8[i], 8).next, gray8[(i + 1) % 8]);
  }
  for (int size : {2, 3, 5, 6, 12}) {
    for (int self = 0; self < size; ++self) {
      EXPECT_EQ(SignatureCheckNeighbours(self, size).next, (self + 1) % size);
      EXPECT_EQ(SignatureCheckNeighbours(self, size).prev, (self + size - 1) % size);
    }
  }
}

// ---- Operations on host memory ----

struct Shape {
  int daemons;
  int local;
};

class RunnerShapeTest : public ::testing::TestWithParam<Shape> {};

// The baseline the other cases build on: every daemon's ranks get the sum of the world's inputs,
// under the name of an algorithm between daemons, or "local" with one daemon.
TEST_P(RunnerShapeTest, AllReducesAcrossTheDaemons) {
  const Shape shape = GetParam();
  Daemons daemons(shape.daemons, shape.local);
  const int world = shape.daemons * shape.local;
  const OpSpec spec = AllReduce(3001);  // several chunks, an odd last one
  std::vector<std::unique_ptr<HostBuffers>> buffers;
  for (int d = 0; d < shape.daemons; ++d) {
    buffers.push_back(std::make_unique<HostBuffers>(spec, daemons.runner(d).layout()));
  }
  const auto results =
      daemons.Run([&](int d) { return RunParts(daemons.runner(d), 1, buffers[d]->parts); });
  for (int d = 0; d < shape.daemons; ++d) {
    ASSERT_TRUE(results[d].ok()) << "daemon " << d << ": " << results[d].status();
    if (shape.daemons == 1) {
      EXPECT_EQ(*results[d], "local");
    } else {
      EXPECT_TRUE(ParseAlgorithm(*results[d]).has_value()) << *results[d];
      EXPECT_EQ(*results[d], *results[0]) << "the daemons chose differently";
    }
    for (int l = 0; l < shape.local; ++l) {
      const int rank = d * shape.local + l;
      EXPECT_EQ(AsFloats(buffers[d]->recv[l].data(), spec.count), Expected(spec, world, rank))
          << "rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RunnerShapeTest,
                         ::testing::Values(Shape{1, 2}, Shape{2, 1}, Shape{2, 2}, Shape{3, 2},
                                           Shape{4, 1}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return absl::StrCat(info.param.daemons, "x", info.param.local);
                         });

// How daemon 1's call differs from daemon 0's all_reduce(float32, sum, count 1024).
enum class Difference { kCollective, kCount, kType };

class MismatchTest : public ::testing::TestWithParam<Difference> {};

// A daemon whose ranks called something else: its neighbours on the check's cycle see it, fail
// with FailedPrecondition naming both calls, and abort the communicator everywhere (as the daemon
// does with a failed operation), so every daemon fails with that reason; none waits for its
// deadline. The type case moves the same bytes on both sides, so only the check stops it from
// "succeeding".
TEST_P(MismatchTest, EveryDaemonFailsNamingBothCalls) {
  const OpSpec mine = AllReduce(1024);
  OpSpec theirs = mine;
  switch (GetParam()) {
    case Difference::kCollective:
      theirs.collective = Collective::kBroadcast;
      break;
    case Difference::kCount:
      theirs.count = 2048;
      break;
    case Difference::kType:
      theirs.type = DataType::kInt32;
      break;
  }
  constexpr int kDaemons = 3;
  constexpr int kOdd = 1;  // the daemon whose ranks called `theirs`
  Daemons daemons(kDaemons, 2);
  std::vector<std::unique_ptr<HostBuffers>> buffers;
  for (int d = 0; d < kDaemons; ++d) {
    buffers.push_back(
        std::make_unique<HostBuffers>(d == kOdd ? theirs : mine, daemons.runner(d).layout()));
  }
  // Far beyond the check: a daemon that waited for it would fail with DeadlineExceeded instead.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const auto results = daemons.Run([&](int d) {
    absl::StatusOr<std::string> ran = RunParts(daemons.runner(d), 1, buffers[d]->parts, deadline);
    if (!ran.ok()) daemons.AbortEverywhere(ran.status());
    return ran;
  });
  for (int d = 0; d < kDaemons; ++d) {
    ASSERT_FALSE(results[d].ok()) << "daemon " << d << " ran " << *results[d];
    const absl::Status& status = results[d].status();
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << "daemon " << d << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "ranks called different collectives"))
        << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(), absl::StrCat("ranks [2, 3] on node node-1 called ", theirs.Describe())))
        << status;
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("called ", mine.Describe())))
        << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Differences, MismatchTest,
                         ::testing::Values(Difference::kCollective, Difference::kCount,
                                           Difference::kType),
                         [](const ::testing::TestParamInfo<Difference>& info) {
                           switch (info.param) {
                             case Difference::kCollective:
                               return "Collective";
                             case Difference::kCount:
                               return "Count";
                             case Difference::kType:
                               return "Type";
                           }
                           return "Unknown";
                         });

// Local ranks of one daemon that called different operations: FailedPrecondition naming both
// ranks and both calls, before anything runs (their outputs stay as they were).
TEST(OperationRunnerTest, LocalRanksThatDifferFailBeforeRunning) {
  Daemons daemons(1, 2);
  const OpSpec mine = AllReduce(64);
  const OpSpec theirs = AllReduce(64, DataType::kInt32);
  HostBuffers buffers(mine, daemons.runner(0).layout());
  std::vector<LocalPart> parts = buffers.parts;
  parts[1].spec = &theirs;
  const absl::StatusOr<std::string> ran = RunParts(daemons.runner(0), 1, parts);
  ASSERT_FALSE(ran.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(ran.status())) << ran.status();
  EXPECT_TRUE(absl::StrContains(
      ran.status().message(),
      absl::StrCat("rank 0 called ", mine.Describe(), ", rank 1 called ", theirs.Describe())))
      << ran.status();
  EXPECT_EQ(AsFloats(buffers.recv[0].data(), mine.count), std::vector<float>(mine.count, 0));
}

// ---- The measured times ----

// The sums of every daemon's all_reduce times and their counts, as on_measured gets them (sums,
// then counts): the number of measurements in the table.
int64_t Measurements(const std::vector<int64_t>& table) {
  const size_t cells = table.size() / 2;
  return std::accumulate(table.begin() + static_cast<ptrdiff_t>(cells), table.end(), int64_t{0});
}

// Before operation 64 the daemons sum the all_reduce times each measured since the start
// (operations 1 to 63) and every daemon's callback gets the same table, with every daemon's
// measurements in it; the tuner's predictions then count them. Operation 65 runs no exchange.
TEST(OperationRunnerTest, DaemonsExchangeMeasuredTimesEvery64thOperation) {
  constexpr int kDaemons = 3;
  constexpr uint64_t kOperations = 65;
  std::vector<std::vector<std::vector<int64_t>>> told(kDaemons);  // by daemon, by exchange
  std::vector<std::vector<uint64_t>> told_at(kDaemons);           // the operation in progress
  std::vector<std::atomic<uint64_t>> running(kDaemons);
  Daemons daemons(kDaemons, 1, [&](int d, RunnerOptions& options) {
    options.on_measured = [&, d](std::vector<int64_t> table) {
      told[d].push_back(std::move(table));
      told_at[d].push_back(running[d].load());
    };
  });
  const OpSpec spec = AllReduce(256);
  std::vector<std::unique_ptr<HostBuffers>> buffers;
  for (int d = 0; d < kDaemons; ++d) {
    buffers.push_back(std::make_unique<HostBuffers>(spec, daemons.runner(d).layout()));
  }
  const auto results = daemons.Run([&](int d) -> absl::StatusOr<std::string> {
    for (uint64_t seq = 1; seq <= kOperations; ++seq) {
      running[d] = seq;
      absl::StatusOr<std::string> ran = RunParts(daemons.runner(d), seq, buffers[d]->parts);
      if (!ran.ok()) return ran;
    }
    return "done";
  });
  for (int d = 0; d < kDaemons; ++d) {
    ASSERT_TRUE(results[d].ok()) << "daemon " << d << ": " << results[d].status();
    ASSERT_EQ(told[d].size(), 1u) << "daemon " << d << " exchanged " << told[d].size() << " times";
    EXPECT_EQ(told_at[d][0], 64u);
    EXPECT_EQ(told[d][0], told[0][0]) << "daemon " << d << " agreed on another table";
    EXPECT_EQ(Measurements(told[d][0]), kDaemons * 63) << "daemon " << d;
    EXPECT_EQ(AsFloats(buffers[d]->recv[0].data(), spec.count), Expected(spec, kDaemons, d));
  }
  const std::vector<AlgorithmCost> costs =
      daemons.runner(0).Predict(Collective::kAllReduce, spec.count * sizeof(float));
  int64_t samples = 0;
  for (const AlgorithmCost& cost : costs) samples += cost.samples;
  EXPECT_EQ(samples, kDaemons * 63) << "the table the choices read";
}

// Without learn_algorithms nothing is exchanged (and nothing told) however many operations run.
TEST(OperationRunnerTest, NoExchangeWithoutLearning) {
  constexpr int kDaemons = 2;
  std::vector<int> told(kDaemons, 0);
  Daemons daemons(kDaemons, 1, [&](int d, RunnerOptions& options) {
    options.learn_algorithms = false;
    options.on_measured = [&, d](const std::vector<int64_t>&) { ++told[d]; };
  });
  const OpSpec spec = AllReduce(16);
  std::vector<std::unique_ptr<HostBuffers>> buffers;
  for (int d = 0; d < kDaemons; ++d) {
    buffers.push_back(std::make_unique<HostBuffers>(spec, daemons.runner(d).layout()));
  }
  const auto results = daemons.Run([&](int d) -> absl::StatusOr<std::string> {
    for (uint64_t seq = 1; seq <= 65; ++seq) {
      absl::StatusOr<std::string> ran = RunParts(daemons.runner(d), seq, buffers[d]->parts);
      if (!ran.ok()) return ran;
    }
    return "done";
  });
  for (int d = 0; d < kDaemons; ++d) {
    ASSERT_TRUE(results[d].ok()) << results[d].status();
    EXPECT_EQ(told[d], 0) << "daemon " << d;
  }
}

// ---- Device memory (the host fake's) ----

// Forwards to the device's kernels and counts the reductions; its error can be forced.
class CountingKernels final : public device::DeviceKernels {
 public:
  explicit CountingKernels(const device::DeviceKernels& inner) : inner_(inner) {}

  transport::MemoryKind memory() const override { return inner_.memory(); }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override {
    ++reductions_;
    inner_.ReduceInto(type, op, dst, src, count);
  }
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override {
    ++reductions_;
    inner_.ReduceMany(type, op, dst, srcs, count);
  }
  void Divide(DataType type, void* data, size_t count, int divisor) const override {
    inner_.Divide(type, data, count, divisor);
  }
  void Copy(void* dst, const void* src, size_t bytes) const override {
    inner_.Copy(dst, src, bytes);
  }
  void Zero(void* dst, size_t bytes) const override { inner_.Zero(dst, bytes); }
  absl::Status last_error() const override {
    if (!error_.ok()) return error_;
    return inner_.last_error();
  }

  int reductions() const { return reductions_.load(); }
  void Fail(absl::Status error) { error_ = std::move(error); }

 private:
  const device::DeviceKernels& inner_;
  mutable std::atomic<int> reductions_{0};
  absl::Status error_;
};

// A daemon's view of the fake device, built as batond's (device::OperationDevices): the device's
// kernels (counted), its copies (counted; they stage host <-> device), staging memory from the
// heap; the kernels' and the copies' errors can be forced.
class FakeOperationDevice final : public device::OperationDevice {
 public:
  explicit FakeOperationDevice(device::HostFakeDevice& device) : device_(device) {
    absl::StatusOr<std::unique_ptr<device::DeviceKernels>> kernels = device.NewKernels(0);
    EXPECT_TRUE(kernels.ok()) << kernels.status();
    kernels_ = std::move(kernels).value();
    counting_ = std::make_unique<CountingKernels>(*kernels_);
  }

  const device::DeviceKernels& kernels() const override { return *counting_; }
  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    if (!copy_error_.ok()) return copy_error_;
    ++copies_;
    if (absl::Status status = device_.CopyAsync(dst, src, bytes, nullptr); !status.ok()) {
      return status;
    }
    return device_.Synchronize(nullptr);
  }
  absl::StatusOr<device::PinnedBuffer> StagingMemory(size_t bytes) const override {
    return device::PinnedBuffer(new std::byte[bytes], [](std::byte* data) { delete[] data; });
  }

  const device::OperationDevice* access() const { return this; }
  int copies() const { return copies_.load(); }
  int reductions() const { return counting_->reductions(); }
  void FailKernels(absl::Status error) { counting_->Fail(std::move(error)); }
  void FailCopies(absl::Status error) { copy_error_ = std::move(error); }

 private:
  device::HostFakeDevice& device_;
  std::unique_ptr<device::DeviceKernels> kernels_;
  std::unique_ptr<CountingKernels> counting_;
  mutable std::atomic<int> copies_{0};
  absl::Status copy_error_;
};

// One daemon's local ranks' buffers for `spec` in the fake's device memory, inputs from Input.
class DeviceBuffers {
 public:
  DeviceBuffers(device::HostFakeDevice& device, const OpSpec& spec, const Layout& layout)
      : spec_(spec) {
    for (int rank : layout.local_ranks()) {
      const size_t send_count = spec.SendElements(layout.world_size, rank);
      std::vector<float> input(send_count);
      for (size_t i = 0; i < send_count; ++i) input[i] = Input(rank, i);
      send_.push_back(Allocate(device, send_count * sizeof(float)));
      EXPECT_TRUE(device.IsDeviceMemory(send_.back()->data(), send_count * sizeof(float)));
      EXPECT_TRUE(
          device
              .CopyAsync(send_.back()->data(), input.data(), input.size() * sizeof(float), nullptr)
              .ok());
      EXPECT_TRUE(device.Synchronize(nullptr).ok());  // before `input` goes
      recv_.push_back(Allocate(device, spec.RecvElements(layout.world_size, rank) * sizeof(float)));
    }
    for (size_t i = 0; i < send_.size(); ++i) {
      parts_.push_back({&spec_, static_cast<const std::byte*>(send_[i]->data()),
                        static_cast<std::byte*>(recv_[i]->data())});
    }
  }

  std::span<const LocalPart> parts() const { return parts_; }
  // Local rank `local`'s output, copied from the device.
  std::vector<float> Output(device::HostFakeDevice& device, size_t local, size_t count) const {
    std::vector<float> values(count);
    EXPECT_TRUE(
        device.CopyAsync(values.data(), recv_[local]->data(), count * sizeof(float), nullptr).ok());
    EXPECT_TRUE(device.Synchronize(nullptr).ok());
    return values;
  }

 private:
  static std::unique_ptr<device::Allocation> Allocate(device::HostFakeDevice& device,
                                                      size_t bytes) {
    absl::StatusOr<std::unique_ptr<device::Allocation>> allocation =
        device.Allocate(std::max<size_t>(bytes, 1), 0);
    EXPECT_TRUE(allocation.ok()) << allocation.status();
    return std::move(allocation).value();
  }

  const OpSpec& spec_;
  std::vector<std::unique_ptr<device::Allocation>> send_;
  std::vector<std::unique_ptr<device::Allocation>> recv_;
  std::vector<LocalPart> parts_;
};

// All ranks on one daemon: the all_reduce runs on the device, its reduction in the device's
// kernels, with no copy between host and device.
TEST(OperationRunnerDeviceTest, OneDaemonRunsOnTheDevice) {
  std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
  FakeOperationDevice access(*fake);
  Daemons daemons(1, 3);
  const OpSpec spec = AllReduce(2000);
  DeviceBuffers buffers(*fake, spec, daemons.runner(0).layout());
  const absl::StatusOr<std::string> ran =
      RunParts(daemons.runner(0), 1, buffers.parts(), absl::InfiniteFuture(), access.access());
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(*ran, "local");
  EXPECT_EQ(access.copies(), 0) << "staged through the host";
  EXPECT_GT(access.reductions(), 0) << "not reduced by the device's kernels";
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(buffers.Output(*fake, l, spec.count), Expected(spec, 3, static_cast<int>(l)))
        << "local rank " << l;
  }
}

// A collective whose schedule needs memory of its own (reduce_scatter) is staged through host
// memory even with one daemon.
TEST(OperationRunnerDeviceTest, OneDaemonStagesWhatCannotRunOnTheDevice) {
  ASSERT_FALSE(RunsOnDevice(Collective::kReduceScatter));
  std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
  FakeOperationDevice access(*fake);
  Daemons daemons(1, 2);
  OpSpec spec = AllReduce(500);
  spec.collective = Collective::kReduceScatter;
  DeviceBuffers buffers(*fake, spec, daemons.runner(0).layout());
  const absl::StatusOr<std::string> ran =
      RunParts(daemons.runner(0), 1, buffers.parts(), absl::InfiniteFuture(), access.access());
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_GT(access.copies(), 0) << "not staged";
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(buffers.Output(*fake, l, spec.count), Expected(spec, 2, static_cast<int>(l)))
        << "local rank " << l;
  }
}

// Across daemons the network moves host memory: each daemon reduces its ranks' inputs on the
// device, stages the node's buffer through host memory, and every rank gets the world's sum.
TEST(OperationRunnerDeviceTest, AcrossDaemonsStagesThroughHostMemory) {
  constexpr int kDaemons = 2;
  constexpr int kLocal = 2;
  std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
  const OpSpec spec = AllReduce(5000);  // more than one 4 KiB chunk: copies overlap the schedule
  std::vector<std::unique_ptr<FakeOperationDevice>> access;
  std::vector<std::unique_ptr<DeviceBuffers>> buffers;
  Daemons daemons(kDaemons, kLocal);
  for (int d = 0; d < kDaemons; ++d) {
    access.push_back(std::make_unique<FakeOperationDevice>(*fake));
    buffers.push_back(std::make_unique<DeviceBuffers>(*fake, spec, daemons.runner(d).layout()));
  }
  const auto results = daemons.Run([&](int d) {
    return RunParts(daemons.runner(d), 1, buffers[d]->parts(), absl::InfiniteFuture(),
                    access[d]->access());
  });
  for (int d = 0; d < kDaemons; ++d) {
    ASSERT_TRUE(results[d].ok()) << "daemon " << d << ": " << results[d].status();
    EXPECT_NE(*results[d], "local");
    EXPECT_GT(access[d]->copies(), 0) << "daemon " << d << " did not stage";
    EXPECT_GT(access[d]->reductions(), 0) << "daemon " << d << " did not reduce on the device";
    for (int l = 0; l < kLocal; ++l) {
      const int rank = d * kLocal + l;
      EXPECT_EQ(buffers[d]->Output(*fake, static_cast<size_t>(l), spec.count),
                Expected(spec, kDaemons * kLocal, rank))
          << "rank " << rank;
    }
  }
}

// Whether device memory crossing daemons is staged is the transports' answer, not collective/'s:
// where every link moves device memory itself (GPUDirect), an all_gather runs on the device
// memory directly, with no copy through host memory; over links that move host memory only, the
// same operation is staged.
TEST(OperationRunnerDeviceTest, LinksThatMoveDeviceMemoryAreNotStaged) {
  constexpr int kDaemons = 2;
  constexpr int kLocal = 2;
  constexpr int kWorld = kDaemons * kLocal;
  OpSpec spec;
  spec.collective = Collective::kAllGather;
  spec.type = DataType::kFloat32;
  spec.count = 3000;  // per rank; several 4 KiB chunks
  for (const bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "links move device memory" : "links move host memory");
    std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
    std::vector<std::unique_ptr<FakeOperationDevice>> access;
    std::vector<std::unique_ptr<DeviceBuffers>> buffers;
    Daemons daemons(kDaemons, kLocal, {}, /*links_move_device=*/direct);
    for (int d = 0; d < kDaemons; ++d) {
      access.push_back(std::make_unique<FakeOperationDevice>(*fake));
      buffers.push_back(std::make_unique<DeviceBuffers>(*fake, spec, daemons.runner(d).layout()));
    }
    const auto results = daemons.Run([&](int d) {
      return RunParts(daemons.runner(d), 1, buffers[d]->parts(), absl::InfiniteFuture(),
                      access[d]->access());
    });
    for (int d = 0; d < kDaemons; ++d) {
      ASSERT_TRUE(results[d].ok()) << "daemon " << d << ": " << results[d].status();
      if (direct) {
        EXPECT_EQ(access[d]->copies(), 0) << "daemon " << d << " staged";
      } else {
        EXPECT_GT(access[d]->copies(), 0) << "daemon " << d << " did not stage";
      }
      for (int l = 0; l < kLocal; ++l) {
        const std::vector<float> output =
            buffers[d]->Output(*fake, static_cast<size_t>(l), spec.count * kWorld);
        for (int r = 0; r < kWorld; ++r) {
          for (size_t i = 0; i < spec.count; i += 499) {
            ASSERT_EQ(output[static_cast<size_t>(r) * spec.count + i], Input(r, i))
                << "daemon " << d << " local rank " << l << ", block " << r << ", element " << i;
          }
        }
      }
    }
  }
}

// The device's kernels return nothing: an error they kept fails the operation, naming the node.
TEST(OperationRunnerDeviceTest, AKernelErrorFailsTheOperation) {
  std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
  FakeOperationDevice access(*fake);
  access.FailKernels(absl::InternalError("the device fell off the bus"));
  Daemons daemons(1, 2);
  const OpSpec spec = AllReduce(100);
  DeviceBuffers buffers(*fake, spec, daemons.runner(0).layout());
  const absl::StatusOr<std::string> ran =
      RunParts(daemons.runner(0), 7, buffers.parts(), absl::InfiniteFuture(), access.access());
  ASSERT_FALSE(ran.ok());
  EXPECT_TRUE(absl::IsInternal(ran.status())) << ran.status();
  EXPECT_TRUE(absl::StrContains(
      ran.status().message(),
      absl::StrCat("operation 7 ", spec.Describe(), " failed on node node-0: the device fell off")))
      << ran.status();
}

// A staging copy that fails fails the operation with the copy's code, saying it was staging.
TEST(OperationRunnerDeviceTest, AFailedStagingCopyFailsTheOperation) {
  std::unique_ptr<device::HostFakeDevice> fake = device::NewHostFakeDevice();
  FakeOperationDevice access(*fake);
  access.FailCopies(absl::UnavailableError("the copy engine is gone"));
  Daemons daemons(1, 2);
  OpSpec spec = AllReduce(100);
  spec.collective = Collective::kReduceScatter;  // staged on one daemon
  DeviceBuffers buffers(*fake, spec, daemons.runner(0).layout());
  const absl::StatusOr<std::string> ran =
      RunParts(daemons.runner(0), 1, buffers.parts(), absl::InfiniteFuture(), access.access());
  ASSERT_FALSE(ran.ok());
  EXPECT_TRUE(absl::IsUnavailable(ran.status())) << ran.status();
  EXPECT_TRUE(absl::StrContains(ran.status().message(),
                                "failed on node node-0 staging device "
                                "memory: the copy engine is gone"))
      << ran.status();
}

// ---- Failures that name peers ----

// A daemon whose ranks never call the operation: the others fail at their deadline (or the
// runner's op_timeout, whichever is first), and the error names the peer they waited for by
// node name and address (NamePeers), not by address alone.
TEST(OperationRunnerTest, AMissingDaemonIsNamedByNodeAtTheDeadline) {
  for (const bool by_timeout : {false, true}) {
    SCOPED_TRACE(by_timeout ? "op_timeout" : "the call's deadline");
    Daemons daemons(2, 1, [&](int, RunnerOptions& options) {
      if (by_timeout) options.op_timeout = absl::Milliseconds(300);
    });
    const OpSpec spec = AllReduce(64);
    HostBuffers buffers(spec, daemons.runner(0).layout());
    const absl::Time deadline =
        by_timeout ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(300);
    // Daemon 1 never runs its part.
    const absl::StatusOr<std::string> ran = RunParts(daemons.runner(0), 1, buffers.parts, deadline);
    ASSERT_FALSE(ran.ok());
    EXPECT_TRUE(absl::IsDeadlineExceeded(ran.status())) << ran.status();
    EXPECT_TRUE(absl::StrContains(ran.status().message(), "node node-0")) << ran.status();
    EXPECT_TRUE(absl::StrContains(ran.status().message(), "node-1 (mem-1)")) << ran.status();
  }
}

}  // namespace
}  // namespace baton::collective
