#include "daemon/channel_server.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "common/spin.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {
namespace {

// A raw value is a member of its enumeration exactly when it has a name.
template <typename Enum, typename NameFn, typename ParseFn>
std::optional<Enum> FromRaw(uint32_t raw, NameFn name, ParseFn parse) {
  return parse(name(static_cast<Enum>(raw)));
}

// The daemon's default deadline when the client gives none, as for the gRPC path.
constexpr absl::Duration kDefaultTimeout = absl::Minutes(10);

}  // namespace

absl::StatusOr<CollectiveCall> ChannelServer::Decode(const channel::OpDescriptor& op,
                                                     const channel::VectorTail& vectors) {
  CollectiveCall call;
  std::optional<collective::Collective> kind = FromRaw<collective::Collective>(
      op.kind, collective::CollectiveName, collective::ParseCollective);
  if (!kind) return absl::InvalidArgumentError(absl::StrCat("unknown collective ", op.kind));
  call.spec.collective = *kind;
  std::optional<collective::DataType> type = FromRaw<collective::DataType>(
      op.data_type, collective::DataTypeName, collective::ParseDataType);
  if (!type) return absl::InvalidArgumentError(absl::StrCat("unknown data type ", op.data_type));
  call.spec.type = *type;
  std::optional<collective::ReduceOp> reduce = FromRaw<collective::ReduceOp>(
      op.reduce_op, collective::ReduceOpName, collective::ParseReduceOp);
  if (!reduce) return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", op.reduce_op));
  call.spec.op = *reduce;
  if (op.algorithm != 0) {
    call.spec.algorithm = FromRaw<collective::Algorithm>(
        op.algorithm - 1, collective::AlgorithmName, collective::ParseAlgorithm);
    if (!call.spec.algorithm) {
      return absl::InvalidArgumentError(absl::StrCat("unknown algorithm ", op.algorithm - 1));
    }
  }
  call.spec.root = op.root;
  call.spec.peer = op.peer;
  call.spec.count = op.count;
  if (call.spec.collective == collective::Collective::kAllToAllV) {
    // One read of the length: the client may scribble on the page while we copy.
    const uint32_t entries = vectors.entries;
    if (entries > channel::kMaxVectorRanks) {
      return absl::InvalidArgumentError(absl::StrCat("all_to_all_v with ", entries,
                                                     " counts on the submission channel (at most ",
                                                     channel::kMaxVectorRanks, ")"));
    }
    call.spec.send_counts.assign(vectors.send_counts, vectors.send_counts + entries);
    call.spec.send_displs.assign(vectors.send_displs, vectors.send_displs + entries);
    call.spec.recv_counts.assign(vectors.recv_counts, vectors.recv_counts + entries);
    call.spec.recv_displs.assign(vectors.recv_displs, vectors.recv_displs + entries);
  }
  call.send_buffer = op.send_buffer;
  call.send_offset = op.send_offset;
  call.recv_buffer = op.recv_buffer;
  call.recv_offset = op.recv_offset;
  call.deadline =
      absl::Now() + (op.timeout_ms > 0 ? absl::Milliseconds(op.timeout_ms) : kDefaultTimeout);
  return call;
}

absl::StatusOr<std::unique_ptr<ChannelServer>> ChannelServer::Open(const std::string& shm_name,
                                                                   uint64_t session_id,
                                                                   uint64_t comm_tag, int rank,
                                                                   Runner run,
                                                                   absl::Duration spin) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
      SharedMemory::Open(shm_name, channel::kChannelBytes);
  if (!memory.ok()) return memory.status();
  const auto* page = static_cast<const channel::Layout*>((*memory)->data());
  if (page->magic != channel::kMagic || page->version != channel::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", shm_name, "' is not a version ", channel::kVersion, " submission channel (magic ",
        absl::Hex(page->magic), ", version ", page->version, ")"));
  }
  return std::unique_ptr<ChannelServer>(
      new ChannelServer(std::move(*memory), session_id, comm_tag, rank, std::move(run), spin));
}

ChannelServer::ChannelServer(std::unique_ptr<SharedMemory> memory, uint64_t session_id,
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
    channel::Publish(page_->completed, seen, page_->client_sleeping);
  }
  // Whatever the client submits from now on fails at once instead of waiting for its deadline.
  page_->closed.store(1, std::memory_order_seq_cst);
  channel::Wake(page_->completed);
  spdlog::debug("submission channel of rank {} in communicator {:x} closed", rank_, comm_tag_);
}

}  // namespace baton::daemon
