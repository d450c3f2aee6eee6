#include "daemon/communicator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "collective/reduce.h"
#include "collective/ring_all_reduce.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
  }
  return "unknown";
}

namespace {

std::string Describe(const OpRequest& r) {
  return absl::StrCat(OpKindName(r.kind), "(", collective::DataTypeName(r.type), ", ",
                      collective::ReduceOpName(r.op), ", count ", r.count, ")");
}

bool SameOperation(const OpRequest& a, const OpRequest& b) {
  return a.kind == b.kind && a.type == b.type && a.op == b.op && a.count == b.count;
}

// What every daemon must agree on for one operation, as sent to the next daemon on the ring.
struct Signature {
  uint32_t kind = 0;
  uint32_t type = 0;
  uint32_t op = 0;
  uint32_t reserved = 0;
  uint64_t count = 0;
  uint64_t reserved2 = 0;

  static Signature Of(const OpRequest& r) {
    return {static_cast<uint32_t>(r.kind),
            static_cast<uint32_t>(r.type),
            static_cast<uint32_t>(r.op),
            0,
            r.count,
            0};
  }
  bool operator==(const Signature&) const = default;
  OpRequest AsRequest() const {
    OpRequest r;
    r.kind = static_cast<OpKind>(kind);
    r.type = static_cast<collective::DataType>(type);
    r.op = static_cast<collective::ReduceOp>(op);
    r.count = count;
    return r;
  }
};
static_assert(sizeof(Signature) == 32);

// The tag step reserved for the signature exchange; algorithms number their steps from 0.
constexpr uint32_t kSignatureStep = 0xFFFFFFFFu;

}  // namespace

Communicator::Communicator(Plan plan, int self, transport::Endpoint* endpoint,
                           CommunicatorOptions options, AbortNotifier notify_abort)
    : plan_(std::move(plan)),
      self_(self),
      endpoint_(endpoint),
      options_(options),
      notify_abort_(std::move(notify_abort)),
      local_ranks_(plan_.daemons[self].ranks) {
  sessions_.resize(local_ranks_.size());
  next_seq_.resize(local_ranks_.size(), 0);
  executor_ = std::thread([this] { RunExecutor(); });
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

absl::StatusOr<std::string> Communicator::Submit(int rank, uint64_t session_id, OpRequest request,
                                                 absl::Time deadline) {
  const int index = LocalIndex(rank);
  absl::MutexLock lock(&mu_);
  if (index < 0 || sessions_[index] != session_id) {
    return absl::PermissionDeniedError(absl::StrCat("rank ", rank, " of communicator ",
                                                    absl::Hex(plan_.comm_tag),
                                                    " is not attached by this session"));
  }
  if (!aborted_.ok()) return aborted_;
  const uint64_t seq = next_seq_[index]++;
  Slot& slot = slots_[seq];
  if (slot.parts.empty()) slot.parts.resize(local_ranks_.size());
  slot.parts[index] = std::move(request);
  ++slot.arrived;

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
  spdlog::warn("communicator {:x} aborted: {}", plan_.comm_tag, reason.ToString());
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
      if (stopping_ || !aborted_.ok()) return true;
      auto it = slots_.find(next_to_run_);
      return it != slots_.end() && it->second.arrived == static_cast<int>(local_ranks_.size());
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_ || !aborted_.ok()) break;
    const uint64_t seq = next_to_run_;
    Slot& slot = slots_[seq];
    std::vector<OpRequest> parts;
    parts.reserve(slot.parts.size());
    for (auto& part : slot.parts) parts.push_back(*part);

    mu_.Unlock();
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> result = Execute(seq, parts);
    if (options_.observer != nullptr) {
      options_.observer->OnOperation(
          OpRecord{parts.front().kind, result.value_or(""), absl::Now() - start, result.ok()});
    }
    if (!result.ok()) Abort(result.status(), /*notify_peers=*/true);
    mu_.Lock();

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
}

absl::StatusOr<std::string> Communicator::Execute(uint64_t seq, std::vector<OpRequest>& parts) {
  const OpRequest& first = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!SameOperation(first, parts[i])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ranks called different collectives as operation ", seq, ": rank ", local_ranks_[0],
          " called ", Describe(first), ", rank ", local_ranks_[i], " called ", Describe(parts[i])));
    }
  }
  const size_t bytes = first.count * collective::DataTypeSize(first.type);

  // 1. Reduce the local ranks' inputs into the first local rank's output buffer.
  std::byte* result = parts.front().recv;
  std::vector<const void*> sources;
  sources.reserve(parts.size());
  for (const OpRequest& part : parts) sources.push_back(part.send);
  if (sources.size() > 1) {
    collective::ReduceMany(first.type, first.op, result, sources, first.count);
  } else if (sources.front() != result && bytes > 0) {
    std::memcpy(result, sources.front(), bytes);
  }

  // 2. Reduce across daemons.
  std::string algorithm = "local";
  if (plan_.daemons.size() > 1) {
    BATON_RETURN_IF_ERROR(CheckPeersAgree(seq, first));
    const int size = static_cast<int>(plan_.daemons.size());
    collective::Ring ring;
    ring.rank = self_;
    ring.size = size;
    ring.prev = plan_.daemons[(self_ + size - 1) % size].member.data_address;
    ring.next = plan_.daemons[(self_ + 1) % size].member.data_address;
    collective::OpContext context;
    context.endpoint = endpoint_;
    context.comm = plan_.comm_tag;
    context.seq = seq;
    context.deadline = absl::Now() + options_.op_timeout;
    context.chunk_bytes = options_.chunk_bytes;
    absl::Status status =
        collective::RingAllReduce(context, ring, result, first.count, first.type, first.op);
    if (!status.ok()) {
      return NamePeers(absl::Status(
          status.code(),
          absl::StrCat("operation ", seq, " ", Describe(first), " failed on node ",
                       plan_.daemons[self_].member.node_name, ": ", status.message())));
    }
    algorithm = "ring";
  }
  if (first.op == collective::ReduceOp::kAvg) {
    collective::DivideInPlace(first.type, result, first.count, plan_.world_size);
  }

  // 3. Give every other local rank the result.
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].recv != result && bytes > 0) std::memcpy(parts[i].recv, result, bytes);
  }
  return algorithm;
}

absl::Status Communicator::CheckPeersAgree(uint64_t seq, const OpRequest& mine) const {
  // Each daemon tells the next one on the ring what its ranks called. If any two daemons
  // disagree, some neighbouring pair does, and the daemon that sees it aborts the communicator
  // everywhere with both sides described, instead of reducing mismatched data or hanging.
  const int size = static_cast<int>(plan_.daemons.size());
  const PlanDaemon& next = plan_.daemons[(self_ + 1) % size];
  const PlanDaemon& prev = plan_.daemons[(self_ + size - 1) % size];
  const transport::Tag tag{plan_.comm_tag, seq, kSignatureStep, 0};
  const absl::Time deadline = absl::Now() + options_.op_timeout;
  Signature own = Signature::Of(mine);
  Signature theirs;
  absl::Status status = endpoint_->Send(
      next.member.data_address, tag,
      transport::ConstByteSpan(reinterpret_cast<const std::byte*>(&own), sizeof(own)), deadline);
  if (status.ok()) {
    status = endpoint_->Recv(
        prev.member.data_address, tag,
        transport::ByteSpan(reinterpret_cast<std::byte*>(&theirs), sizeof(theirs)), deadline);
  }
  if (!status.ok()) {
    return NamePeers(Annotate(status, absl::StrCat("operation ", seq, " on node ",
                                                   plan_.daemons[self_].member.node_name)));
  }
  if (own == theirs) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "ranks called different collectives as operation ", seq, ": ranks [",
      absl::StrJoin(prev.ranks, ", "), "] on node ", prev.member.node_name, " called ",
      Describe(theirs.AsRequest()), ", ranks [", absl::StrJoin(local_ranks_, ", "), "] on node ",
      plan_.daemons[self_].member.node_name, " called ", Describe(mine)));
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
