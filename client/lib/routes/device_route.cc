#include "client/lib/routes/device_route.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/submission_channel.h"
#include "wire/op_codec.h"

namespace baton::core {
namespace {

// Which rank of which communicator has stream-ordered calls pending on each stream of this
// process. Two ranks of one communicator cannot share a stream: the first one's call makes the
// stream wait for the daemon, the daemon waits for every rank's event, and the second one's
// event is recorded behind that wait, so neither ever moves (NCCL has the same rule; it asks
// for a group). Such a call is refused instead of hanging until its deadline.
class StreamClaims {
 public:
  static StreamClaims& Get() {
    static StreamClaims* const claims = new StreamClaims;  // used until the process ends
    return *claims;
  }
  // Claims `stream` for one more call of `rank` of communicator `comm`; InvalidArgument while
  // another rank of `comm` has calls pending on it.
  absl::Status Claim(void* stream, uint64_t comm, int rank) {
    absl::MutexLock lock(&mu_);
    Entry& entry = claims_[{stream, comm}];
    if (entry.pending > 0 && entry.rank != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " made a stream-ordered call on the stream that rank ", entry.rank,
          " of the same communicator has calls pending on; each rank needs its own stream"));
    }
    entry.rank = rank;
    ++entry.pending;
    return absl::OkStatus();
  }
  void Release(void* stream, uint64_t comm) {
    absl::MutexLock lock(&mu_);
    auto it = claims_.find({stream, comm});
    if (it != claims_.end() && --it->second.pending <= 0) claims_.erase(it);
  }

 private:
  struct Entry {
    int rank = -1;
    int pending = 0;
  };
  absl::Mutex mu_;
  std::map<std::pair<void*, uint64_t>, Entry> claims_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::string> DeviceRoute::Run(const Call& call, size_t send_bytes, size_t recv_bytes,
                                             const CallOptions& options) {
  Session& session = link_.session();
  std::optional<v1::BufferRef> send, recv;
  if (send_bytes > 0) {
    BATON_ASSIGN_OR_RETURN(send, session.FindDevice(call.send, send_bytes));
  }
  if (recv_bytes > 0) {
    BATON_ASSIGN_OR_RETURN(recv, session.FindDevice(call.recv, recv_bytes));
  }
  return link_.Run(call, send, recv, options);
}

absl::StatusOr<std::shared_ptr<PendingRequest>> DeviceRoute::Prepare(Call& call,
                                                                     const CallOptions& options) {
  if (InGroup()) {
    return absl::UnimplementedError("stream-ordered calls cannot be queued in a group yet");
  }
  ChannelClient* channel = link_.channel();
  if (channel == nullptr) {
    return absl::FailedPreconditionError(
        "stream-ordered calls need the submission channel (BATON_SUBMIT=grpc turns it off)");
  }
  if (!wire::FitsChannel(call.spec)) {
    return absl::UnimplementedError(absl::StrCat("stream-ordered all_to_all_v takes at most ",
                                                 channel::kMaxVectorRanks, " ranks"));
  }
  BATON_ASSIGN_OR_RETURN(const CallBytes bytes, CheckBuffers(call));
  BATON_ASSIGN_OR_RETURN(device::Device * device, ClientDevice());
  if ((bytes.send > 0 && !device->IsDeviceMemory(call.send, bytes.send)) ||
      (bytes.recv > 0 && !device->IsDeviceMemory(call.recv, bytes.recv))) {
    return absl::InvalidArgumentError(
        "a stream-ordered call takes device memory: send or recv is host memory (or runs past "
        "its allocation)");
  }
  uint32_t value = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::FailedPreconditionError("communicator was destroyed");
    if (!async_error_.ok()) return async_error_;
    if (streams_ == nullptr) {
      // The first stream-ordered call only. Later ones never take the operation lock: an
      // operation holds it until it finishes, and a stream-ordered one finishes only when its
      // stream reaches it, which may need this call to return first.
      absl::MutexLock op_lock(op_mu_);
      BATON_ASSIGN_OR_RETURN(streams_, channel->EnableStreams(device));
      done_ = &channel->stream_done();
    }
    value = ++issued_;
    if (value == 0) value = ++issued_;  // 0 means "not stream-ordered"
    const uint32_t slot = value % ChannelClient::kEvents;
    // The slot's event is recorded again only after the daemon has waited for its last use:
    // the call kEvents before this one has finished.
    const uint32_t reusable = value - ChannelClient::kEvents;
    auto slot_free = [this, reusable]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return static_cast<int32_t>(finished_ - reusable) >= 0;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&slot_free), options.timeout)) {
      --issued_;
      return absl::DeadlineExceededError(
          absl::StrCat(ChannelClient::kEvents,
                       " stream-ordered calls are in flight and the oldest did not finish "
                       "before the deadline"));
    }
    absl::Status recorded = StreamClaims::Get().Claim(options.stream, comm_tag_, rank_);
    if (!recorded.ok()) {
      --issued_;
      return recorded;
    }
    recorded = streams_->events[slot]->Record(options.stream);
    if (recorded.ok()) recorded = device->WaitValue(options.stream, done_, value);
    if (!recorded.ok()) {
      // Nothing waits for this value: the next call may use it.
      StreamClaims::Get().Release(options.stream, comm_tag_);
      --issued_;
      return recorded;
    }
    call.stream_value = value;
    call.event_slot = slot;
  }
  auto request = std::make_shared<PendingRequest>();
  request->OnComplete([this, value, stream = options.stream](const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && async_error_.ok()) async_error_ = status;
    }
    // After the error is recorded: a stream synchronised past this call sees it.
    channel::ReleaseStream(*done_, value);
    StreamClaims::Get().Release(stream, comm_tag_);
    absl::MutexLock lock(&mu_);
    finished_ = value;
  });
  return request;
}

absl::Status DeviceRoute::AsyncError() const {
  absl::MutexLock lock(&mu_);
  return async_error_;
}

void DeviceRoute::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace baton::core
