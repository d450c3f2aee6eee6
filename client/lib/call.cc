#include "client/lib/call.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::core {
namespace {

using collective::Collective;
using collective::DataType;
using collective::ReduceOp;

Call Make(Collective kind, const void* send, void* recv, size_t count, size_t send_count,
          size_t recv_count, DataType type, bool reads_send, bool writes_recv) {
  Call call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.send_count = send_count;
  call.recv_count = recv_count;
  call.type = type;
  call.reads_send = reads_send;
  call.writes_recv = writes_recv;
  return call;
}

}  // namespace

absl::StatusOr<size_t> CallBuilder::Times(size_t count) const {
  if (count > SIZE_MAX / static_cast<size_t>(world_size_)) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
  }
  return count * static_cast<size_t>(world_size_);
}

absl::Status CallBuilder::CheckRoot(int root) const {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is out of range for world size ", world_size_));
  }
  return absl::OkStatus();
}

absl::Status CallBuilder::CheckPeer(int peer) const {
  if (peer < 0 || peer >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is out of range for world size ", world_size_));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> CallBuilder::Span(const std::vector<size_t>& counts,
                                         const std::vector<size_t>& displs,
                                         const char* what) const {
  const size_t world = static_cast<size_t>(world_size_);
  if (counts.size() != world || displs.size() != world) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "_counts has ", counts.size(), " entries and ", what, "_displs ",
                     displs.size(), "; both need one per rank (world size ", world_size_, ")"));
  }
  size_t span = 0;
  for (size_t j = 0; j < world; ++j) {
    if (counts[j] > SIZE_MAX - displs[j]) {
      return absl::InvalidArgumentError(absl::StrCat(what, "_displs[", j, "] + ", what, "_counts[",
                                                     j, "] overflows (", displs[j], " + ",
                                                     counts[j], ")"));
    }
    span = std::max(span, displs[j] + counts[j]);
  }
  return span;
}

absl::StatusOr<Call> CallBuilder::AllReduce(const void* send, void* recv, size_t count,
                                            DataType type, ReduceOp op) const {
  Call call = Make(Collective::kAllReduce, send, recv, count, count, count, type, true, true);
  call.reduce_op = op;
  return call;
}

absl::StatusOr<Call> CallBuilder::ReduceScatter(const void* send, void* recv, size_t recv_count,
                                                DataType type, ReduceOp op) const {
  absl::StatusOr<size_t> send_count = Times(recv_count);
  if (!send_count.ok()) return send_count.status();
  Call call = Make(Collective::kReduceScatter, send, recv, recv_count, *send_count, recv_count,
                   type, true, true);
  call.reduce_op = op;
  return call;
}

absl::StatusOr<Call> CallBuilder::AllGather(const void* send, void* recv, size_t send_count,
                                            DataType type) const {
  absl::StatusOr<size_t> recv_count = Times(send_count);
  if (!recv_count.ok()) return recv_count.status();
  return Make(Collective::kAllGather, send, recv, send_count, send_count, *recv_count, type, true,
              true);
}

absl::StatusOr<Call> CallBuilder::Broadcast(const void* send, void* recv, size_t count,
                                            DataType type, int root) const {
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  const bool is_root = root == rank_;
  Call call = Make(Collective::kBroadcast, is_root ? send : recv, recv, count, count, count, type,
                   is_root, true);
  call.root = root;
  return call;
}

absl::StatusOr<Call> CallBuilder::Reduce(const void* send, void* recv, size_t count, DataType type,
                                         ReduceOp op, int root) const {
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  const bool is_root = root == rank_;
  Call call = Make(Collective::kReduce, send, is_root ? recv : const_cast<void*>(send), count,
                   count, count, type, true, is_root);
  call.reduce_op = op;
  call.root = root;
  return call;
}

absl::StatusOr<Call> CallBuilder::AllToAll(const void* send, void* recv, size_t count,
                                           DataType type) const {
  absl::StatusOr<size_t> total = Times(count);
  if (!total.ok()) return total.status();
  return Make(Collective::kAllToAll, send, recv, count, *total, *total, type, true, true);
}

absl::StatusOr<Call> CallBuilder::Barrier() const {
  return Make(Collective::kBarrier, nullptr, nullptr, 0, 0, 0, DataType::kUint8, false, false);
}

absl::StatusOr<Call> CallBuilder::Gather(const void* send, void* recv, size_t count, DataType type,
                                         int root) const {
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  absl::StatusOr<size_t> total = Times(count);
  if (!total.ok()) return total.status();
  const bool is_root = root == rank_;
  Call call = Make(Collective::kGather, send, is_root ? recv : nullptr, count, count,
                   is_root ? *total : 0, type, true, is_root);
  call.root = root;
  return call;
}

absl::StatusOr<Call> CallBuilder::Scatter(const void* send, void* recv, size_t count, DataType type,
                                          int root) const {
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  absl::StatusOr<size_t> total = Times(count);
  if (!total.ok()) return total.status();
  const bool is_root = root == rank_;
  Call call = Make(Collective::kScatter, is_root ? send : nullptr, recv, count,
                   is_root ? *total : 0, count, type, is_root, true);
  call.root = root;
  return call;
}

absl::StatusOr<Call> CallBuilder::AllToAllV(const void* send,
                                            const std::vector<size_t>& send_counts,
                                            const std::vector<size_t>& send_displs, void* recv,
                                            const std::vector<size_t>& recv_counts,
                                            const std::vector<size_t>& recv_displs,
                                            DataType type) const {
  absl::StatusOr<size_t> send_span = Span(send_counts, send_displs, "send");
  if (!send_span.ok()) return send_span.status();
  absl::StatusOr<size_t> recv_span = Span(recv_counts, recv_displs, "recv");
  if (!recv_span.ok()) return recv_span.status();
  // Two blocks written to one place would leave either peer's data there.
  std::vector<std::pair<size_t, size_t>> blocks;  // (displacement, rank) of non-empty blocks
  for (size_t i = 0; i < recv_counts.size(); ++i) {
    if (recv_counts[i] > 0) blocks.emplace_back(recv_displs[i], i);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t b = 1; b < blocks.size(); ++b) {
    const size_t before = blocks[b - 1].second;
    if (recv_displs[before] + recv_counts[before] > blocks[b].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("recv blocks of ranks ", before, " and ", blocks[b].second, " overlap"));
    }
  }
  Call call = Make(Collective::kAllToAllV, send, recv, 0, *send_span, *recv_span, type, true, true);
  call.send_counts.assign(send_counts.begin(), send_counts.end());
  call.send_displs.assign(send_displs.begin(), send_displs.end());
  call.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  call.recv_displs.assign(recv_displs.begin(), recv_displs.end());
  return call;
}

absl::StatusOr<Call> CallBuilder::Send(const void* send, size_t count, DataType type,
                                       int peer) const {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  Call call = Make(Collective::kSend, send, nullptr, count, count, 0, type, true, false);
  call.peer = peer;
  return call;
}

absl::StatusOr<Call> CallBuilder::Recv(void* recv, size_t count, DataType type, int peer) const {
  if (absl::Status s = CheckPeer(peer); !s.ok()) return s;
  Call call = Make(Collective::kRecv, nullptr, recv, count, 0, count, type, false, true);
  call.peer = peer;
  return call;
}

absl::StatusOr<CallBytes> CheckBuffers(const Call& call) {
  const size_t element = collective::DataTypeSize(call.type);
  if (element == 0) return absl::InvalidArgumentError("unknown data type");
  if (std::max(call.send_count, call.recv_count) > SIZE_MAX / element) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", std::max(call.send_count, call.recv_count), " of ",
                     collective::DataTypeName(call.type), " overflows"));
  }
  CallBytes bytes;
  bytes.send = call.reads_send ? call.send_count * element : 0;
  bytes.recv = call.writes_recv ? call.recv_count * element : 0;
  if (bytes.send > 0 && call.send == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("send is null but ",
                                                   collective::CollectiveName(call.kind), " reads ",
                                                   bytes.send, " bytes from it"));
  }
  if (bytes.recv > 0 && call.recv == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("recv is null but ",
                                                   collective::CollectiveName(call.kind),
                                                   " writes ", bytes.recv, " bytes to it"));
  }
  return bytes;
}

}  // namespace baton::core
