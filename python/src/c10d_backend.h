#pragma once

// The `baton` torch.distributed backend (docs/pytorch.md): a c10d::Backend whose every operation
// is a Baton operation on one communicator of this process group's ranks.
//
// Creation: rank 0 of the group creates a communicator id through its daemon and publishes it in
// the group's Store (as ProcessGroupNCCL shares its unique id); every rank then joins with its
// group rank and size, waiting up to the group's timeout. The group's timeout is also every
// operation's deadline unless the call sets its own.
//
// Tensors: CPU or CUDA (every tensor of a call on one device), strided, of a type Baton has (int8,
// uint8, int32, int64, uint32, uint64, float16, bfloat16, float32, float64, float8_e4m3fn,
// float8_e5m2); bool as uint8 (SUM is a logical or and PRODUCT a logical and, as ProcessGroupNCCL
// does); complex as pairs of reals for the operations that are elementwise sums or copies.
// Non-contiguous tensors go through a contiguous copy each way. Memory that came from the client's
// Allocate (baton.torch.empty) is read and written by the daemon in place; any other host memory is
// staged by libbaton; device memory is registered with the daemon on first use and read and written
// in place.
//
// Asynchrony: a CPU operation whose options say async_op=False runs to completion in the calling
// thread (no thread hop); otherwise it is submitted and a BatonWork returned. A CUDA operation,
// async or not, is stream-ordered on the current stream of its tensors' device (like
// ProcessGroupNCCL on the caller's stream): staging copies, the Baton call and the copies back
// are all enqueued on that stream and the call returns without waiting for the GPU.
// Coalescing (batch_isend_irecv, the coalescing manager) is a Baton group of the calling thread:
// the operations are queued and submitted together by endCoalescing, which waits for them. Baton
// groups do not take stream-ordered calls yet, so a block of CUDA operations is submitted as host
// calls on device memory: endCoalescing first waits for the block's stream (the operations'
// inputs), and the copies back then go on that stream. A block takes tensors of one device.
//
// Errors are thrown as c10 exceptions, the API torch gives a backend: DistBackendError with
// Baton's code and message (which names the peer at fault) for failed operations, TypeError
// or ValueError (TORCH_CHECK_TYPE / TORCH_CHECK_VALUE) for arguments Baton cannot take.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "baton/baton.hpp"
#include "python/src/c10d_work.h"

namespace baton::torch_backend {

class BatonBackend final : public c10d::Backend {
 public:
  // Joins rank `rank` of `size` through `client` (a baton_client_t* that must outlive the
  // backend's operations; the Python package passes its default client). Throws
  // DistBackendError if the daemon cannot be reached or the ranks do not all join in `timeout`.
  BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               std::chrono::milliseconds timeout, baton_client_t* client);
  ~BatonBackend() override;

  const std::string getBackendName() const override { return "baton"; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  // COMM_ERROR once aborted, or once a stream-ordered call failed (the asynchronous error).
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  // The communicator's id and the daemons it spans (for tests and logs).
  const std::string& comm_id() const { return comm_id_; }
  int daemon_count() const { return comm_->daemon_count(); }
  // The number of Baton operations this backend has submitted, by kind ("all_reduce", ...).
  int64_t operations(const std::string& collective) const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  struct Launch;  // one torch call made ready for Baton (c10d_backend.cc)
  using Submit = std::function<std::vector<std::shared_ptr<baton::Request>>(
      baton_comm_t* comm, const baton_call_options_t& options, bool blocking)>;

  // Submits `launch`'s operations. CPU: blocking in the calling thread when the call is not
  // asynchronous and no coalescing is open, otherwise as requests the returned work waits for.
  // CUDA: stream-ordered on the launch's stream, or queued in the open coalescing block.
  c10::intrusive_ptr<c10d::Work> Run(Launch launch, const Submit& submit);
  // Throws DistBackendError unless libbaton takes memory of CUDA `device` as device memory
  // (checked once per backend: a coalesced block's calls on device memory are not
  // stream-ordered, and libbaton would take a pointer it does not know for host memory).
  void CheckDeviceMemory(c10::Device device);
  std::chrono::milliseconds TimeoutOf(std::chrono::milliseconds requested) const;
  void Count(const std::string& collective, int64_t n = 1);

  std::chrono::milliseconds timeout_;
  std::string comm_id_;
  baton_client_t* const client_;
  // Works of stream-ordered calls hold it weakly: they read its asynchronous error while it lives.
  std::shared_ptr<baton::Communicator> comm_;
  std::shared_ptr<CompletionWatcher> watcher_;
  bool coalescing_ = false;  // calling thread's Baton group is open for this backend
  std::vector<c10::intrusive_ptr<BatonWork>> coalesced_;
  // The open block's device (of its first call with tensors) and, for CUDA, its stream.
  std::optional<c10::Device> coalesced_device_;
  std::optional<c10::Stream> coalesced_stream_;
  std::atomic<bool> device_memory_checked_{false};
  std::string abort_reason_;  // set once abort() ran

  mutable std::mutex counts_mu_;
  std::map<std::string, int64_t> counts_;  // guarded by counts_mu_
};

}  // namespace baton::torch_backend
