#include "client/lib/call.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::core {
namespace {

using collective::Collective;
using collective::DataType;
using collective::OpSpec;
using collective::ReduceOp;

OpSpec Spec(Collective collective, uint64_t count, DataType type) {
  OpSpec spec;
  spec.collective = collective;
  spec.count = count;
  spec.type = type;
  return spec;
}

}  // namespace

absl::StatusOr<Call> CallBuilder::Finish(OpSpec spec, const void* send, void* recv) const {
  if (absl::Status s = spec.Validate(world_size_, rank_); !s.ok()) return s;
  Call call;
  call.send_elements = spec.SendElements(world_size_, rank_);
  call.recv_elements = spec.RecvElements(world_size_, rank_);
  call.spec = std::move(spec);
  call.send = send;
  call.recv = recv;
  return call;
}

absl::StatusOr<Call> CallBuilder::AllReduce(const void* send, void* recv, size_t count,
                                            DataType type, ReduceOp op) const {
  OpSpec spec = Spec(Collective::kAllReduce, count, type);
  spec.op = op;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::ReduceScatter(const void* send, void* recv, size_t recv_count,
                                                DataType type, ReduceOp op) const {
  OpSpec spec = Spec(Collective::kReduceScatter, recv_count, type);
  spec.op = op;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::AllGather(const void* send, void* recv, size_t send_count,
                                            DataType type) const {
  return Finish(Spec(Collective::kAllGather, send_count, type), send, recv);
}

absl::StatusOr<Call> CallBuilder::Broadcast(const void* send, void* recv, size_t count,
                                            DataType type, int root) const {
  OpSpec spec = Spec(Collective::kBroadcast, count, type);
  spec.root = root;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::Reduce(const void* send, void* recv, size_t count, DataType type,
                                         ReduceOp op, int root) const {
  OpSpec spec = Spec(Collective::kReduce, count, type);
  spec.op = op;
  spec.root = root;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::AllToAll(const void* send, void* recv, size_t count,
                                           DataType type) const {
  return Finish(Spec(Collective::kAllToAll, count, type), send, recv);
}

absl::StatusOr<Call> CallBuilder::Barrier() const {
  return Finish(Spec(Collective::kBarrier, 0, DataType::kUint8), nullptr, nullptr);
}

absl::StatusOr<Call> CallBuilder::Gather(const void* send, void* recv, size_t count, DataType type,
                                         int root) const {
  OpSpec spec = Spec(Collective::kGather, count, type);
  spec.root = root;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::Scatter(const void* send, void* recv, size_t count, DataType type,
                                          int root) const {
  OpSpec spec = Spec(Collective::kScatter, count, type);
  spec.root = root;
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::AllToAllV(const void* send,
                                            const std::vector<size_t>& send_counts,
                                            const std::vector<size_t>& send_displs, void* recv,
                                            const std::vector<size_t>& recv_counts,
                                            const std::vector<size_t>& recv_displs,
                                            DataType type) const {
  OpSpec spec = Spec(Collective::kAllToAllV, 0, type);
  spec.send_counts.assign(send_counts.begin(), send_counts.end());
  spec.send_displs.assign(send_displs.begin(), send_displs.end());
  spec.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  spec.recv_displs.assign(recv_displs.begin(), recv_displs.end());
  return Finish(std::move(spec), send, recv);
}

absl::StatusOr<Call> CallBuilder::Send(const void* send, size_t count, DataType type,
                                       int peer) const {
  OpSpec spec = Spec(Collective::kSend, count, type);
  spec.peer = peer;
  return Finish(std::move(spec), send, nullptr);
}

absl::StatusOr<Call> CallBuilder::Recv(void* recv, size_t count, DataType type, int peer) const {
  OpSpec spec = Spec(Collective::kRecv, count, type);
  spec.peer = peer;
  return Finish(std::move(spec), nullptr, recv);
}

absl::StatusOr<CallBytes> CheckBuffers(const Call& call) {
  const size_t element = collective::DataTypeSize(call.spec.type);
  if (element == 0) return absl::InvalidArgumentError("unknown data type");
  const uint64_t most = std::max(call.send_elements, call.recv_elements);
  if (most > SIZE_MAX / element) {
    return absl::InvalidArgumentError(absl::StrCat(
        "count ", most, " of ", collective::DataTypeName(call.spec.type), " overflows"));
  }
  CallBytes bytes;
  bytes.send = call.send_elements * element;
  bytes.recv = call.recv_elements * element;
  const auto name = collective::CollectiveName(call.spec.collective);
  if (bytes.send > 0 && call.send == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("send is null but ", name, " reads ", bytes.send, " bytes from it"));
  }
  if (bytes.recv > 0 && call.recv == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("recv is null but ", name, " writes ", bytes.recv, " bytes to it"));
  }
  return bytes;
}

}  // namespace baton::core
