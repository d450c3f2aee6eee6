#include "transport/testing/fault_endpoint.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton::transport::testing {
namespace {

// How often a receive from a peer that may be dropped looks whether it was.
constexpr absl::Duration kDropPollSlice = absl::Milliseconds(1);

absl::Status DroppedStatus(const std::string& peer) {
  return absl::UnavailableError(
      absl::StrCat("lost connection to peer ", peer, ": dropped by the fault injector"));
}

}  // namespace

// A receive that fails with the drop's error once its peer is dropped, while it waits.
class FaultInjectingEndpoint::DroppableRecv final : public PostedRecv {
 public:
  struct Arrival {
    absl::Mutex mu;
    bool arrived ABSL_GUARDED_BY(mu) = false;
  };

  DroppableRecv(const FaultInjectingEndpoint* endpoint, std::string peer,
                std::shared_ptr<Arrival> arrival)
      : endpoint_(endpoint), peer_(std::move(peer)), arrival_(std::move(arrival)) {}
  void set_inner(std::unique_ptr<PostedRecv> inner) { inner_ = std::move(inner); }

  absl::Status Wait() override {
    while (!result_.has_value()) {
      if (inner_->Test()) {
        result_ = inner_->Wait();
        break;
      }
      if (absl::Status dropped = endpoint_->DroppedError(peer_); !dropped.ok()) {
        result_ = std::move(dropped);
        break;
      }
      absl::MutexLock lock(&arrival_->mu);
      arrival_->mu.AwaitWithTimeout(absl::Condition(&arrival_->arrived), kDropPollSlice);
    }
    return *result_;
  }
  bool Test() override {
    return result_.has_value() || inner_->Test() || !endpoint_->DroppedError(peer_).ok();
  }
  bool WaitBriefly() override {
    inner_->WaitBriefly();
    return Test();
  }

 private:
  const FaultInjectingEndpoint* const endpoint_;
  const std::string peer_;
  const std::shared_ptr<Arrival> arrival_;
  std::optional<absl::Status> result_;
  std::unique_ptr<PostedRecv> inner_;  // last: destroyed first, it may still run the callback
};

FaultInjectingEndpoint::~FaultInjectingEndpoint() {
  absl::MutexLock lock(&mu_);
  closing_ = true;  // delayed sends stop waiting
}

void FaultInjectingEndpoint::Failures::Add(const std::string& peer, int n, absl::Status status,
                                           const char* what) {
  at.emplace_back(seen + std::max(n, 1), status.ok() ? absl::UnavailableError(absl::StrCat(
                                                           "lost connection to peer ", peer, ": ",
                                                           what, " failed by the fault injector"))
                                                     : std::move(status));
}

absl::Status FaultInjectingEndpoint::Failures::Next() {
  const int number = ++seen;
  for (auto it = at.begin(); it != at.end(); ++it) {
    if (it->first != number) continue;
    absl::Status error = std::move(it->second);
    at.erase(it);
    return error;
  }
  return absl::OkStatus();
}

void FaultInjectingEndpoint::FailNthSend(const std::string& peer, int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  faults_[peer].sends.Add(peer, n, std::move(status), "send");
}

void FaultInjectingEndpoint::FailNthExpose(const std::string& peer, int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  faults_[peer].exposes.Add(peer, n, std::move(status), "exposing a region");
}

void FaultInjectingEndpoint::FailNthConnect(const std::string& peer, int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  faults_[peer].connects.Add(peer, n, std::move(status), "connect");
}

void FaultInjectingEndpoint::DropPeer(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  dropped_.insert(peer);
}

void FaultInjectingEndpoint::DelaySends(const std::string& peer, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  faults_[peer].delay = delay;
}

int FaultInjectingEndpoint::sends_to(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = faults_.find(peer);
  return it == faults_.end() ? 0 : it->second.sends_done;
}

absl::Status FaultInjectingEndpoint::DroppedError(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  return dropped_.contains(peer) ? DroppedStatus(peer) : absl::OkStatus();
}

absl::Status FaultInjectingEndpoint::BeforeSend(const std::string& peer, const std::string& what,
                                                absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (dropped_.contains(peer)) return DroppedStatus(peer);
  PeerFaults& faults = faults_[peer];
  BATON_RETURN_IF_ERROR(faults.sends.Next());
  if (faults.delay > absl::ZeroDuration()) {
    const absl::Time until = absl::Now() + faults.delay;
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_; };
    mu_.AwaitWithDeadline(absl::Condition(&stop), std::min(until, deadline));
    if (until > deadline && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("send to peer ", peer, " (", what, ") delayed past its deadline"));
    }
  }
  return absl::OkStatus();
}

void FaultInjectingEndpoint::CountSent(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  ++faults_[peer].sends_done;
}

absl::Status FaultInjectingEndpoint::Send(const std::string& peer, const Tag& tag,
                                          ConstByteSpan data, absl::Time deadline) {
  BATON_RETURN_IF_ERROR(BeforeSend(peer, TagToString(tag), deadline));
  CountSent(peer);
  return ForwardingEndpoint::Send(peer, tag, data, deadline);
}

absl::Status FaultInjectingEndpoint::SendAll(const std::string& peer,
                                             std::span<const OutMessage> messages,
                                             absl::Time deadline) {
  if (messages.empty()) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckSendAll(peer, messages));
  BATON_RETURN_IF_ERROR(BeforeSend(peer, TagToString(messages.back().tag), deadline));
  CountSent(peer);
  return ForwardingEndpoint::SendAll(peer, messages, deadline);
}

std::unique_ptr<PostedSend> FaultInjectingEndpoint::PostSend(const std::string& peer,
                                                             const Tag& tag,
                                                             const RegionSlice& slice,
                                                             absl::Time deadline) {
  if (absl::Status fault = BeforeSend(peer, TagToString(tag), deadline); !fault.ok()) {
    return CompletedSend(std::move(fault));
  }
  CountSent(peer);
  return ForwardingEndpoint::PostSend(peer, tag, slice, deadline);
}

std::unique_ptr<PostedSend> FaultInjectingEndpoint::PostWrite(
    const std::string& peer, uint64_t comm, const RegionSlice& source, const RemoteRegion& target,
    size_t target_offset, std::optional<uint32_t> notify, absl::Time deadline) {
  const std::string what = absl::StrCat("a write for comm ", absl::Hex(comm, absl::kZeroPad8));
  if (absl::Status fault = BeforeSend(peer, what, deadline); !fault.ok()) {
    return CompletedSend(std::move(fault));
  }
  CountSent(peer);
  return ForwardingEndpoint::PostWrite(peer, comm, source, target, target_offset, notify, deadline);
}

// An exposure that fails with the drop's error once its peer is dropped, while it waits; it
// revokes the inner one first, so that nothing writes into the region once Wait returns.
class FaultInjectingEndpoint::DroppableExposure final : public ExposedRegion {
 public:
  DroppableExposure(const FaultInjectingEndpoint* endpoint, std::string peer,
                    std::unique_ptr<ExposedRegion> inner, absl::Time deadline)
      : endpoint_(endpoint),
        peer_(std::move(peer)),
        descriptor_(inner->descriptor()),
        inner_(std::move(inner)),
        deadline_(deadline) {}

  const RemoteRegion& descriptor() const override { return descriptor_; }
  absl::StatusOr<WriteNotice> Wait() override {
    while (!result_.has_value()) {
      if (inner_->Test() || absl::Now() >= deadline_) {
        result_ = inner_->Wait();
        break;
      }
      if (absl::Status dropped = endpoint_->DroppedError(peer_); !dropped.ok()) {
        inner_.reset();  // revoked, and nobody writes into the region any more
        result_ = std::move(dropped);
        break;
      }
      absl::SleepFor(kDropPollSlice);
    }
    return *result_;
  }
  bool Test() override {
    return result_.has_value() || inner_->Test() || !endpoint_->DroppedError(peer_).ok();
  }

 private:
  const FaultInjectingEndpoint* const endpoint_;
  const std::string peer_;
  const RemoteRegion descriptor_;
  std::unique_ptr<ExposedRegion> inner_;
  const absl::Time deadline_;
  std::optional<absl::StatusOr<WriteNotice>> result_;
};

std::unique_ptr<ExposedRegion> FaultInjectingEndpoint::ExposeRegion(const std::string& peer,
                                                                    uint64_t comm,
                                                                    const RegionSlice& slice,
                                                                    absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (dropped_.contains(peer)) return FailedExposure(DroppedStatus(peer));
    if (absl::Status fault = faults_[peer].exposes.Next(); !fault.ok()) {
      return FailedExposure(std::move(fault));
    }
  }
  return std::make_unique<DroppableExposure>(
      this, peer, ForwardingEndpoint::ExposeRegion(peer, comm, slice, deadline), deadline);
}

absl::StatusOr<std::string> FaultInjectingEndpoint::ConnectionData(const std::string& peer) {
  BATON_RETURN_IF_ERROR(DroppedError(peer));
  return ForwardingEndpoint::ConnectionData(peer);
}

absl::Status FaultInjectingEndpoint::Connect(const std::string& peer,
                                             std::string_view remote_data) {
  {
    absl::MutexLock lock(&mu_);
    if (dropped_.contains(peer)) return DroppedStatus(peer);
    BATON_RETURN_IF_ERROR(faults_[peer].connects.Next());
  }
  return ForwardingEndpoint::Connect(peer, remote_data);
}

std::unique_ptr<PostedRecv> FaultInjectingEndpoint::Droppable(const std::string& peer,
                                                              std::unique_ptr<PostedRecv> inner) {
  auto recv =
      std::make_unique<DroppableRecv>(this, peer, std::make_shared<DroppableRecv::Arrival>());
  recv->set_inner(std::move(inner));
  return recv;
}

std::unique_ptr<PostedRecv> FaultInjectingEndpoint::PostRecv(const std::string& peer,
                                                             const Tag& tag, ByteSpan data,
                                                             absl::Time deadline,
                                                             ArrivalCallback on_arrival) {
  if (absl::Status dropped = DroppedError(peer); !dropped.ok()) return FailedRecv(dropped);
  auto arrival = std::make_shared<DroppableRecv::Arrival>();
  auto recv = std::make_unique<DroppableRecv>(this, peer, arrival);
  recv->set_inner(ForwardingEndpoint::PostRecv(
      peer, tag, data, deadline, [arrival, on_arrival = std::move(on_arrival)]() mutable {
        if (on_arrival) std::move(on_arrival)();
        absl::MutexLock lock(&arrival->mu);
        arrival->arrived = true;
      }));
  return recv;
}

std::unique_ptr<PostedRecv> FaultInjectingEndpoint::PostConsume(const std::string& peer,
                                                                const Tag& tag, size_t length,
                                                                absl::Time deadline,
                                                                PieceConsumer consume) {
  if (absl::Status dropped = DroppedError(peer); !dropped.ok()) return FailedRecv(dropped);
  return Droppable(
      peer, ForwardingEndpoint::PostConsume(peer, tag, length, deadline, std::move(consume)));
}

std::unique_ptr<PostedRecv> FaultInjectingEndpoint::PostRecvRegion(const std::string& peer,
                                                                   const Tag& tag,
                                                                   const RegionSlice& slice,
                                                                   absl::Time deadline,
                                                                   ArrivalCallback on_arrival) {
  if (absl::Status dropped = DroppedError(peer); !dropped.ok()) return FailedRecv(dropped);
  return Droppable(
      peer, ForwardingEndpoint::PostRecvRegion(peer, tag, slice, deadline, std::move(on_arrival)));
}

absl::StatusOr<absl::Duration> FaultInjectingEndpoint::RoundTrip(const std::string& peer,
                                                                 absl::Time deadline) {
  BATON_RETURN_IF_ERROR(DroppedError(peer));
  return ForwardingEndpoint::RoundTrip(peer, deadline);
}

}  // namespace baton::transport::testing
