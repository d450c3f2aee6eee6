#include "collective/operation_runner.h"

#include <atomic>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "collective/doubling_all_reduce.h"
#include "collective/registry.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace baton::collective {
namespace {

// The tag step reserved for the signature exchange; algorithms number their steps from 0.
constexpr uint32_t kSignatureStep = 0xFFFFFFFFu;
// The first tag step of the measured times' exchange (a doubling all-reduce, a few steps), above
// every slab's steps (Schedule::SlabContext).
constexpr uint32_t kMeasurementStep = 0xFFFE0000u;

// `inner`, counting the bytes its copies moved (OpStats::staged_bytes).
class CountingDevice final : public device::OperationDevice {
 public:
  explicit CountingDevice(const device::OperationDevice& inner) : inner_(inner) {}

  const device::DeviceKernels& kernels() const override { return inner_.kernels(); }
  absl::Status Copy(void* dst, const void* src, size_t bytes) const override {
    absl::Status copied = inner_.Copy(dst, src, bytes);
    if (copied.ok()) copied_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return copied;
  }
  absl::StatusOr<device::PinnedBuffer> StagingMemory(size_t bytes) const override {
    return inner_.StagingMemory(bytes);
  }

  uint64_t copied_bytes() const { return copied_bytes_.load(std::memory_order_relaxed); }

 private:
  const device::OperationDevice& inner_;
  mutable std::atomic<uint64_t> copied_bytes_{0};
};

}  // namespace

// One operation's signature exchange with the check neighbours (see StartPeerCheck).
struct OperationRunner::PeerCheck {
  Signature own;
  Signature theirs;  // written by the transport
  // Set by the arrival callback (in the transport's thread): `disagreement` first, then
  // `arrived` (release), so that `arrived` (acquire) makes `disagreement` readable.
  absl::Status disagreement;
  std::atomic<bool> arrived{false};
  // Declared last, so destroyed first: its destructor waits for a delivery (and its arrival
  // callback, which uses every field above) still in progress in the transport's thread.
  std::unique_ptr<transport::PostedRecv> recv;
};

CheckNeighbours SignatureCheckNeighbours(int self, int size) {
  if (size < 4 || (size & (size - 1)) != 0) {
    return CheckNeighbours{(self + 1) % size, (self + size - 1) % size};
  }
  // The reflected Gray code g(i) = i ^ (i >> 1) visits every position, and consecutive codes
  // (the last and the first included) differ in one bit. i is the inverse of g at `self`.
  auto gray = [](int i) { return i ^ (i >> 1); };
  int i = self;
  for (int shift = 1; shift < 32; shift <<= 1) i ^= i >> shift;
  return CheckNeighbours{gray((i + 1) % size), gray((i + size - 1) % size)};
}

OperationRunner::OperationRunner(Layout layout, uint64_t comm, transport::Endpoint* endpoint,
                                 RunnerOptions options)
    : layout_(std::move(layout)),
      comm_(comm),
      endpoint_(endpoint),
      options_(std::move(options)),
      check_neighbours_(SignatureCheckNeighbours(layout_.self, layout_.daemon_count())),
      own_scratch_(options_.scratch != nullptr
                       ? nullptr
                       : std::make_unique<ScratchPool>(endpoint, kOwnScratchKeepBytes)),
      scratch_(options_.scratch != nullptr ? options_.scratch : own_scratch_.get()) {
  if (options_.learn_algorithms && !options_.measured_seed.empty()) {
    // Every daemon got the same seed, so all start from the same table or, if it is malformed,
    // all from an empty one.
    absl::MutexLock lock(&measured_mu_);
    if (absl::Status seeded = measured_.Merge(options_.measured_seed); !seeded.ok()) {
      spdlog::warn("communicator {:x}: ignoring the plan's measured times: {}", comm_,
                   seeded.ToString());
    }
  }
}

absl::StatusOr<std::string> OperationRunner::Run(uint64_t seq, std::span<const LocalPart> parts,
                                                 OpStats& stats, std::string& algorithm_name,
                                                 absl::Time deadline,
                                                 const device::OperationDevice* device) {
  deadline = std::min(deadline, absl::Now() + options_.op_timeout);
  const bool across = layout_.daemon_count() > 1;
  // Before anything that could end this operation early here, so that every daemon exchanges.
  if (options_.learn_algorithms && across && seq > 0 && seq % kMeasurementExchangeEvery == 0) {
    PhaseTimer timer(&stats.transport);
    BATON_RETURN_IF_ERROR(ExchangeMeasurements(seq, deadline));
  }
  const OpSpec& first = *parts.front().spec;
  const std::vector<int>& local = layout_.local_ranks();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!SameOperation(first, *parts[i].spec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks called different collectives as operation ", seq, ": rank ", local[0], " called ",
          first.Describe(), ", rank ", local[i], " called ", parts[i].spec->Describe()));
    }
  }
  if (!across) return RunOn(seq, parts, deadline, endpoint_, stats, algorithm_name, device);
  // The signature rides with the operation's first message to the next daemon when that comes
  // before the operation waits for anything; else it goes alone.
  PiggybackEndpoint piggyback(endpoint_);
  PeerCheck check;
  {
    PhaseTimer timer(&stats.transport);
    BATON_RETURN_IF_ERROR(StartPeerCheck(seq, deadline, first, piggyback, check));
  }
  absl::StatusOr<std::string> result =
      RunOn(seq, parts, deadline, &piggyback, stats, algorithm_name, device);
  PhaseTimer timer(&stats.transport);
  BATON_RETURN_IF_ERROR(FinishPeerCheck(seq, piggyback, check, result.status()));
  return result;
}

absl::StatusOr<std::string> OperationRunner::RunOn(uint64_t seq, std::span<const LocalPart> parts,
                                                   absl::Time deadline,
                                                   transport::Endpoint* endpoint, OpStats& stats,
                                                   std::string& algorithm_name,
                                                   const device::OperationDevice* device) {
  if (device == nullptr) {
    return RunSchedule(seq, parts, deadline, endpoint, stats, algorithm_name,
                       &device::HostKernels());
  }
  absl::StatusOr<std::string> result;
  const Collective collective = parts.front().spec->collective;
  // On the device itself when no byte leaves this daemon, or when every link moves device memory
  // (the transports say; GPUDirect) and the schedule needs no host memory of its own.
  const bool on_device = layout_.daemon_count() == 1
                             ? RunsOnDevice(collective)
                             : RunsOnDeviceAcrossDaemons(collective) && LinksMoveDevice(*endpoint);
  if (on_device) {
    result = RunSchedule(seq, parts, deadline, endpoint, stats, algorithm_name, &device->kernels());
  } else {
    bool ran = false;
    // Every copy between device and host memory goes through Copy, some of them on the staging
    // threads, which have stopped when RunStaged returns.
    CountingDevice counted(*device);
    absl::Status staged =
        RunStaged(parts, layout_, counted, endpoint, options_.chunk_bytes, deadline,
                  [&](std::span<const LocalPart> host_parts, transport::Endpoint* staging_endpoint,
                      const device::Kernels* kernels) {
                    ran = true;
                    result = RunSchedule(seq, host_parts, deadline, staging_endpoint, stats,
                                         algorithm_name, kernels);
                    return result.status();
                  });
    stats.staged_bytes += counted.copied_bytes();
    // A copy's failure (before or after the schedule) is the operation's.
    if (!staged.ok() && (!ran || result.ok())) {
      result = absl::Status(
          staged.code(),
          absl::StrCat("operation ", seq, " ", parts.front().spec->Describe(), " failed on node ",
                       node_name(), " staging device memory: ", staged.message()));
    }
  }
  // The kernels return nothing: a device error surfaces here.
  if (absl::Status kernels = device->kernels().last_error(); result.ok() && !kernels.ok()) {
    result = absl::Status(kernels.code(),
                          absl::StrCat("operation ", seq, " ", parts.front().spec->Describe(),
                                       " failed on node ", node_name(), ": ", kernels.message()));
  }
  return result;
}

bool OperationRunner::LinksMoveDevice(const transport::Endpoint& endpoint) const {
  for (int d = 0; d < layout_.daemon_count(); ++d) {
    if (d != layout_.self &&
        !endpoint.MovesDirectly(layout_.daemons[d].address, transport::MemoryKind::kDevice)) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::string> OperationRunner::RunSchedule(
    uint64_t seq, std::span<const LocalPart> parts, absl::Time deadline,
    transport::Endpoint* endpoint, OpStats& stats, std::string& algorithm_name,
    const device::Kernels* kernels) {
  const OpSpec& spec = *parts.front().spec;
  const bool across = layout_.daemon_count() > 1;
  // Sends and receives of the ranks' buffers and of the scratch name their registrations.
  RegionTable regions;
  for (const LocalPart& part : parts) {
    regions.Add(part.send_region);
    regions.Add(part.recv_region);
  }
  RegisteredEndpoint registered(endpoint, {&regions, scratch_, options_.staging_regions});
  TimingEndpoint timed(&registered, &stats);
  absl::Cleanup count_unregistered = [&] {
    stats.unregistered_bytes += registered.unregistered_bytes();
  };
  Schedule schedule;
  schedule.ctx.endpoint = &timed;
  schedule.ctx.scratch = scratch_;
  schedule.ctx.stats = &stats;
  schedule.ctx.comm = comm_;
  schedule.ctx.seq = seq;
  schedule.ctx.deadline = deadline;
  schedule.ctx.chunk_bytes = options_.chunk_bytes;
  schedule.ctx.kernels = kernels;
  schedule.layout = &layout_;
  schedule.spec = &spec;
  schedule.parts = parts;
  schedule.algorithm = ChooseAlgorithm(spec);
  const std::string name =
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      across ? std::string(AlgorithmName(schedule.algorithm)) : std::string("local");
  algorithm_name = name;
  const OpImplementation* implementation = FindImplementation(spec.collective, schedule.algorithm);
  absl::Status status;
  const absl::Time started = absl::Now();
  if (implementation == nullptr || implementation->run == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat(
        AlgorithmName(schedule.algorithm), " does not run ", CollectiveName(spec.collective),
        " as a collective; its algorithms: ", AlgorithmNamesOf(spec.collective)));
  } else {
    status = implementation->run(schedule);
  }
  if (!status.ok()) {
    return NamePeers(absl::Status(
        status.code(), absl::StrCat("operation ", seq, " ", spec.Describe(), " failed on node ",
                                    node_name(), ": ", status.message())));
  }
  if (across && spec.collective == Collective::kAllReduce) {
    absl::MutexLock lock(&measured_mu_);
    measured_.Add(spec.count * DataTypeSize(spec.type), schedule.algorithm, absl::Now() - started);
  }
  return name;
}

Algorithm OperationRunner::ChooseAlgorithm(const OpSpec& spec) {
  if (spec.algorithm) return *spec.algorithm;
  const size_t bytes = spec.count * DataTypeSize(spec.type);
  const std::vector<AlgorithmCost> costs = Predict(spec.collective, bytes);
  if (costs.empty()) {  // one daemon: the algorithm is only a name ("local" is reported)
    const std::vector<Algorithm> algorithms = AlgorithmsOf(spec.collective);
    return algorithms.empty() ? Algorithm::kRing : algorithms.front();
  }
  Algorithm chosen = costs.front().algorithm;
  if (options_.learn_algorithms && spec.collective == Collective::kAllReduce) {
    absl::MutexLock lock(&measured_mu_);
    chosen = measured_.Choose(bytes, costs);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("communicator {:x}: {} of {} bytes over {} daemons: {}; ran {}", comm_,
                  CollectiveName(spec.collective), bytes, layout_.daemon_count(),
                  ExplainCosts(costs), AlgorithmName(chosen));
  }
  return chosen;
}

absl::Status OperationRunner::ExchangeMeasurements(uint64_t seq, absl::Time deadline) {
  std::vector<int64_t> counters;
  {
    absl::MutexLock lock(&measured_mu_);
    counters = measured_.TakePending();
  }
  OpContext ctx;
  ctx.endpoint = endpoint_;
  ctx.comm = comm_;
  ctx.seq = seq;
  ctx.first_step = kMeasurementStep;
  ctx.deadline = deadline;
  ctx.chunk_bytes = options_.chunk_bytes;
  absl::Status status = DoublingAllReduce(ctx, layout_.DaemonParticipants(), counters.data(),
                                          counters.size(), DataType::kInt64, ReduceOp::kSum);
  std::vector<int64_t> agreed;
  if (status.ok()) {
    absl::MutexLock lock(&measured_mu_);
    status = measured_.Merge(counters);
    if (status.ok() && options_.on_measured) agreed = measured_.Agreed();
  }
  if (!agreed.empty()) options_.on_measured(std::move(agreed));
  if (!status.ok()) {
    return NamePeers(absl::Status(
        status.code(), absl::StrCat("exchanging measured times before operation ", seq,
                                    " failed on node ", node_name(), ": ", status.message())));
  }
  return absl::OkStatus();
}

std::vector<AlgorithmCost> OperationRunner::Predict(Collective collective, size_t bytes) const {
  if (layout_.daemon_count() < 2) return {};
  std::vector<AlgorithmCost> costs =
      PredictCosts(collective, layout_.daemon_count(), bytes, options_.chunk_bytes, options_.link);
  if (collective == Collective::kAllReduce && options_.learn_algorithms) {
    absl::MutexLock lock(&measured_mu_);
    for (AlgorithmCost& cost : costs) {
      cost.measured = measured_.Mean(bytes, cost.algorithm);
      cost.samples = measured_.Samples(bytes, cost.algorithm);
    }
  }
  return costs;
}

absl::Status OperationRunner::StartPeerCheck(uint64_t seq, absl::Time deadline, const OpSpec& mine,
                                             PiggybackEndpoint& piggyback, PeerCheck& check) const {
  // Each daemon tells the next one on the check's cycle (SignatureCheckNeighbours) what its ranks
  // called. If any two daemons disagree, some neighbouring pair does, and the daemon that sees it
  // fails the operation (and so aborts the communicator everywhere) with both sides described,
  // instead of reducing mismatched data or waiting for messages that never come. The operation
  // does not wait for the exchange: the signature's arrival is checked as it lands, and a
  // disagreement aborts this daemon's transport for the communicator at once, so the operation
  // stops wherever it waits.
  const LayoutDaemon& next = layout_.daemons[check_neighbours_.next];
  const LayoutDaemon& prev = layout_.daemons[check_neighbours_.prev];
  const transport::Tag tag{comm_, seq, kSignatureStep, 0};
  check.own = Signature::Of(mine);
  auto arrived = [this, seq, &mine, &prev, &check] {
    if (!(check.own == check.theirs)) {
      check.disagreement = absl::FailedPreconditionError(absl::StrCat(
          "ranks called different collectives as operation ", seq, ": ranks [",
          absl::StrJoin(prev.ranks, ", "), "] on node ", prev.name, " called ",
          check.theirs.AsSpec().Describe(), ", ranks [", absl::StrJoin(layout_.local_ranks(), ", "),
          "] on node ", node_name(), " called ", mine.Describe()));
      endpoint_->Abort(comm_, check.disagreement);
    }
    check.arrived.store(true, std::memory_order_release);
  };
  check.recv = endpoint_->PostRecv(
      prev.address, tag,
      transport::ByteSpan(reinterpret_cast<std::byte*>(&check.theirs), sizeof(check.theirs)),
      deadline, arrived);
  const absl::Status held = piggyback.Hold(
      next.address, tag,
      transport::ConstByteSpan(reinterpret_cast<const std::byte*>(&check.own), sizeof(check.own)),
      deadline);
  if (!held.ok()) return PeerCheckError(seq, held);
  return absl::OkStatus();
}

absl::Status OperationRunner::FinishPeerCheck(uint64_t seq, PiggybackEndpoint& piggyback,
                                              PeerCheck& check, const absl::Status& outcome) const {
  // The next daemon waits for this signature even when this daemon's operation failed.
  const absl::Status flushed = piggyback.Flush();
  if (!outcome.ok()) {
    // A disagreement explains the failure better than whatever it caused; otherwise the
    // operation's own error stands, without waiting for a signature that may never come.
    if (check.arrived.load(std::memory_order_acquire) && !check.disagreement.ok()) {
      return check.disagreement;
    }
    return outcome;
  }
  if (!flushed.ok()) return PeerCheckError(seq, flushed);
  const absl::Status received = check.recv->Wait();
  if (!received.ok()) return PeerCheckError(seq, received);
  return check.disagreement;
}

absl::Status OperationRunner::PeerCheckError(uint64_t seq, const absl::Status& status) const {
  return NamePeers(Annotate(status, absl::StrCat("operation ", seq, " on node ", node_name())));
}

absl::Status OperationRunner::NamePeers(const absl::Status& status) const {
  std::string message(status.message());
  for (const LayoutDaemon& daemon : layout_.daemons) {
    message = absl::StrReplaceAll(
        message, {{daemon.address, absl::StrCat(daemon.name, " (", daemon.address, ")")}});
  }
  return absl::Status(status.code(), message);
}

}  // namespace baton::collective
