#include "daemon/channel_server.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "common/session_protocol.h"
#include "common/spin.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"
#include "wire/op_codec.h"

namespace baton::daemon {
namespace {

// The daemon's default deadline when the client gives none, as for the gRPC path.
constexpr absl::Duration kDefaultTimeout = absl::Minutes(10);

}  // namespace

absl::StatusOr<CollectiveCall> ChannelServer::Decode(const channel::OpDescriptor& op,
                                                     const channel::VectorTail& vectors) {
  CollectiveCall call;
  absl::StatusOr<collective::OpSpec> spec = wire::FromChannel(op, vectors);
  if (!spec.ok()) return spec.status();
  call.spec = *std::move(spec);
  call.send_buffer = op.send_buffer;
  call.send_offset = op.send_offset;
  call.recv_buffer = op.recv_buffer;
  call.recv_offset = op.recv_offset;
  call.deadline =
      absl::Now() + (op.timeout_ms > 0 ? absl::Milliseconds(op.timeout_ms) : kDefaultTimeout);
  if (op.stream_value != 0) {
    if (op.event_slot >= session::kMaxEvents) {
      return absl::InvalidArgumentError(
          absl::StrCat("event slot ", op.event_slot, " is out of range"));
    }
    call.stream = StreamOrder{op.event_set, op.event_slot};
  }
  return call;
}

absl::StatusOr<std::unique_ptr<ChannelServer>> ChannelServer::Open(
    std::shared_ptr<SharedMemory> memory, uint64_t session_id, uint64_t comm_tag, int rank,
    Runner run, absl::Duration spin) {
  if (memory == nullptr || memory->size() < channel::kChannelBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a submission channel needs a buffer of at least ", channel::kChannelBytes,
                     " bytes, not ", memory == nullptr ? 0 : memory->size()));
  }
  const auto* page = static_cast<const channel::Layout*>(memory->data());
  if (page->magic != channel::kMagic || page->version != channel::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the buffer is not a version ", channel::kVersion, " submission channel (magic ",
        absl::Hex(page->magic), ", version ", page->version, ")"));
  }
  return std::unique_ptr<ChannelServer>(
      new ChannelServer(std::move(memory), session_id, comm_tag, rank, std::move(run), spin));
}

ChannelServer::ChannelServer(std::shared_ptr<SharedMemory> memory, uint64_t session_id,
                             uint64_t comm_tag, int rank, Runner run, absl::Duration spin)
    : memory_(std::move(memory)),
      page_(std::launder(static_cast<channel::Layout*>(memory_->data()))),
      session_id_(session_id),
      comm_tag_(comm_tag),
      rank_(rank),
      run_(std::move(run)),
      spin_(spin) {
  // Read before the client learns that the channel is served: its first submission may come
  // before the thread runs.
  const uint32_t seen = page_->submitted.load(std::memory_order_acquire);
  thread_ = std::thread([this, seen] {
    SetThreadName("baton-channel");
    Serve(seen);
  });
}

ChannelServer::~ChannelServer() {
  stopping_.store(true);
  channel::Wake(page_->submitted);
  thread_.join();
}

void ChannelServer::Serve(uint32_t seen) {
  auto keep_waiting = [this] {
    return stopping_.load() ? absl::CancelledError("channel closed") : absl::OkStatus();
  };
  AdaptiveSpin spin(spin_);
  while (true) {
    const absl::Time idle_since = absl::Now();
    absl::Status waited = channel::WaitForChange(page_->submitted, seen, page_->daemon_sleeping,
                                                 spin.next(), absl::InfiniteFuture(), keep_waiting);
    if (!waited.ok() || stopping_.load()) break;
    spin.Record(absl::Now() - idle_since);
    seen = page_->submitted.load(std::memory_order_acquire);
    const channel::OpDescriptor op = page_->op;  // one copy: the client may scribble on the page
    absl::StatusOr<CollectiveCall> call = Decode(op, page_->vectors);
    absl::StatusOr<std::string> algorithm;
    if (call.ok()) {
      call->session_id = session_id_;
      call->comm_tag = comm_tag_;
      call->rank = rank_;
      algorithm = run_(*call);
    } else {
      algorithm = call.status();
    }
    channel::WriteResult(page_->result, algorithm.status(), algorithm.ok() ? *algorithm : "");
    // A rank's stream moves on at once after an operation that succeeded. After a failure the
    // client releases it once it has recorded the error (submission_channel.h), so the error is
    // visible to whoever synchronises the stream.
    if (op.stream_value != 0 && algorithm.ok()) {
      channel::ReleaseStream(page_->stream_done, op.stream_value);
    }
    channel::Publish(page_->completed, seen, page_->client_sleeping);
  }
  // Whatever the client submits from now on fails at once instead of waiting for its deadline.
  page_->closed.store(1, std::memory_order_seq_cst);
  channel::Wake(page_->completed);
  spdlog::debug("submission channel of rank {} in communicator {:x} closed", rank_, comm_tag_);
}

}  // namespace baton::daemon
