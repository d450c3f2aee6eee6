// The operations of libbaton's C API: baton_submit, the one way an operation reaches the core
// (core::Communicator::Submit), and the named calls of <baton/baton.h>, each baton_submit with
// its arguments (blocking) or with a request (the _async calls).

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "baton/baton.h"
#include "client/lib/c_api_internal.h"
#include "client/lib/client_core.h"
#include "common/status_macros.h"

namespace {

namespace core = baton::core;
namespace collective = baton::collective;
using baton::c_api::CompletedRequest;
using baton::c_api::Finish;
using baton::c_api::Invalid;
using baton::c_api::kCollectives;
using baton::c_api::kDataTypes;
using baton::c_api::kReduceOps;
using baton::c_api::OptionsOf;
using baton::c_api::Raw;

// all_to_all_v's four arrays of `entries` counts, as the core's vectors.
struct VectorCounts {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};

absl::StatusOr<VectorCounts> CountsOf(const size_t* send_counts, const size_t* send_displs,
                                      const size_t* recv_counts, const size_t* recv_displs,
                                      size_t entries, int world_size) {
  if (entries > 0 && (send_counts == nullptr || send_displs == nullptr || recv_counts == nullptr ||
                      recv_displs == nullptr)) {
    return absl::InvalidArgumentError(
        "send_counts, send_displs, recv_counts and recv_displs must not be null");
  }
  // The arrays are read only once their length is known to be the world size: a longer claim
  // would read past the caller's arrays.
  if (entries != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all_v got ", entries,
                     " entries per array; they need one per rank (world size ", world_size, ")"));
  }
  auto copy = [entries](const size_t* values) {
    return entries == 0 ? std::vector<size_t>() : std::vector<size_t>(values, values + entries);
  };
  return VectorCounts{copy(send_counts), copy(send_displs), copy(recv_counts), copy(recv_displs)};
}

// The core's operation of `op` (whose collective is known): its type and reduce op checked, the
// all_to_all_v arrays copied. InvalidArgument saying which field is wrong.
absl::StatusOr<core::Operation> OperationOf(const baton_op_t& op, int world_size) {
  core::Operation operation;
  // The enum fields are read as the ints the caller stored (Raw): any int may be there.
  const int kind = Raw(op.collective);
  operation.collective = static_cast<collective::Collective>(kind);
  // A barrier has no data; its type is not the caller's to get right.
  const int type = kind == BATON_BARRIER ? BATON_UINT8 : Raw(op.type);
  if (type < 0 || type >= kDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown data type ", type));
  }
  const bool reduces =
      kind == BATON_ALL_REDUCE || kind == BATON_REDUCE_SCATTER || kind == BATON_REDUCE;
  const int reduce = reduces ? Raw(op.op) : BATON_SUM;
  if (reduce < 0 || reduce >= kReduceOps) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", reduce));
  }
  operation.send = op.send;
  operation.recv = op.recv;
  operation.count = op.count;
  operation.type = static_cast<collective::DataType>(type);
  operation.op = static_cast<collective::ReduceOp>(reduce);
  operation.root = op.root;
  operation.peer = op.peer;
  if (kind == BATON_ALL_TO_ALL_V) {
    BATON_ASSIGN_OR_RETURN(VectorCounts v, CountsOf(op.send_counts, op.send_displs, op.recv_counts,
                                                    op.recv_displs, op.entries, world_size));
    operation.send_counts = std::move(v.send_counts);
    operation.send_displs = std::move(v.send_displs);
    operation.recv_counts = std::move(v.recv_counts);
    operation.recv_displs = std::move(v.recv_displs);
  }
  return operation;
}

// What the named calls fill in.
baton_op_t Op(baton_collective_t collective, const void* send, void* recv, size_t count,
              baton_dtype_t type, baton_reduce_op_t reduce = BATON_SUM) {
  baton_op_t op;
  baton_op_init(&op);
  op.collective = collective;
  op.send = send;
  op.recv = recv;
  op.count = count;
  // The caller's type and op may hold any int (Raw): copied as bytes, never loaded as enums.
  std::memcpy(&op.type, &type, sizeof(op.type));
  std::memcpy(&op.op, &reduce, sizeof(op.op));
  return op;
}
baton_op_t Rooted(baton_collective_t collective, const void* send, void* recv, size_t count,
                  baton_dtype_t type, int root) {
  baton_op_t op = Op(collective, send, recv, count, type);
  op.root = root;
  return op;
}
baton_op_t Vector(const void* send, const size_t* send_counts, const size_t* send_displs,
                  void* recv, const size_t* recv_counts, const size_t* recv_displs, size_t entries,
                  baton_dtype_t type) {
  baton_op_t op = Op(BATON_ALL_TO_ALL_V, send, recv, 0, type);
  op.send_counts = send_counts;
  op.send_displs = send_displs;
  op.recv_counts = recv_counts;
  op.recv_displs = recv_displs;
  op.entries = entries;
  return op;
}

// An _async call: baton_submit with the request it must have.
baton_code_t SubmitAsync(baton_comm_t* comm, const baton_op_t& op,
                         const baton_call_options_t* options, baton_request_t** request) {
  if (request == nullptr) return Invalid("request is null");
  return baton_submit(comm, &op, options, request);
}

}  // namespace

extern "C" {

void baton_op_init(baton_op_t* op) {
  if (op == nullptr) return;
  *op = baton_op_t{};
  op->struct_size = sizeof(baton_op_t);
  op->collective = BATON_ALL_REDUCE;
  op->type = BATON_FLOAT32;
  op->op = BATON_SUM;
}

baton_code_t baton_submit(baton_comm_t* comm, const baton_op_t* op,
                          const baton_call_options_t* options, baton_request_t** request) {
  if (request != nullptr) *request = nullptr;
  if (comm == nullptr) return Invalid("communicator is null");
  if (op == nullptr) return Invalid("op is null");
  if (op->struct_size < sizeof(baton_op_t)) {
    return Invalid(absl::StrCat("op->struct_size is ", op->struct_size, ", not at least ",
                                sizeof(baton_op_t), " (set it with baton_op_init)"));
  }
  const int kind = Raw(op->collective);
  if (kind < 0 || kind >= kCollectives) return Invalid(absl::StrCat("unknown collective ", kind));
  absl::StatusOr<core::Operation> operation = OperationOf(*op, comm->impl->world_size());
  absl::StatusOr<core::CallOptions> parsed = OptionsOf(options);
  const absl::Status refused = !operation.ok() ? operation.status() : parsed.status();
  if (request == nullptr) {
    if (!refused.ok()) return Finish(refused);
    return Finish(comm->impl->Submit(*operation, *parsed, nullptr));
  }
  auto handle = std::make_unique<baton_request>();
  if (refused.ok()) {
    comm->impl->Submit(*operation, *parsed, &handle->impl).IgnoreError();  // the request's
  } else {
    handle->impl = std::make_shared<CompletedRequest>(refused);
  }
  *request = handle.release();
  return Finish(absl::OkStatus());
}

// The named calls: baton_submit with their arguments.

baton_code_t baton_all_reduce(baton_comm_t* comm, const void* send, void* recv, size_t count,
                              baton_dtype_t type, baton_reduce_op_t op,
                              const baton_call_options_t* options) {
  const baton_op_t o = Op(BATON_ALL_REDUCE, send, recv, count, type, op);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_reduce_scatter(baton_comm_t* comm, const void* send, void* recv,
                                  size_t recv_count, baton_dtype_t type, baton_reduce_op_t op,
                                  const baton_call_options_t* options) {
  const baton_op_t o = Op(BATON_REDUCE_SCATTER, send, recv, recv_count, type, op);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_all_gather(baton_comm_t* comm, const void* send, void* recv, size_t send_count,
                              baton_dtype_t type, const baton_call_options_t* options) {
  const baton_op_t o = Op(BATON_ALL_GATHER, send, recv, send_count, type);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_broadcast(baton_comm_t* comm, const void* send, void* recv, size_t count,
                             baton_dtype_t type, int root, const baton_call_options_t* options) {
  const baton_op_t o = Rooted(BATON_BROADCAST, send, recv, count, type, root);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_reduce(baton_comm_t* comm, const void* send, void* recv, size_t count,
                          baton_dtype_t type, baton_reduce_op_t op, int root,
                          const baton_call_options_t* options) {
  baton_op_t o = Op(BATON_REDUCE, send, recv, count, type, op);
  o.root = root;
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_all_to_all(baton_comm_t* comm, const void* send, void* recv, size_t count,
                              baton_dtype_t type, const baton_call_options_t* options) {
  const baton_op_t o = Op(BATON_ALL_TO_ALL, send, recv, count, type);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_barrier(baton_comm_t* comm, const baton_call_options_t* options) {
  const baton_op_t o = Op(BATON_BARRIER, nullptr, nullptr, 0, BATON_UINT8);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_gather(baton_comm_t* comm, const void* send, void* recv, size_t count,
                          baton_dtype_t type, int root, const baton_call_options_t* options) {
  const baton_op_t o = Rooted(BATON_GATHER, send, recv, count, type, root);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_scatter(baton_comm_t* comm, const void* send, void* recv, size_t count,
                           baton_dtype_t type, int root, const baton_call_options_t* options) {
  const baton_op_t o = Rooted(BATON_SCATTER, send, recv, count, type, root);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_all_to_all_v(baton_comm_t* comm, const void* send, const size_t* send_counts,
                                const size_t* send_displs, void* recv, const size_t* recv_counts,
                                const size_t* recv_displs, size_t entries, baton_dtype_t type,
                                const baton_call_options_t* options) {
  const baton_op_t o =
      Vector(send, send_counts, send_displs, recv, recv_counts, recv_displs, entries, type);
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_send(baton_comm_t* comm, const void* buf, size_t count, baton_dtype_t type,
                        int peer, const baton_call_options_t* options) {
  baton_op_t o = Op(BATON_SEND, buf, nullptr, count, type);
  o.peer = peer;
  return baton_submit(comm, &o, options, nullptr);
}

baton_code_t baton_recv(baton_comm_t* comm, void* buf, size_t count, baton_dtype_t type, int peer,
                        const baton_call_options_t* options) {
  baton_op_t o = Op(BATON_RECV, nullptr, buf, count, type);
  o.peer = peer;
  return baton_submit(comm, &o, options, nullptr);
}

// The _async calls: baton_submit with a request, which they require.

baton_code_t baton_all_reduce_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, baton_reduce_op_t op,
                                    const baton_call_options_t* options,
                                    baton_request_t** request) {
  return SubmitAsync(comm, Op(BATON_ALL_REDUCE, send, recv, count, type, op), options, request);
}

baton_code_t baton_reduce_scatter_async(baton_comm_t* comm, const void* send, void* recv,
                                        size_t recv_count, baton_dtype_t type, baton_reduce_op_t op,
                                        const baton_call_options_t* options,
                                        baton_request_t** request) {
  return SubmitAsync(comm, Op(BATON_REDUCE_SCATTER, send, recv, recv_count, type, op), options,
                     request);
}

baton_code_t baton_all_gather_async(baton_comm_t* comm, const void* send, void* recv,
                                    size_t send_count, baton_dtype_t type,
                                    const baton_call_options_t* options,
                                    baton_request_t** request) {
  return SubmitAsync(comm, Op(BATON_ALL_GATHER, send, recv, send_count, type), options, request);
}

baton_code_t baton_broadcast_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                   baton_dtype_t type, int root,
                                   const baton_call_options_t* options, baton_request_t** request) {
  return SubmitAsync(comm, Rooted(BATON_BROADCAST, send, recv, count, type, root), options,
                     request);
}

baton_code_t baton_reduce_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                baton_dtype_t type, baton_reduce_op_t op, int root,
                                const baton_call_options_t* options, baton_request_t** request) {
  baton_op_t o = Op(BATON_REDUCE, send, recv, count, type, op);
  o.root = root;
  return SubmitAsync(comm, o, options, request);
}

baton_code_t baton_all_to_all_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, const baton_call_options_t* options,
                                    baton_request_t** request) {
  return SubmitAsync(comm, Op(BATON_ALL_TO_ALL, send, recv, count, type), options, request);
}

baton_code_t baton_barrier_async(baton_comm_t* comm, const baton_call_options_t* options,
                                 baton_request_t** request) {
  return SubmitAsync(comm, Op(BATON_BARRIER, nullptr, nullptr, 0, BATON_UINT8), options, request);
}

baton_code_t baton_gather_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                baton_dtype_t type, int root, const baton_call_options_t* options,
                                baton_request_t** request) {
  return SubmitAsync(comm, Rooted(BATON_GATHER, send, recv, count, type, root), options, request);
}

baton_code_t baton_scatter_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                 baton_dtype_t type, int root, const baton_call_options_t* options,
                                 baton_request_t** request) {
  return SubmitAsync(comm, Rooted(BATON_SCATTER, send, recv, count, type, root), options, request);
}

baton_code_t baton_all_to_all_v_async(baton_comm_t* comm, const void* send,
                                      const size_t* send_counts, const size_t* send_displs,
                                      void* recv, const size_t* recv_counts,
                                      const size_t* recv_displs, size_t entries, baton_dtype_t type,
                                      const baton_call_options_t* options,
                                      baton_request_t** request) {
  return SubmitAsync(
      comm, Vector(send, send_counts, send_displs, recv, recv_counts, recv_displs, entries, type),
      options, request);
}

baton_code_t baton_send_async(baton_comm_t* comm, const void* buf, size_t count, baton_dtype_t type,
                              int peer, const baton_call_options_t* options,
                              baton_request_t** request) {
  baton_op_t o = Op(BATON_SEND, buf, nullptr, count, type);
  o.peer = peer;
  return SubmitAsync(comm, o, options, request);
}

baton_code_t baton_recv_async(baton_comm_t* comm, void* buf, size_t count, baton_dtype_t type,
                              int peer, const baton_call_options_t* options,
                              baton_request_t** request) {
  baton_op_t o = Op(BATON_RECV, nullptr, buf, count, type);
  o.peer = peer;
  return SubmitAsync(comm, o, options, request);
}

}  // extern "C"
