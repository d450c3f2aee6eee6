// The c10d backend's helpers (c10d_ops.h): tensors to Baton's element types and operations, and
// the one way an operation is submitted (baton_submit).

#include "python/src/c10d_ops.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "python/src/baton_op.h"

namespace baton::torch_backend {

[[noreturn]] void ThrowBackendError(const std::string& message) {
  C10_THROW_ERROR(DistBackendError, message);
}

// Baton's element type for a tensor's scalar type (complex: of its real parts).
baton_dtype_t TypeOf(at::ScalarType type) {
  switch (type) {
    case at::kChar:
      return BATON_INT8;
    case at::kByte:
    case at::kBool:
      return BATON_UINT8;
    case at::kInt:
      return BATON_INT32;
    case at::kUInt32:
      return BATON_UINT32;
    case at::kLong:
      return BATON_INT64;
    case at::kUInt64:
      return BATON_UINT64;
    case at::kHalf:
    case at::kComplexHalf:
      return BATON_FLOAT16;
    case at::kBFloat16:
      return BATON_BFLOAT16;
    case at::kFloat:
    case at::kComplexFloat:
      return BATON_FLOAT32;
    case at::kDouble:
    case at::kComplexDouble:
      return BATON_FLOAT64;
    case at::kFloat8_e4m3fn:
      return BATON_FP8_E4M3;
    case at::kFloat8_e5m2:
      return BATON_FP8_E5M2;
    default:
      TORCH_CHECK_TYPE(false, "baton: tensors of type ", type,
                       " are not supported (Baton has int8, uint8, int32, uint32, int64, uint64, "
                       "float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2; bool "
                       "and complex map onto those)");
  }
}

// Baton's reduce operator for `op` on tensors of `type`. bool: SUM is a logical or, PRODUCT a
// logical and (ProcessGroupNCCL's choice); complex: only the sums are elementwise on the real
// parts.
baton_reduce_op_t OpOf(const c10d::ReduceOp& op, at::ScalarType type) {
  const bool is_bool = type == at::kBool;
  const bool is_complex = at::isComplexType(type);
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return is_bool ? BATON_MAX : BATON_SUM;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(!is_bool, "baton: AVG of bool tensors is not defined");
      return BATON_AVG;
    case c10d::ReduceOp::PRODUCT:
      TORCH_CHECK_VALUE(!is_complex, "baton: PRODUCT of complex tensors is not supported");
      return is_bool ? BATON_MIN : BATON_PROD;
    case c10d::ReduceOp::MIN:
      TORCH_CHECK_VALUE(!is_complex, "baton: MIN of complex tensors is not defined");
      return BATON_MIN;
    case c10d::ReduceOp::MAX:
      TORCH_CHECK_VALUE(!is_complex, "baton: MAX of complex tensors is not defined");
      return BATON_MAX;
    default:
      TORCH_CHECK_VALUE(false, "baton: reduce op ", op.op_,
                        " is not supported (SUM, AVG, PRODUCT, MIN and MAX are; BAND, BOR, "
                        "BXOR and PREMUL_SUM are not)");
  }
}

void CheckTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK_VALUE(t.defined(), "baton ", op, ": undefined tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "baton ", op, ": got a tensor on ",
                    t.device(), ", but the baton backend moves CPU and CUDA tensors only");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "baton ", op,
                    ": only dense (strided) tensors "
                    "are supported, not ",
                    t.layout());
}

// The one device every tensor of a call is on (the CPU, or one CUDA device), after checking each
// tensor; ValueError naming both devices otherwise. `first` holds at least one tensor.
c10::Device DeviceOf(const char* op, const std::vector<at::Tensor>& first,
                     const std::vector<at::Tensor>& rest) {
  std::optional<c10::Device> device;
  for (const std::vector<at::Tensor>* tensors : {&first, &rest}) {
    for (const at::Tensor& t : *tensors) {
      CheckTensor(t, op);
      if (!device) device = t.device();
      TORCH_CHECK_VALUE(t.device() == *device, "baton ", op, ": tensors on ", *device, " and ",
                        t.device(),
                        " in one call; every tensor of a call must be on the same device");
    }
  }
  TORCH_CHECK_VALUE(device.has_value(), "baton ", op, ": no tensors");
  return *device;
}

const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "baton ", op, ": expects one tensor per call, got ",
                    tensors.size());
  CheckTensor(tensors[0], op);
  return tensors[0];
}

Elements ElementsOf(const at::Tensor& t) {
  const size_t per = at::isComplexType(t.scalar_type()) ? 2 : 1;
  return {t.data_ptr(), static_cast<size_t>(t.numel()) * per, TypeOf(t.scalar_type())};
}

std::string Describe(const char* op, const at::Tensor& t) {
  if (t.is_cuda()) return c10::str(op, " of ", t.numel(), " ", t.scalar_type(), " on ", t.device());
  return c10::str(op, " of ", t.numel(), " ", t.scalar_type());
}

// Copies consecutive pieces of `flat` into `targets`, each as many elements as it holds.
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& targets) {
  int64_t offset = 0;
  for (at::Tensor& t : targets) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Submits `op` (baton_submit) blocking, as a request that has completed, or not.
std::shared_ptr<baton::Request> SubmitOp(bool blocking, baton_comm_t* comm,
                                         const baton_call_options_t& options,
                                         const baton_op_t& op) {
  baton_request_t* request = nullptr;
  const baton_code_t code = baton_submit(comm, &op, &options, blocking ? nullptr : &request);
  if (blocking || code != BATON_OK) {
    return std::make_shared<baton::Request>(baton::Status::FromC(code));
  }
  return std::make_shared<baton::Request>(request);
}

// An operation on this rank's buffers, and the fields some collectives add.
baton_op_t Data(baton_collective_t collective, const void* send, void* recv, size_t count,
                baton_dtype_t type) {
  return python_ops::MakeOp(collective, send, recv, count, type);
}
baton_op_t WithRoot(baton_op_t op, int root) {
  op.root = root;
  return op;
}
baton_op_t WithOp(baton_op_t op, baton_reduce_op_t reduce) {
  op.op = reduce;
  return op;
}
baton_op_t WithPeer(baton_op_t op, int peer) {
  op.peer = peer;
  return op;
}
// The arrays are copied before baton_submit returns.
baton_op_t WithVectors(baton_op_t op, const size_t* send_counts, const size_t* send_displs,
                       const size_t* recv_counts, const size_t* recv_displs, size_t entries) {
  op.send_counts = send_counts;
  op.send_displs = send_displs;
  op.recv_counts = recv_counts;
  op.recv_displs = recv_displs;
  op.entries = entries;
  return op;
}

std::vector<size_t> Displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

// Element counts per rank of an all_to_all_single side: equal blocks when `splits` is empty,
// else splits[i] rows of the tensor's first dimension.
std::vector<size_t> SplitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                const char* side) {
  const size_t per = at::isComplexType(t.scalar_type()) ? 2 : 1;
  std::vector<size_t> counts(size);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(t.numel() % size == 0, "baton all_to_all_single: the ", side, " tensor's ",
                      t.numel(), " elements do not split evenly over ", size, " ranks");
    std::fill(counts.begin(), counts.end(), per * static_cast<size_t>(t.numel() / size));
    return counts;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size,
                    "baton all_to_all_single: ", splits.size(), " ", side, " split sizes for ",
                    size, " ranks");
  TORCH_CHECK_VALUE(t.dim() > 0,
                    "baton all_to_all_single: split sizes need a tensor with a "
                    "first dimension");
  const int64_t row = t.size(0) == 0 ? 0 : t.numel() / t.size(0);
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    TORCH_CHECK_VALUE(splits[i] >= 0, "baton all_to_all_single: negative split size");
    rows += splits[i];
    counts[i] = per * static_cast<size_t>(splits[i] * row);
  }
  TORCH_CHECK_VALUE(rows == t.size(0), "baton all_to_all_single: the ", side,
                    " split sizes add up to ", rows, " rows, but the tensor has ", t.size(0));
  return counts;
}

}  // namespace baton::torch_backend
