#pragma once

// What the c10d backend (c10d_backend.cc) does to every call: tensors to Baton's element types,
// reduce ops and buffers, the checks every tensor passes, and the one way an operation is
// submitted (baton_submit: blocking or not, decided once per call by BatonBackend::Run).
// Internal to the `_c10d` extension; errors are thrown as torch's.

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "baton/baton.h"
#include "baton/baton.hpp"

namespace baton::torch_backend {

// Throws torch's DistBackendError with `message`.
[[noreturn]] void ThrowBackendError(const std::string& message);

// Baton's element type for a tensor's scalar type (complex: of its real parts).
baton_dtype_t TypeOf(at::ScalarType type);
// Baton's reduce op for c10d's `op` on tensors of `type`; ValueError for one it has not.
baton_reduce_op_t OpOf(const c10d::ReduceOp& op, at::ScalarType type);
// Dense, contiguous, of a type Baton moves; else torch's errors naming `op`.
void CheckTensor(const at::Tensor& t, const char* op);
// The one device of every tensor of `first` and `rest` (checked), for `op`'s error messages.
c10::Device DeviceOf(const char* op, const std::vector<at::Tensor>& first,
                     const std::vector<at::Tensor>& rest = {});
// The one tensor of `tensors`.
const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* op);

// A tensor as a buffer: its data, its elements (complex: twice its numel) and their type.
struct Elements {
  void* data;
  size_t count;
  baton_dtype_t type;
};
Elements ElementsOf(const at::Tensor& t);
// "all_reduce(float32[1024])", for messages and the flight recorder.
std::string Describe(const char* op, const at::Tensor& t);
// Copies `flat` back into `targets`, laid end to end.
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& targets);

// Submits `op` (baton_submit) blocking, as a request that has completed, or not.
std::shared_ptr<baton::Request> SubmitOp(bool blocking, baton_comm_t* comm,
                                         const baton_call_options_t& options, const baton_op_t& op);
// An operation on this rank's buffers, and the fields some collectives add.
baton_op_t Data(baton_collective_t collective, const void* send, void* recv, size_t count,
                baton_dtype_t type);
baton_op_t WithRoot(baton_op_t op, int root);
baton_op_t WithOp(baton_op_t op, baton_reduce_op_t reduce);
baton_op_t WithPeer(baton_op_t op, int peer);
// The arrays must live until baton_submit returns (it copies them).
baton_op_t WithVectors(baton_op_t op, const size_t* send_counts, const size_t* send_displs,
                       const size_t* recv_counts, const size_t* recv_displs, size_t entries);

// Offsets of blocks of `counts` laid end to end.
std::vector<size_t> Displacements(const std::vector<size_t>& counts);
// Element counts per rank of an all_to_all_single side: equal blocks when `splits` is empty,
// else splits[i] rows of the tensor's first dimension.
std::vector<size_t> SplitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                const char* side);

}  // namespace baton::torch_backend
