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

absl::StatusOr<Call> CallBuilder::Build(const Operation& op) const {
  OpSpec spec = Spec(op.collective, op.count, op.type);
  const void* send = op.send;
  void* recv = op.recv;
  switch (op.collective) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter:
      spec.op = op.op;
      break;
    case Collective::kReduce:
      spec.op = op.op;
      spec.root = op.root;
      break;
    case Collective::kAllGather:
    case Collective::kAllToAll:
      break;
    case Collective::kBroadcast:
    case Collective::kGather:
    case Collective::kScatter:
      spec.root = op.root;
      break;
    case Collective::kBarrier:
      spec = Spec(Collective::kBarrier, 0, DataType::kUint8);
      send = nullptr;
      recv = nullptr;
      break;
    case Collective::kAllToAllV:
      spec.count = 0;
      spec.send_counts.assign(op.send_counts.begin(), op.send_counts.end());
      spec.send_displs.assign(op.send_displs.begin(), op.send_displs.end());
      spec.recv_counts.assign(op.recv_counts.begin(), op.recv_counts.end());
      spec.recv_displs.assign(op.recv_displs.begin(), op.recv_displs.end());
      break;
    case Collective::kSend:
      spec.peer = op.peer;
      recv = nullptr;
      break;
    case Collective::kRecv:
      spec.peer = op.peer;
      send = nullptr;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown collective ", static_cast<int>(op.collective)));
  }
  if (absl::Status s = spec.Validate(world_size_, rank_); !s.ok()) return s;
  Call call;
  call.send_elements = spec.SendElements(world_size_, rank_);
  call.recv_elements = spec.RecvElements(world_size_, rank_);
  call.spec = std::move(spec);
  call.send = send;
  call.recv = recv;
  return call;
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
