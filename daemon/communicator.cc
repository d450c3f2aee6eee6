#include "daemon/communicator.h"

#include <fcntl.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/node_arena.h"
#include "collective/schedule.h"
#include "common/log_limiter.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {

namespace {

collective::RunnerOptions RunnerOptionsOf(const Plan& plan, const CommunicatorOptions& options) {
  collective::RunnerOptions runner;
  runner.op_timeout = options.op_timeout;
  runner.chunk_bytes = options.chunk_bytes;
  runner.learn_algorithms = options.learn_algorithms;
  runner.link =
      collective::LinkModel{absl::Seconds(plan.link_alpha_seconds), plan.link_bytes_per_second};
  runner.measured_seed = plan.measured_seed;
  runner.on_measured = options.on_measured;
  runner.scratch = options.scratch;
  runner.staging_regions = options.staging_regions;
  return runner;
}

}  // namespace

Communicator::Communicator(Plan plan, int self, transport::Endpoint* endpoint,
                           CommunicatorOptions options, AbortNotifier notify_abort)
    : plan_(std::move(plan)),
      self_(self),
      endpoint_(endpoint),
      options_(std::move(options)),
      notify_abort_(std::move(notify_abort)),
      local_ranks_(plan_.daemons[self].ranks),
      runner_(plan_.LayoutFor(self), plan_.comm_tag, endpoint, RunnerOptionsOf(plan_, options_)),
      point_to_point_(endpoint, plan_.comm_tag, plan_.LayoutFor(self), options_.chunk_bytes) {
  sessions_.resize(local_ranks_.size());
  attached_once_.resize(local_ranks_.size(), false);
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
  attached_once_[index] = true;
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

bool Communicator::AllAttachedOnceLocked() const {
  return std::all_of(attached_once_.begin(), attached_once_.end(),
                     [](bool attached) { return attached; });
}

bool Communicator::Empty() const {
  absl::MutexLock lock(&mu_);
  // A local rank that has not attached yet (its join's answer is on its way) may still use the
  // communicator: a peer's eager sends to it wait here, so an early leaver must not end it.
  return (AllAttachedOnceLocked() || !aborted_.ok()) &&
         std::none_of(sessions_.begin(), sessions_.end(),
                      [](const auto& s) { return s.has_value(); });
}

std::optional<absl::Status> Communicator::FailedBeforeEveryRankAttached() const {
  absl::MutexLock lock(&mu_);
  if (AllAttachedOnceLocked() || aborted_.ok()) return std::nullopt;
  return aborted_;
}

absl::Status Communicator::CheckAttached(int rank, uint64_t session_id) const {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  return CheckAttachedLocked(index, rank, session_id);
}

absl::StatusOr<Communicator::Arena> Communicator::OpenArena(int rank, uint64_t session_id) {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  BATON_RETURN_IF_ERROR(CheckAttachedLocked(index, rank, session_id));
  if (local_ranks_.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("communicator ", absl::Hex(plan_.comm_tag),
                     " has no node arena: it has fewer than two ranks on this node"));
  }
  if (!aborted_.ok()) return aborted_;
  const int ranks = static_cast<int>(local_ranks_.size());
  const size_t bytes = collective::NodeArena::Bytes(ranks, kArenaSlotBytes);
  if (arena_ == nullptr) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> memory,
                           SharedMemory::Create(bytes, "baton-arena"));
    BATON_ASSIGN_OR_RETURN(
        collective::ArenaOwner owner,
        collective::ArenaOwner::Create(memory->data(), bytes, local_ranks_, kArenaSlotBytes));
    arena_ = std::move(memory);
    arena_owner_ = owner;
  }
  const int fd = fcntl(arena_->fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return absl::ResourceExhaustedError("no descriptor left to share the node arena");
  return Arena{fd, bytes, index};
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
  if (request.spec.PointToPoint()) {
    {
      absl::MutexLock lock(&mu_);
      BATON_RETURN_IF_ERROR(CheckAttachedLocked(index, rank, session_id));
      if (!aborted_.ok()) return aborted_;
    }
    return RunPointToPoint(rank, request, deadline);
  }
  absl::MutexLock lock(&mu_);
  BATON_RETURN_IF_ERROR(CheckAttachedLocked(index, rank, session_id));
  if (!aborted_.ok()) return aborted_;
  const uint64_t seq = next_seq_[index];
  const bool node_part = request.spec.node_part;
  if (fail_from_.has_value() && seq >= fail_from_->first) {
    // A rank will not come to it: it fails at once, and takes its place in the sequence.
    if (node_part) {
      for (uint64_t& next : next_seq_) next = std::max(next, seq + 1);
    } else {
      ++next_seq_[index];
    }
    return fail_from_->second;
  }
  if (node_part) {
    BATON_RETURN_IF_ERROR(CheckNodePartLocked(index, seq, request.spec));
    // The other local ranks took part in the arena: this is their operation `seq` too.
    for (uint64_t& next : next_seq_) next = seq + 1;
  } else {
    ++next_seq_[index];
  }
  Slot& slot = slots_[seq];
  if (slot.parts.empty()) {
    slot.parts.resize(local_ranks_.size());
    slot.expected = node_part ? 1 : static_cast<int>(local_ranks_.size());
  }
  slot.parts[index] = std::move(request);
  slot.deadline = std::min(slot.deadline, deadline);
  ++slot.arrived;
  // The last local rank to arrive runs the operation itself when nothing is ahead of it: handing
  // it to the executor thread would cost two thread wake-ups, which dominate small operations.
  if (seq == next_to_run_ && NextIsReady()) RunNext();

  auto finished = [this, &slot]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return slot.done || !aborted_.ok(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
    std::vector<int> missing;
    for (size_t i = 0; i < slot.parts.size() && slot.arrived < slot.expected; ++i) {
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
      (slot.arrived == slot.expected || slot.cut)) {
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
    // The arena in the same step: from here on a rank that asks the daemon (OpenArena, Submit)
    // and a rank already waiting in the arena both fail with this reason, with no window in
    // which one fails at once while the other waits for its deadline.
    if (arena_owner_) arena_owner_->Abort(reason);
  }
  // Destruction after the last rank left is the normal end, not a failure worth a warning. Any
  // local user can create and abort communicators in a loop: the warnings are rate-limited.
  static LogLimiter aborted_lines(20, absl::Minutes(1));
  if (absl::IsCancelled(reason) && !notify_peers) {
    spdlog::debug("communicator {:x} closed: {}", plan_.comm_tag, reason.message());
  } else {
    aborted_lines.Log(spdlog::level::warn, "communicator {:x} aborted: {}", plan_.comm_tag,
                      reason.ToString());
  }
  endpoint_->Abort(plan_.comm_tag, reason);
  point_to_point_.Abort(reason);
  if (notify_peers && notify_abort_) notify_abort_(plan_, AbortNotice{reason});
}

void Communicator::FailFromNextOf(int rank, const absl::Status& reason, bool notify_peers,
                                  const std::optional<collective::Departure>& departed) {
  const int index = LocalIndex(rank);
  if (index < 0) return;
  uint64_t seq;
  {
    absl::MutexLock lock(&mu_);
    seq = next_seq_[index];
  }
  FailFrom(seq, reason, notify_peers, departed);
}

void Communicator::RankLeft(int rank, const absl::Status& reason) {
  const int index = LocalIndex(rank);
  if (index < 0) return;
  // Receives from it of a message it never sent fail at once, here and, told below, elsewhere.
  collective::Departure departed = point_to_point_.SentBy(rank);
  point_to_point_.SourceLeft(departed, reason);
  {
    // Its peers in the node arena stop waiting for it at an operation it never reached.
    absl::MutexLock lock(&mu_);
    if (arena_owner_) arena_owner_->MarkGone(index);
  }
  FailFromNextOf(rank, reason, /*notify_peers=*/true, std::move(departed));
}

void Communicator::RemoteRankLeft(const collective::Departure& departed,
                                  const absl::Status& reason) {
  if (LocalIndex(departed.rank) >= 0) return;  // only this daemon knows when its ranks leave
  point_to_point_.SourceLeft(departed, reason);
}

void Communicator::FailFrom(uint64_t seq, const absl::Status& reason, bool notify_peers,
                            const std::optional<collective::Departure>& departed) {
  const absl::Status failure =
      reason.ok() ? absl::CancelledError("communicator ended without a reason") : reason;
  bool running = false;
  bool failing_already = false;
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return;
    failing_already = fail_from_.has_value() && fail_from_->first <= seq;
    if (!failing_already) {
      fail_from_.emplace(seq, failure);
      for (auto& [number, slot] : slots_) {
        if (number < seq || slot.done) continue;
        if (running_ && number == next_to_run_) {
          running = true;  // it waits for the rank that will not come: only an abort stops it
          continue;
        }
        slot.done = true;
        slot.cut = true;
        slot.result = failure;
      }
    }
  }
  if (failing_already) {
    // Only what the rank that left had sent is news to the other daemons.
    if (departed.has_value() && notify_peers && notify_abort_) {
      notify_abort_(plan_, AbortNotice{failure, seq, departed});
    }
    return;
  }
  spdlog::info("communicator {:x} fails from operation {} on: {}", plan_.comm_tag, seq,
               failure.ToString());
  if (notify_peers && notify_abort_) notify_abort_(plan_, AbortNotice{failure, seq, departed});
  if (running) Abort(failure, /*notify_peers=*/false);
}

absl::StatusOr<std::string> Communicator::RunPointToPoint(int rank, const OpRequest& request,
                                                          absl::Time deadline) {
  const collective::OpSpec& spec = request.spec;
  const size_t bytes = spec.count * collective::DataTypeSize(spec.type);
  const absl::Time until = std::min(deadline, absl::Now() + options_.op_timeout);
  const absl::Time start = absl::Now();
  absl::Status status;
  const size_t element = collective::DataTypeSize(spec.type);
  uint64_t staged_bytes = 0;
  if (request.device == nullptr) {
    status =
        spec.collective == collective::Collective::kSend
            ? point_to_point_.Send(rank, spec.peer, transport::ConstByteSpan(request.send, bytes),
                                   until, element, request.send_region)
            : point_to_point_.Recv(spec.peer, rank, transport::ByteSpan(request.recv, bytes), until,
                                   element, request.recv_region);
  } else {
    status = RunPointToPointStaged(rank, request, bytes, until, staged_bytes);
  }
  if (options_.observer != nullptr) {
    options_.observer->OnOperation(OpRecord{spec.collective, "direct", absl::Now() - start,
                                            status.ok(), absl::Now() - start, absl::ZeroDuration(),
                                            staged_bytes});
  }
  if (!status.ok()) {
    // The pair's numbering is undefined after a failure, and the peer may wait for this message:
    // the communicator fails everywhere, as after any failed operation.
    const absl::Status failed = Explain(
        absl::Status(status.code(),
                     absl::StrCat(spec.Describe(), " of rank ", rank, " failed on node ",
                                  plan_.daemons[self_].member.node_name, ": ", status.message())),
        start);
    Abort(failed, /*notify_peers=*/true);
    return failed;
  }
  {
    absl::MutexLock lock(&mu_);
    ++ops_completed_;
  }
  if (options_.completed_total != nullptr) options_.completed_total->fetch_add(1);
  return std::string("direct");
}

absl::Status Communicator::RunPointToPointStaged(int rank, const OpRequest& request, size_t bytes,
                                                 absl::Time until, uint64_t& staged_bytes) {
  const collective::OpSpec& spec = request.spec;
  // Staged through the daemon's scratch, which is registered with the data plane.
  const collective::ScratchPool::Buffer staged = options_.scratch != nullptr
                                                     ? options_.scratch->Take(bytes)
                                                     : collective::ScratchPool::Unpooled(bytes);
  const transport::MemoryRegion* region = staged.region();
  if (spec.collective == collective::Collective::kSend) {
    BATON_RETURN_IF_ERROR(request.device->Copy(staged.data(), request.send, bytes));
    staged_bytes += bytes;
    return point_to_point_.Send(rank, spec.peer, transport::ConstByteSpan(staged.data(), bytes),
                                until, collective::DataTypeSize(spec.type), region);
  }
  BATON_RETURN_IF_ERROR(point_to_point_.Recv(spec.peer, rank,
                                             transport::ByteSpan(staged.data(), bytes), until,
                                             collective::DataTypeSize(spec.type), region));
  BATON_RETURN_IF_ERROR(request.device->Copy(request.recv, staged.data(), bytes));
  staged_bytes += bytes;
  return absl::OkStatus();
}

absl::Status Communicator::Explain(const absl::Status& failure, absl::Time started) {
  {
    absl::MutexLock lock(&mu_);
    // Aborted already (by a peer, which explained its failure, or a local rank): this failure is
    // that abort's consequence, and its reason, which names the cause, is what every rank gets.
    // A daemon resumed after SIGSTOP times out at once, while its peers' aborts come in.
    if (!aborted_.ok()) return aborted_;
  }
  return options_.explain_failure ? options_.explain_failure(failure, started) : failure;
}

std::string Communicator::State() const {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) return "active";
  return absl::StrCat("aborted: ", aborted_.message());
}

ArenaCounts& operator+=(ArenaCounts& sum, const ArenaCounts& more) {
  for (size_t kind = 0; kind < sum.size(); ++kind) sum[kind] += more[kind];
  return sum;
}

ArenaCounts Communicator::ArenaCounters() const {
  ArenaCounts counts{};
  absl::MutexLock lock(&mu_);
  if (!arena_owner_) return counts;
  // Whatever the ranks wrote: the owner walks the blocks of the ranks the daemon gave it.
  const collective::ArenaOwner& view = *arena_owner_;
  const auto ranks = static_cast<uint64_t>(view.ranks());
  for (int kind = 0; kind < collective::NodeArena::kCountedKinds; ++kind) {
    collective::NodeArena::Counters& count = counts[kind];
    uint64_t busy_ns = 0;
    uint64_t wait_ns = 0;
    for (int rank = 0; rank < view.ranks(); ++rank) {
      const collective::NodeArena::Counters one =
          view.counters(rank, static_cast<collective::Collective>(kind));
      count.operations = std::max(count.operations, one.operations);
      count.failed = std::max(count.failed, one.failed);
      count.bytes = std::max(count.bytes, one.bytes);
      count.local_phases = std::max(count.local_phases, one.local_phases);
      busy_ns += one.busy_ns;
      wait_ns += one.wait_ns;
    }
    count.busy_ns = busy_ns / ranks;
    count.wait_ns = wait_ns / ranks;
  }
  return counts;
}

uint64_t Communicator::ops_completed() const {
  uint64_t arena_ops = 0;
  for (const collective::NodeArena::Counters& count : ArenaCounters()) {
    arena_ops += count.operations;
  }
  absl::MutexLock lock(&mu_);
  return ops_completed_ + arena_ops;
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
  if (fail_from_.has_value() && next_to_run_ >= fail_from_->first) return false;
  auto it = slots_.find(next_to_run_);
  return it != slots_.end() && it->second.arrived == it->second.expected;
}

absl::Status Communicator::CheckNodePartLocked(int index, uint64_t seq,
                                               const collective::OpSpec& spec) const {
  if (!collective::HasNodePart(spec.collective)) {
    return absl::InvalidArgumentError(absl::StrCat(collective::CollectiveName(spec.collective),
                                                   " has no local phase in the node arena"));
  }
  if (index != 0 || local_ranks_.size() < 2) {
    return absl::InvalidArgumentError(
        "only local rank 0 of a node with two or more local ranks submits for the node");
  }
  for (size_t i = 0; i < next_seq_.size(); ++i) {
    if (next_seq_[i] != seq) {
      return absl::FailedPreconditionError(absl::StrCat(
          "local rank ", local_ranks_[0], " submitted operation ", seq,
          " for the node while local rank ", local_ranks_[i], " is at operation ", next_seq_[i]));
    }
  }
  if (slots_.contains(seq)) {
    return absl::FailedPreconditionError(
        absl::StrCat("operation ", seq, " was submitted both for the node and by a local rank"));
  }
  return absl::OkStatus();
}

void Communicator::RunNext() {
  const uint64_t seq = next_to_run_;
  Slot& slot = slots_[seq];
  std::vector<OpRequest> requests;
  requests.reserve(slot.parts.size());
  for (auto& part : slot.parts) {
    if (part.has_value()) requests.push_back(*part);
  }
  std::vector<collective::LocalPart> parts;
  if (requests.front().spec.node_part) {
    parts = collective::NodeParts(requests.front().spec, requests.front().recv, runner_.layout());
    for (collective::LocalPart& part : parts) {
      part.send_region = part.send == nullptr ? nullptr : requests.front().recv_region;
      part.recv_region = part.recv == nullptr ? nullptr : requests.front().recv_region;
    }
  } else {
    parts.reserve(requests.size());
    for (const OpRequest& r : requests) {
      parts.push_back({&r.spec, r.send, r.recv, r.send_region, r.recv_region});
    }
  }
  running_ = true;

  mu_.Unlock();
  const absl::Time start = absl::Now();
  collective::OpStats stats;
  std::string algorithm;
  absl::StatusOr<std::string> result = MemoryOf(seq, requests);
  if (result.ok()) {
    result = runner_.Run(seq, parts, stats, algorithm, slot.deadline, requests.front().device);
  }
  if (options_.observer != nullptr) {
    options_.observer->OnOperation(
        OpRecord{requests.front().spec.collective, algorithm, absl::Now() - start, result.ok(),
                 absl::FromChrono(stats.transport), absl::FromChrono(stats.reduce),
                 stats.staged_bytes, stats.unregistered_bytes});
  }
  if (!result.ok()) {
    result = Explain(result.status(), start);
    Abort(result.status(), /*notify_peers=*/true);
  }
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

absl::StatusOr<std::string> Communicator::MemoryOf(uint64_t seq,
                                                   const std::vector<OpRequest>& requests) const {
  for (size_t i = 1; i < requests.size(); ++i) {
    if ((requests[i].device == nullptr) != (requests.front().device == nullptr)) {
      const auto kind = [](const OpRequest& r) { return r.device == nullptr ? "host" : "device"; };
      return absl::FailedPreconditionError(
          absl::StrCat("ranks passed buffers in different memory to operation ", seq, ": rank ",
                       local_ranks_[0], " ", kind(requests.front()), " memory, rank ",
                       local_ranks_[i], " ", kind(requests[i]), " memory"));
    }
    if (requests[i].device != requests.front().device) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks passed memory of different GPUs to operation ", seq, " (ranks ", local_ranks_[0],
          " and ", local_ranks_[i], "); one operation's local buffers must share a GPU"));
    }
  }
  return std::string();
}

std::vector<collective::AlgorithmCost> Communicator::Predict(collective::Collective kind,
                                                             size_t bytes) const {
  return runner_.Predict(kind, bytes);
}

}  // namespace baton::daemon
