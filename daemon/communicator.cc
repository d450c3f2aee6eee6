#include "daemon/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "collective/direct_all_to_all.h"
#include "collective/dissemination_barrier.h"
#include "collective/doubling_all_reduce.h"
#include "collective/halving_doubling_all_reduce.h"
#include "collective/reduce.h"
#include "collective/ring_all_gather.h"
#include "collective/ring_all_reduce.h"
#include "collective/ring_broadcast.h"
#include "collective/ring_reduce.h"
#include "collective/ring_reduce_scatter.h"
#include "collective/tree_all_reduce.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"
#include "topology/planner.h"

namespace baton::daemon {

namespace {

using collective::Algorithm;
using collective::Collective;

std::string Describe(const OpRequest& r) {
  std::string text =
      absl::StrCat(collective::CollectiveName(r.kind), "(", collective::DataTypeName(r.type), ", ",
                   collective::ReduceOpName(r.op), ", count ", r.count);
  if (r.kind == Collective::kBroadcast || r.kind == Collective::kReduce) {
    absl::StrAppend(&text, ", root ", r.root);
  }
  if (r.algorithm) absl::StrAppend(&text, ", ", collective::AlgorithmName(*r.algorithm));
  return text + ")";
}

bool SameOperation(const OpRequest& a, const OpRequest& b) {
  return a.kind == b.kind && a.type == b.type && a.op == b.op && a.count == b.count &&
         a.root == b.root && a.algorithm == b.algorithm;
}

// What every daemon must agree on for one operation, as sent to the next daemon on the ring.
struct Signature {
  uint32_t kind = 0;
  uint32_t type = 0;
  uint32_t op = 0;
  int32_t root = 0;
  uint64_t count = 0;
  uint32_t algorithm = 0;  // 0: the daemons' choice; else 1 + the requested Algorithm
  uint32_t reserved = 0;

  static Signature Of(const OpRequest& r) {
    Signature s;
    s.kind = static_cast<uint32_t>(r.kind);
    s.type = static_cast<uint32_t>(r.type);
    s.op = static_cast<uint32_t>(r.op);
    s.root = r.root;
    s.count = r.count;
    s.algorithm = r.algorithm ? 1 + static_cast<uint32_t>(*r.algorithm) : 0;
    return s;
  }
  bool operator==(const Signature&) const = default;
  OpRequest AsRequest() const {
    OpRequest r;
    r.kind = static_cast<Collective>(kind);
    r.type = static_cast<collective::DataType>(type);
    r.op = static_cast<collective::ReduceOp>(op);
    r.root = root;
    r.count = count;
    if (algorithm > 0) r.algorithm = static_cast<Algorithm>(algorithm - 1);
    return r;
  }
};
static_assert(sizeof(Signature) == 32);

// Whether `bytes` at `a` and `bytes` at `b` share no byte.
bool Apart(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x + bytes <= y || y + bytes <= x;
}

// The tag step reserved for the signature exchange; algorithms number their steps from 0.
constexpr uint32_t kSignatureStep = 0xFFFFFFFFu;
// The first tag step of the measured times' exchange (a doubling all-reduce, a few steps), above
// every slab's steps (SlabContext).
constexpr uint32_t kMeasurementStep = 0xFFFE0000u;

}  // namespace

// One operation's signature exchange with the ring neighbours, which runs alongside the
// operation (see StartPeerCheck).
struct Communicator::PeerCheck {
  Signature own;
  Signature theirs;  // written by the transport
  std::unique_ptr<transport::PostedRecv> recv;
  // Set by the arrival callback (in the transport's thread): `disagreement` first, then
  // `arrived` (release), so that `arrived` (acquire) makes `disagreement` readable.
  absl::Status disagreement;
  std::atomic<bool> arrived{false};
};

Communicator::Communicator(Plan plan, int self, transport::Endpoint* endpoint,
                           CommunicatorOptions options, AbortNotifier notify_abort)
    : plan_(std::move(plan)),
      self_(self),
      endpoint_(endpoint),
      options_(options),
      notify_abort_(std::move(notify_abort)),
      local_ranks_(plan_.daemons[self].ranks),
      check_neighbours_(SignatureCheckNeighbours(self, static_cast<int>(plan_.daemons.size()))) {
  // The planner's double binary tree over the daemons in ring order: subtrees are contiguous
  // stretches of the ring (rack-local when the ring is), and no daemon is interior in both trees.
  const topology::DoubleBinaryTree trees =
      topology::BuildDoubleBinaryTree(static_cast<int>(plan_.daemons.size()));
  for (int t = 0; t < 2; ++t) {
    tree_links_[t] =
        collective::TreeNode{trees.trees[t][self].parent, trees.trees[t][self].children};
  }
  if (options_.learn_algorithms && !plan_.measured_seed.empty()) {
    // Every daemon got the same seed in the plan, so all start from the same table or, if it is
    // malformed, all from an empty one.
    absl::MutexLock lock(&measured_mu_);
    if (absl::Status seeded = measured_.Merge(plan_.measured_seed); !seeded.ok()) {
      spdlog::warn("communicator {:x}: ignoring the plan's measured times: {}", plan_.comm_tag,
                   seeded.ToString());
    }
  }
  sessions_.resize(local_ranks_.size());
  next_seq_.resize(local_ranks_.size(), 0);
  executor_ = std::thread([this] {
    SetThreadName("baton-executor");
    RunExecutor();
  });
}

Communicator::~Communicator() {
  Abort(absl::CancelledError("communicator destroyed"), /*notify_peers=*/false);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  executor_.join();
}

int Communicator::LocalIndex(int rank) const {
  auto it = std::lower_bound(local_ranks_.begin(), local_ranks_.end(), rank);
  if (it == local_ranks_.end() || *it != rank) return -1;
  return static_cast<int>(it - local_ranks_.begin());
}

absl::Status Communicator::AttachRank(int rank, uint64_t session_id) {
  const int index = LocalIndex(rank);
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not hosted by this daemon in the communicator's plan"));
  }
  absl::MutexLock lock(&mu_);
  if (sessions_[index].has_value()) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " is already attached"));
  }
  sessions_[index] = session_id;
  return absl::OkStatus();
}

bool Communicator::DetachRank(int rank) {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  if (index >= 0) sessions_[index].reset();
  return std::none_of(sessions_.begin(), sessions_.end(),
                      [](const auto& s) { return s.has_value(); });
}

std::vector<int> Communicator::DetachSession(uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  std::vector<int> detached;
  for (size_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i] == session_id) {
      sessions_[i].reset();
      detached.push_back(local_ranks_[i]);
    }
  }
  return detached;
}

bool Communicator::Empty() const {
  absl::MutexLock lock(&mu_);
  return std::none_of(sessions_.begin(), sessions_.end(),
                      [](const auto& s) { return s.has_value(); });
}

absl::Status Communicator::CheckAttached(int rank, uint64_t session_id) const {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  return CheckAttachedLocked(index, rank, session_id);
}

absl::Status Communicator::CheckAttachedLocked(int index, int rank, uint64_t session_id) const {
  if (index >= 0 && sessions_[index] == session_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("rank ", rank, " of communicator ",
                                                  absl::Hex(plan_.comm_tag),
                                                  " is not attached by this session"));
}

absl::StatusOr<std::string> Communicator::Submit(int rank, uint64_t session_id, OpRequest request,
                                                 absl::Time deadline) {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  BATON_RETURN_IF_ERROR(CheckAttachedLocked(index, rank, session_id));
  if (!aborted_.ok()) return aborted_;
  const uint64_t seq = next_seq_[index]++;
  Slot& slot = slots_[seq];
  if (slot.parts.empty()) slot.parts.resize(local_ranks_.size());
  slot.parts[index] = std::move(request);
  ++slot.arrived;
  // The last local rank to arrive runs the operation itself when nothing is ahead of it: handing
  // it to the executor thread would cost two thread wake-ups, which dominate small operations.
  if (seq == next_to_run_ && NextIsReady()) RunNext();

  auto finished = [this, &slot]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return slot.done || !aborted_.ok(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
    std::vector<int> missing;
    for (size_t i = 0; i < slot.parts.size(); ++i) {
      if (!slot.parts[i].has_value()) missing.push_back(local_ranks_[i]);
    }
    const absl::Status timeout = absl::DeadlineExceededError(
        absl::StrCat("operation ", seq, " did not complete before the deadline",
                     missing.empty() ? std::string(" (waiting on peers)")
                                     : absl::StrCat(" (local ranks [", absl::StrJoin(missing, ", "),
                                                    "] never submitted it)")));
    mu_.Unlock();
    Abort(timeout, /*notify_peers=*/true);
    mu_.Lock();
  }
  absl::StatusOr<std::string> result =
      slot.done ? (slot.result.ok() ? absl::StatusOr<std::string>(slot.algorithm)
                                    : absl::StatusOr<std::string>(slot.result))
                : absl::StatusOr<std::string>(aborted_);
  if (++slot.collected == slot.arrived && (slot.done || !aborted_.ok()) &&
      slot.arrived == static_cast<int>(local_ranks_.size())) {
    // The executor has taken (or will never take) this slot: the last reader frees it.
    if (slot.done) slots_.erase(seq);
  }
  return result;
}

void Communicator::Abort(const absl::Status& reason, bool notify_peers) {
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = reason;
  }
  // Destruction after the last rank left is the normal end, not a failure worth a warning.
  if (absl::IsCancelled(reason) && !notify_peers) {
    spdlog::debug("communicator {:x} closed: {}", plan_.comm_tag, reason.message());
  } else {
    spdlog::warn("communicator {:x} aborted: {}", plan_.comm_tag, reason.ToString());
  }
  endpoint_->Abort(plan_.comm_tag, reason);
  if (notify_peers && notify_abort_) notify_abort_(plan_, reason);
}

std::string Communicator::State() const {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) return "active";
  return absl::StrCat("aborted: ", aborted_.message());
}

uint64_t Communicator::ops_completed() const {
  absl::MutexLock lock(&mu_);
  return ops_completed_;
}

void Communicator::RunExecutor() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || !aborted_.ok() || NextIsReady();
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_ || !aborted_.ok()) break;
    RunNext();
  }
}

bool Communicator::NextIsReady() const {
  if (running_) return false;
  auto it = slots_.find(next_to_run_);
  return it != slots_.end() && it->second.arrived == static_cast<int>(local_ranks_.size());
}

void Communicator::RunNext() {
  const uint64_t seq = next_to_run_;
  Slot& slot = slots_[seq];
  std::vector<OpRequest> parts;
  parts.reserve(slot.parts.size());
  for (auto& part : slot.parts) parts.push_back(*part);
  running_ = true;

  mu_.Unlock();
  const absl::Time start = absl::Now();
  collective::OpStats stats;
  std::string algorithm;
  absl::StatusOr<std::string> result = Execute(seq, parts, stats, algorithm);
  if (options_.observer != nullptr) {
    options_.observer->OnOperation(OpRecord{parts.front().kind, algorithm, absl::Now() - start,
                                            result.ok(), absl::FromChrono(stats.transport),
                                            absl::FromChrono(stats.reduce)});
  }
  if (!result.ok()) Abort(result.status(), /*notify_peers=*/true);
  mu_.Lock();

  running_ = false;
  slot.done = true;
  slot.result = result.status();
  if (result.ok()) {
    slot.algorithm = *result;
    ++ops_completed_;
    if (options_.completed_total != nullptr) options_.completed_total->fetch_add(1);
  }
  ++next_to_run_;
  if (slot.collected == slot.arrived) slots_.erase(seq);
}

absl::StatusOr<std::string> Communicator::Execute(uint64_t seq, std::vector<OpRequest>& parts,
                                                  collective::OpStats& stats,
                                                  std::string& algorithm_name) {
  // Before anything that could end this operation early here, so that every daemon exchanges.
  if (options_.learn_algorithms && plan_.daemons.size() > 1 && seq > 0 &&
      seq % kMeasurementExchangeEvery == 0) {
    collective::PhaseTimer timer(&stats.transport);
    BATON_RETURN_IF_ERROR(ExchangeMeasurements(seq));
  }
  const OpRequest& first = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!SameOperation(first, parts[i])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks called different collectives as operation ", seq, ": rank ", local_ranks_[0],
          " called ", Describe(first), ", rank ", local_ranks_[i], " called ", Describe(parts[i])));
    }
  }
  if (plan_.daemons.size() == 1) {
    return RunOperation(seq, parts, endpoint_, stats, algorithm_name);
  }
  // The signature rides with the operation's first message to the next daemon when that comes
  // before the operation waits for anything; else it goes alone.
  transport::PiggybackEndpoint piggyback(endpoint_);
  PeerCheck check;
  {
    collective::PhaseTimer timer(&stats.transport);
    BATON_RETURN_IF_ERROR(StartPeerCheck(seq, first, piggyback, check));
  }
  absl::StatusOr<std::string> result = RunOperation(seq, parts, &piggyback, stats, algorithm_name);
  collective::PhaseTimer timer(&stats.transport);
  BATON_RETURN_IF_ERROR(FinishPeerCheck(seq, piggyback, check, result.status()));
  return result;
}

absl::StatusOr<std::string> Communicator::RunOperation(uint64_t seq, std::vector<OpRequest>& parts,
                                                       transport::Endpoint* endpoint,
                                                       collective::OpStats& stats,
                                                       std::string& algorithm_name) {
  const OpRequest& first = parts.front();
  const bool across = plan_.daemons.size() > 1;
  collective::TimingEndpoint timed(endpoint, &stats);
  collective::OpContext ctx;
  ctx.endpoint = &timed;
  ctx.stats = &stats;
  ctx.comm = plan_.comm_tag;
  ctx.seq = seq;
  ctx.deadline = absl::Now() + options_.op_timeout;
  ctx.chunk_bytes = options_.chunk_bytes;
  const Algorithm algorithm = ChooseAlgorithm(first);
  const std::string name = across ? std::string(collective::AlgorithmName(algorithm)) : "local";
  const absl::Time started = absl::Now();
  algorithm_name = name;
  const size_t element = collective::DataTypeSize(first.type);
  const size_t count = first.count;
  const size_t bytes = count * element;
  const int world = plan_.world_size;

  absl::Status status;
  switch (first.kind) {
    case Collective::kAllReduce: {
      // Reduce the local inputs into the first local rank's output, across daemons, then copy.
      // The ring reads the local inputs itself, as it needs them, with no pass over them first,
      // unless an input partly overlaps the output (then the ring would overwrite input it has
      // yet to read).
      std::byte* result = parts.front().recv;
      std::vector<const void*> sources;
      bool inputs_apart = true;
      for (const OpRequest& part : parts) {
        sources.push_back(part.send);
        inputs_apart = inputs_apart && (part.send == result || Apart(part.send, result, bytes));
      }
      const bool ring_reads_input = across && algorithm == Algorithm::kRing && inputs_apart;
      if (bytes > 0 && !ring_reads_input) {
        collective::PhaseTimer timer(&stats.reduce);
        collective::ReduceMany(first.type, first.op, result, sources, count);
      }
      if (ring_reads_input) {
        status = collective::RingAllReduce(ctx, RingOfDaemons(), sources, result, count, first.type,
                                           first.op);
      } else if (across) {
        status = AllReduceAcross(ctx, algorithm, result, count, first.type, first.op);
      }
      if (status.ok() && first.op == collective::ReduceOp::kAvg) {
        collective::PhaseTimer timer(&stats.reduce);
        collective::DivideInPlace(first.type, result, count, world);
      }
      for (size_t i = 1; status.ok() && i < parts.size() && bytes > 0; ++i) {
        std::memcpy(parts[i].recv, result, bytes);
      }
      if (status.ok() && across) {
        absl::MutexLock lock(&measured_mu_);
        measured_.Add(bytes, algorithm, absl::Now() - started);
      }
      break;
    }
    case Collective::kBroadcast: {
      const auto [root_daemon, root_local] = Locate(first.root);
      std::byte* data = parts[root_daemon == self_ ? root_local : 0].recv;
      if (root_daemon == self_ && bytes > 0) std::memmove(data, parts[root_local].send, bytes);
      if (across && bytes > 0) {
        status =
            collective::RingBroadcast(ctx, RingOfDaemons(), root_daemon, data, count, first.type);
      }
      for (size_t i = 0; status.ok() && i < parts.size() && bytes > 0; ++i) {
        if (parts[i].recv != data) std::memcpy(parts[i].recv, data, bytes);
      }
      break;
    }
    case Collective::kReduce: {
      const auto [root_daemon, root_local] = Locate(first.root);
      const bool at_root = root_daemon == self_;
      // The root's daemon reduces straight into the root's output; the others into scratch, a
      // slab at a time, so that the scratch stays bounded whatever the operation's size.
      const size_t slab = SlabLength(count, element);
      std::unique_ptr<std::byte[]> scratch;
      if (!at_root && bytes > 0) {
        scratch = std::make_unique_for_overwrite<std::byte[]>(std::min(slab, count) * element);
      }
      for (size_t begin = 0, k = 0; status.ok() && begin < count; begin += slab, ++k) {
        const size_t length = std::min(slab, count - begin);
        std::byte* data = at_root ? parts[root_local].recv + begin * element : scratch.get();
        std::vector<const void*> sources;
        for (const OpRequest& part : parts) sources.push_back(part.send + begin * element);
        {
          collective::PhaseTimer timer(&stats.reduce);
          collective::ReduceMany(first.type, first.op, data, sources, length);
        }
        if (across) {
          status = collective::RingReduce(SlabContext(ctx, k), RingOfDaemons(), root_daemon, data,
                                          length, first.type, first.op);
        }
        if (status.ok() && at_root && first.op == collective::ReduceOp::kAvg) {
          collective::PhaseTimer timer(&stats.reduce);
          collective::DivideInPlace(first.type, data, length, world);
        }
      }
      break;
    }
    case Collective::kReduceScatter:
      status = ReduceScatterAcross(ctx, parts);
      break;
    case Collective::kAllGather:
      status = AllGatherAcross(ctx, parts);
      break;
    case Collective::kAllToAll:
      status = AllToAllAcross(ctx, parts);
      break;
    case Collective::kBarrier:
      if (across) status = collective::DisseminationBarrier(ctx, DaemonParticipants());
      break;
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllToAllV:
    case Collective::kSend:
    case Collective::kRecv:
      status = absl::UnimplementedError("not yet implemented");
      break;
  }
  if (!status.ok()) {
    return NamePeers(
        absl::Status(status.code(),
                     absl::StrCat("operation ", seq, " ", Describe(first), " failed on node ",
                                  plan_.daemons[self_].member.node_name, ": ", status.message())));
  }
  return name;
}

size_t Communicator::SlabLength(size_t length, size_t unit_bytes) const {
  const size_t budget = kSlabChunks * options_.chunk_bytes;
  const size_t slab = std::max<size_t>(1, budget / std::max<size_t>(unit_bytes, 1));
  // Beyond kMaxSlabs slabs they grow instead, so that slab numbers fit in the tags' steps.
  return std::max(slab, (length + kMaxSlabs - 1) / kMaxSlabs);
}

collective::OpContext Communicator::SlabContext(const collective::OpContext& ctx, size_t slab) {
  collective::OpContext slab_ctx = ctx;
  slab_ctx.first_step = static_cast<uint32_t>(slab) << 16;
  return slab_ctx;
}

Algorithm Communicator::ChooseAlgorithm(const OpRequest& request) {
  if (request.algorithm) return *request.algorithm;
  const size_t bytes = request.count * collective::DataTypeSize(request.type);
  const std::vector<collective::AlgorithmCost> costs = Predict(request.kind, bytes);
  if (costs.empty()) {  // one daemon: the algorithm is only a name ("local" is reported)
    const bool direct =
        request.kind == Collective::kAllToAll || request.kind == Collective::kBarrier;
    return direct ? Algorithm::kDirect : Algorithm::kRing;
  }
  Algorithm chosen = costs.front().algorithm;
  if (options_.learn_algorithms && request.kind == Collective::kAllReduce) {
    absl::MutexLock lock(&measured_mu_);
    chosen = measured_.Choose(bytes, costs);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("communicator {:x}: {} of {} bytes over {} daemons: {}; ran {}", plan_.comm_tag,
                  collective::CollectiveName(request.kind), bytes, plan_.daemons.size(),
                  collective::ExplainCosts(costs), collective::AlgorithmName(chosen));
  }
  return chosen;
}

absl::Status Communicator::ExchangeMeasurements(uint64_t seq) {
  std::vector<int64_t> counters;
  {
    absl::MutexLock lock(&measured_mu_);
    counters = measured_.TakePending();
  }
  collective::OpContext ctx;
  ctx.endpoint = endpoint_;
  ctx.comm = plan_.comm_tag;
  ctx.seq = seq;
  ctx.first_step = kMeasurementStep;
  ctx.deadline = absl::Now() + options_.op_timeout;
  ctx.chunk_bytes = options_.chunk_bytes;
  absl::Status status =
      collective::DoublingAllReduce(ctx, DaemonParticipants(), counters.data(), counters.size(),
                                    collective::DataType::kInt64, collective::ReduceOp::kSum);
  std::vector<int64_t> agreed;
  if (status.ok()) {
    absl::MutexLock lock(&measured_mu_);
    status = measured_.Merge(counters);
    if (status.ok() && options_.on_measured) agreed = measured_.Agreed();
  }
  if (!agreed.empty()) options_.on_measured(std::move(agreed));
  if (!status.ok()) {
    return NamePeers(absl::Status(
        status.code(),
        absl::StrCat("exchanging measured times before operation ", seq, " failed on node ",
                     plan_.daemons[self_].member.node_name, ": ", status.message())));
  }
  return absl::OkStatus();
}

std::vector<collective::AlgorithmCost> Communicator::Predict(Collective kind, size_t bytes) const {
  if (plan_.daemons.size() < 2) return {};
  const collective::LinkModel model{absl::Seconds(plan_.link_alpha_seconds),
                                    plan_.link_bytes_per_second};
  std::vector<collective::AlgorithmCost> costs = collective::PredictCosts(
      kind, static_cast<int>(plan_.daemons.size()), bytes, options_.chunk_bytes, model);
  if (kind == Collective::kAllReduce && options_.learn_algorithms) {
    absl::MutexLock lock(&measured_mu_);
    for (collective::AlgorithmCost& cost : costs) {
      cost.measured = measured_.Mean(bytes, cost.algorithm);
      cost.samples = measured_.Samples(bytes, cost.algorithm);
    }
  }
  return costs;
}

absl::Status Communicator::AllReduceAcross(const collective::OpContext& ctx, Algorithm algorithm,
                                           std::byte* data, size_t count, collective::DataType type,
                                           collective::ReduceOp op) const {
  if (algorithm == Algorithm::kTree) {
    return collective::TreeAllReduce(ctx, DaemonParticipants(), tree_links_, data, count, type, op);
  }
  if (algorithm == Algorithm::kDoubling) {
    return collective::DoublingAllReduce(ctx, DaemonParticipants(), data, count, type, op);
  }
  if (algorithm == Algorithm::kHalvingDoubling) {
    return collective::HalvingDoublingAllReduce(ctx, DaemonParticipants(), data, count, type, op);
  }
  return collective::RingAllReduce(ctx, RingOfDaemons(), data, count, type, op);
}

absl::Status Communicator::ReduceScatterAcross(const collective::OpContext& ctx,
                                               std::vector<OpRequest>& parts) {
  const OpRequest& first = parts.front();
  const size_t element = collective::DataTypeSize(first.type);
  const size_t block = first.count;  // elements each rank receives
  if (block == 0) return absl::OkStatus();
  const size_t world = static_cast<size_t>(plan_.world_size);
  // A slab of every rank's block at a time: the local inputs reduced into scratch (block r's
  // slab at r * length), then across daemons, then each local rank's slab copied out.
  const size_t slab = SlabLength(block, world * element);
  auto scratch =
      std::make_unique_for_overwrite<std::byte[]>(world * std::min(slab, block) * element);
  for (size_t begin = 0, k = 0; begin < block; begin += slab, ++k) {
    const size_t length = std::min(slab, block - begin);
    {
      collective::PhaseTimer timer(collective::ReduceSlot(ctx));
      for (size_t r = 0; r < world; ++r) {
        std::vector<const void*> sources;
        for (const OpRequest& part : parts)
          sources.push_back(part.send + (r * block + begin) * element);
        collective::ReduceMany(first.type, first.op, scratch.get() + r * length * element, sources,
                               length);
      }
    }
    if (plan_.daemons.size() > 1) {
      // With block placement a daemon's ranks own exactly its segment of the even split, so a
      // reduce-scatter moves (D-1)/D of the data; otherwise every daemon needs the whole result.
      const collective::OpContext slab_ctx = SlabContext(ctx, k);
      absl::Status status =
          BlockRegular() ? collective::RingReduceScatter(slab_ctx, RingOfDaemons(), scratch.get(),
                                                         world * length, first.type, first.op)
                         : collective::RingAllReduce(slab_ctx, RingOfDaemons(), scratch.get(),
                                                     world * length, first.type, first.op);
      if (!status.ok()) return status;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      std::byte* own = scratch.get() + static_cast<size_t>(local_ranks_[i]) * length * element;
      if (first.op == collective::ReduceOp::kAvg) {
        collective::PhaseTimer timer(collective::ReduceSlot(ctx));
        collective::DivideInPlace(first.type, own, length, plan_.world_size);
      }
      std::memcpy(parts[i].recv + begin * element, own, length * element);
    }
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllGatherAcross(const collective::OpContext& ctx,
                                           std::vector<OpRequest>& parts) {
  const OpRequest& first = parts.front();
  const size_t element = collective::DataTypeSize(first.type);
  const size_t block_bytes = first.count * element;
  const size_t total_bytes = block_bytes * static_cast<size_t>(plan_.world_size);
  if (total_bytes == 0) return absl::OkStatus();
  // Gather into the first local rank's output. Inputs may alias their place in an output
  // (in-place all-gather), hence memmove, and all inputs are placed before any output is copied.
  std::byte* out = parts.front().recv;
  const bool regular = BlockRegular();
  if (!regular && plan_.daemons.size() > 1) {
    // Irregular placement: place our blocks, zero the others, and sum bytes across daemons:
    // every byte has exactly one non-zero contributor, so the sum is bitwise that contribution.
    // Only the first local rank's input may overlap `out` (its own output, in place), so it is
    // placed first; no scratch is needed.
    std::memmove(out + static_cast<size_t>(local_ranks_[0]) * block_bytes, parts[0].send,
                 block_bytes);
    for (int rank = 0; rank < plan_.world_size; ++rank) {
      if (LocalIndex(rank) < 0)
        std::memset(out + static_cast<size_t>(rank) * block_bytes, 0, block_bytes);
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      std::memcpy(out + static_cast<size_t>(local_ranks_[i]) * block_bytes, parts[i].send,
                  block_bytes);
    }
    absl::Status status =
        collective::RingAllReduce(ctx, RingOfDaemons(), out, total_bytes,
                                  collective::DataType::kUint8, collective::ReduceOp::kSum);
    if (!status.ok()) return status;
  } else {
    for (size_t i = 0; i < parts.size(); ++i) {
      std::memmove(out + static_cast<size_t>(local_ranks_[i]) * block_bytes, parts[i].send,
                   block_bytes);
    }
    if (plan_.daemons.size() > 1) {
      absl::Status status = collective::RingAllGather(
          ctx, RingOfDaemons(), out, first.count * static_cast<size_t>(plan_.world_size),
          first.type);
      if (!status.ok()) return status;
    }
  }
  for (size_t i = 1; i < parts.size(); ++i) std::memcpy(parts[i].recv, out, total_bytes);
  return absl::OkStatus();
}

absl::Status Communicator::AllToAllAcross(const collective::OpContext& ctx,
                                          std::vector<OpRequest>& parts) {
  const OpRequest& first = parts.front();
  const size_t element = collective::DataTypeSize(first.type);
  const size_t block = first.count * element;  // bytes from one rank to one rank
  if (block == 0) return absl::OkStatus();
  // Straight between the ranks' buffers where no send overlaps a receive buffer: nothing is
  // packed, and the links never wait for a copy.
  const size_t buffer_bytes = block * static_cast<size_t>(plan_.world_size);
  bool apart = true;
  for (const OpRequest& a : parts) {
    for (const OpRequest& b : parts) apart = apart && Apart(a.send, b.recv, buffer_bytes);
  }
  if (apart) {
    std::vector<std::vector<int>> ranks_of;
    for (const PlanDaemon& daemon : plan_.daemons) ranks_of.push_back(daemon.ranks);
    std::vector<const std::byte*> sends;
    std::vector<std::byte*> recvs;
    for (const OpRequest& part : parts) {
      sends.push_back(part.send);
      recvs.push_back(part.recv);
    }
    return collective::DirectAllToAllOfRanks(ctx, DaemonParticipants(), ranks_of, sends, recvs,
                                             block);
  }
  // In place (a rank's output overlaps an input): daemon a sends daemon b one slab: for each of a's
  // local ranks (padded to the most ranks any daemon hosts), the blocks for each of b's local
  // ranks. One direct all-to-all of slabs between daemons then moves every block, the ones within
  // this daemon included.
  size_t most = 0;
  for (const PlanDaemon& daemon : plan_.daemons) most = std::max(most, daemon.ranks.size());
  const size_t daemons = plan_.daemons.size();
  // A slab of every block at a time, so that the packed and unpacked copies stay bounded.
  const size_t slab = SlabLength(block, 2 * daemons * most * most);
  const size_t most_slab_bytes = most * most * std::min(slab, block);
  std::vector<std::byte> packed(daemons * most_slab_bytes);
  std::vector<std::byte> unpacked(daemons * most_slab_bytes);
  for (size_t begin = 0, k = 0; begin < block; begin += slab, ++k) {
    const size_t length = std::min(slab, block - begin);
    const size_t slab_bytes = most * most * length;  // what one daemon sends another
    for (size_t b = 0; b < daemons; ++b) {
      const std::vector<int>& targets = plan_.daemons[b].ranks;
      for (size_t i = 0; i < parts.size(); ++i) {
        for (size_t j = 0; j < targets.size(); ++j) {
          std::memcpy(packed.data() + b * slab_bytes + (i * most + j) * length,
                      parts[i].send + static_cast<size_t>(targets[j]) * block + begin, length);
        }
      }
    }
    absl::Status status =
        collective::DirectAllToAll(SlabContext(ctx, k), DaemonParticipants(), packed.data(),
                                   unpacked.data(), slab_bytes, collective::DataType::kUint8);
    if (!status.ok()) return status;
    for (size_t a = 0; a < daemons; ++a) {
      const std::vector<int>& sources = plan_.daemons[a].ranks;
      for (size_t i = 0; i < sources.size(); ++i) {
        for (size_t j = 0; j < parts.size(); ++j) {
          std::memcpy(parts[j].recv + static_cast<size_t>(sources[i]) * block + begin,
                      unpacked.data() + a * slab_bytes + (i * most + j) * length, length);
        }
      }
    }
  }
  return absl::OkStatus();
}

collective::Ring Communicator::RingOfDaemons() const {
  const int size = static_cast<int>(plan_.daemons.size());
  collective::Ring ring;
  ring.rank = self_;
  ring.size = size;
  ring.prev = plan_.daemons[(self_ + size - 1) % size].member.data_address;
  ring.next = plan_.daemons[(self_ + 1) % size].member.data_address;
  return ring;
}

collective::Participants Communicator::DaemonParticipants() const {
  collective::Participants participants;
  participants.rank = self_;
  for (const PlanDaemon& daemon : plan_.daemons) {
    participants.addresses.push_back(daemon.member.data_address);
  }
  return participants;
}

std::pair<int, int> Communicator::Locate(int rank) const {
  for (size_t d = 0; d < plan_.daemons.size(); ++d) {
    const std::vector<int>& ranks = plan_.daemons[d].ranks;
    auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
    if (it != ranks.end() && *it == rank) {
      return {static_cast<int>(d), static_cast<int>(it - ranks.begin())};
    }
  }
  return {-1, -1};  // unreachable: the root was checked against the world size
}

bool Communicator::BlockRegular() const {
  const size_t k = plan_.daemons.front().ranks.size();
  for (size_t d = 0; d < plan_.daemons.size(); ++d) {
    const std::vector<int>& ranks = plan_.daemons[d].ranks;
    if (ranks.size() != k) return false;
    for (size_t i = 0; i < k; ++i) {
      if (ranks[i] != static_cast<int>(d * k + i)) return false;
    }
  }
  return true;
}

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

absl::Status Communicator::StartPeerCheck(uint64_t seq, const OpRequest& mine,
                                          transport::PiggybackEndpoint& piggyback,
                                          PeerCheck& check) const {
  // Each daemon tells the next one on the check's cycle (SignatureCheckNeighbours) what its ranks
  // called. If any two daemons disagree, some neighbouring pair does, and the daemon that sees it
  // fails the operation (and so aborts the communicator everywhere) with both sides described,
  // instead of reducing mismatched data or waiting for messages that never come. The operation does
  // not wait for the exchange: the signature's arrival is checked as it lands, and a disagreement
  // aborts this daemon's transport for the communicator at once, so the operation stops wherever it
  // waits.
  const PlanDaemon& next = plan_.daemons[check_neighbours_.next];
  const PlanDaemon& prev = plan_.daemons[check_neighbours_.prev];
  const transport::Tag tag{plan_.comm_tag, seq, kSignatureStep, 0};
  const absl::Time deadline = absl::Now() + options_.op_timeout;
  check.own = Signature::Of(mine);
  auto arrived = [this, seq, &mine, &prev, &check] {
    if (!(check.own == check.theirs)) {
      check.disagreement = absl::FailedPreconditionError(absl::StrCat(
          "ranks called different collectives as operation ", seq, ": ranks [",
          absl::StrJoin(prev.ranks, ", "), "] on node ", prev.member.node_name, " called ",
          Describe(check.theirs.AsRequest()), ", ranks [", absl::StrJoin(local_ranks_, ", "),
          "] on node ", plan_.daemons[self_].member.node_name, " called ", Describe(mine)));
      endpoint_->Abort(plan_.comm_tag, check.disagreement);
    }
    check.arrived.store(true, std::memory_order_release);
  };
  check.recv = endpoint_->PostRecv(
      prev.member.data_address, tag,
      transport::ByteSpan(reinterpret_cast<std::byte*>(&check.theirs), sizeof(check.theirs)),
      deadline, arrived);
  const absl::Status held = piggyback.Hold(
      next.member.data_address, tag,
      transport::ConstByteSpan(reinterpret_cast<const std::byte*>(&check.own), sizeof(check.own)),
      deadline);
  if (!held.ok()) return PeerCheckError(seq, held);
  return absl::OkStatus();
}

absl::Status Communicator::FinishPeerCheck(uint64_t seq, transport::PiggybackEndpoint& piggyback,
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

absl::Status Communicator::PeerCheckError(uint64_t seq, const absl::Status& status) const {
  return NamePeers(Annotate(
      status, absl::StrCat("operation ", seq, " on node ", plan_.daemons[self_].member.node_name)));
}

absl::Status Communicator::NamePeers(const absl::Status& status) const {
  std::string message(status.message());
  for (const PlanDaemon& daemon : plan_.daemons) {
    message = absl::StrReplaceAll(
        message, {{daemon.member.data_address,
                   absl::StrCat(daemon.member.node_name, " (", daemon.member.data_address, ")")}});
  }
  return absl::Status(status.code(), message);
}

}  // namespace baton::daemon
