#include "wire/op_codec.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace baton::wire {
namespace {

using collective::Collective;
using collective::OpSpec;

// A raw value is a member of its enumeration exactly when it has a name.
template <typename Enum, typename NameFn, typename ParseFn>
std::optional<Enum> FromRaw(uint32_t raw, NameFn name, ParseFn parse) {
  return parse(name(static_cast<Enum>(raw)));
}

struct OpName {
  Collective collective;
  v1::CollectiveOp proto;
};
constexpr OpName kOpNames[] = {
    {Collective::kAllReduce, v1::COLLECTIVE_OP_ALL_REDUCE},
    {Collective::kReduceScatter, v1::COLLECTIVE_OP_REDUCE_SCATTER},
    {Collective::kAllGather, v1::COLLECTIVE_OP_ALL_GATHER},
    {Collective::kBroadcast, v1::COLLECTIVE_OP_BROADCAST},
    {Collective::kReduce, v1::COLLECTIVE_OP_REDUCE},
    {Collective::kAllToAll, v1::COLLECTIVE_OP_ALL_TO_ALL},
    {Collective::kBarrier, v1::COLLECTIVE_OP_BARRIER},
    {Collective::kGather, v1::COLLECTIVE_OP_GATHER},
    {Collective::kScatter, v1::COLLECTIVE_OP_SCATTER},
    {Collective::kAllToAllV, v1::COLLECTIVE_OP_ALL_TO_ALL_V},
    {Collective::kSend, v1::COLLECTIVE_OP_SEND},
    {Collective::kRecv, v1::COLLECTIVE_OP_RECV},
};

}  // namespace

v1::CollectiveOp ProtoOp(Collective collective) {
  for (const OpName& name : kOpNames) {
    if (name.collective == collective) return name.proto;
  }
  return v1::COLLECTIVE_OP_UNSPECIFIED;
}

std::optional<Collective> FromProtoOp(v1::CollectiveOp op) {
  for (const OpName& name : kOpNames) {
    if (name.proto == op) return name.collective;
  }
  return std::nullopt;
}

void ToProto(const OpSpec& spec, v1::CollectiveRequest* request) {
  request->set_op(ProtoOp(spec.collective));
  request->set_data_type(std::string{collective::DataTypeName(spec.type)});
  request->set_reduce_op(std::string{collective::ReduceOpName(spec.op)});
  request->set_count(spec.count);
  request->set_root(spec.root);
  request->set_peer(spec.peer);
  request->mutable_send_counts()->Assign(spec.send_counts.begin(), spec.send_counts.end());
  request->mutable_send_displs()->Assign(spec.send_displs.begin(), spec.send_displs.end());
  request->mutable_recv_counts()->Assign(spec.recv_counts.begin(), spec.recv_counts.end());
  request->mutable_recv_displs()->Assign(spec.recv_displs.begin(), spec.recv_displs.end());
  if (spec.algorithm) {
    request->set_algorithm(std::string{collective::AlgorithmName(*spec.algorithm)});
  } else {
    request->clear_algorithm();
  }
  request->set_node_part(spec.node_part);
}

absl::StatusOr<OpSpec> FromProto(const v1::CollectiveRequest& request) {
  OpSpec spec;
  const std::optional<Collective> collective = FromProtoOp(request.op());
  if (!collective) {
    return absl::InvalidArgumentError(absl::StrCat("unknown collective ", request.op()));
  }
  spec.collective = *collective;
  const std::optional<collective::DataType> type = collective::ParseDataType(request.data_type());
  if (!type) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data type '", request.data_type(), "'"));
  }
  spec.type = *type;
  const std::optional<collective::ReduceOp> op = collective::ParseReduceOp(request.reduce_op());
  if (!op) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op '", request.reduce_op(), "'"));
  }
  spec.op = *op;
  if (!request.algorithm().empty()) {
    spec.algorithm = collective::ParseAlgorithm(request.algorithm());
    if (!spec.algorithm) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown algorithm '", request.algorithm(), "'"));
    }
  }
  spec.count = request.count();
  spec.root = request.root();
  spec.peer = request.peer();
  spec.send_counts.assign(request.send_counts().begin(), request.send_counts().end());
  spec.send_displs.assign(request.send_displs().begin(), request.send_displs().end());
  spec.recv_counts.assign(request.recv_counts().begin(), request.recv_counts().end());
  spec.recv_displs.assign(request.recv_displs().begin(), request.recv_displs().end());
  spec.node_part = request.node_part();
  return spec;
}

bool FitsChannel(const OpSpec& spec) {
  if (spec.collective != Collective::kAllToAllV) return true;
  const size_t entries = spec.send_counts.size();
  return entries <= channel::kMaxVectorRanks && spec.send_displs.size() == entries &&
         spec.recv_counts.size() == entries && spec.recv_displs.size() == entries;
}

absl::Status ToChannel(const OpSpec& spec, channel::OpDescriptor* op, channel::VectorTail* tail) {
  if (!FitsChannel(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all_v with ", spec.send_counts.size(),
                     " counts does not fit the submission channel (at most ",
                     channel::kMaxVectorRanks, " of each, all four arrays alike)"));
  }
  op->kind = static_cast<uint32_t>(spec.collective);
  op->data_type = static_cast<uint32_t>(spec.type);
  op->reduce_op = static_cast<uint32_t>(spec.op);
  op->root = spec.root;
  op->peer = spec.peer;
  op->algorithm = spec.algorithm ? 1 + static_cast<uint32_t>(*spec.algorithm) : 0;
  op->count = spec.count;
  op->node_part = spec.node_part ? 1 : 0;
  if (spec.collective == Collective::kAllToAllV) {
    const size_t entries = spec.send_counts.size();
    tail->entries = static_cast<uint32_t>(entries);
    std::copy_n(spec.send_counts.begin(), entries, tail->send_counts);
    std::copy_n(spec.send_displs.begin(), entries, tail->send_displs);
    std::copy_n(spec.recv_counts.begin(), entries, tail->recv_counts);
    std::copy_n(spec.recv_displs.begin(), entries, tail->recv_displs);
  }
  return absl::OkStatus();
}

absl::StatusOr<OpSpec> FromChannel(const channel::OpDescriptor& op,
                                   const channel::VectorTail& tail) {
  OpSpec spec;
  const std::optional<Collective> kind =
      FromRaw<Collective>(op.kind, collective::CollectiveName, collective::ParseCollective);
  if (!kind) return absl::InvalidArgumentError(absl::StrCat("unknown collective ", op.kind));
  spec.collective = *kind;
  const std::optional<collective::DataType> type = FromRaw<collective::DataType>(
      op.data_type, collective::DataTypeName, collective::ParseDataType);
  if (!type) return absl::InvalidArgumentError(absl::StrCat("unknown data type ", op.data_type));
  spec.type = *type;
  const std::optional<collective::ReduceOp> reduce = FromRaw<collective::ReduceOp>(
      op.reduce_op, collective::ReduceOpName, collective::ParseReduceOp);
  if (!reduce) return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", op.reduce_op));
  spec.op = *reduce;
  if (op.algorithm != 0) {
    spec.algorithm = FromRaw<collective::Algorithm>(op.algorithm - 1, collective::AlgorithmName,
                                                    collective::ParseAlgorithm);
    if (!spec.algorithm) {
      return absl::InvalidArgumentError(absl::StrCat("unknown algorithm ", op.algorithm - 1));
    }
  }
  spec.root = op.root;
  spec.peer = op.peer;
  spec.count = op.count;
  spec.node_part = op.node_part != 0;
  if (spec.collective == Collective::kAllToAllV) {
    const uint32_t entries = tail.entries;  // read once
    if (entries > channel::kMaxVectorRanks) {
      return absl::InvalidArgumentError(absl::StrCat("all_to_all_v with ", entries,
                                                     " counts on the submission channel (at most ",
                                                     channel::kMaxVectorRanks, ")"));
    }
    spec.send_counts.assign(tail.send_counts, tail.send_counts + entries);
    spec.send_displs.assign(tail.send_displs, tail.send_displs + entries);
    spec.recv_counts.assign(tail.recv_counts, tail.recv_counts + entries);
    spec.recv_displs.assign(tail.recv_displs, tail.recv_displs + entries);
  }
  return spec;
}

}  // namespace baton::wire
