#include "python/src/c10d_backend.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <numeric>
#include <utility>

#include "python/src/c10d_ops.h"

namespace baton::torch_backend {
namespace {

constexpr char kCommIdKey[] = "baton/comm_id";
constexpr char kCommIdErrorPrefix[] = "error:";

}  // namespace

// One torch call made ready for Baton: the contiguous tensors Baton reads and writes, and the
// copies back into the caller's tensors that run once the operations succeeded. For CUDA tensors
// every copy, staging in as well as back, goes on `stream`, the current stream of their device:
// ATen enqueues the staging copies made here on it, and the copies back run under a guard for it.
//
// Staging tensors stay referenced by the work until it completes, but a work nobody keeps (a
// call with async_op=False) lets them go at once: that is safe by the caching allocator's stream
// semantics. They were allocated on `stream` and are used on it only (the daemon's access is
// ordered on it by the call's stream wait), so a block freed now is handed out again only to an
// allocation on `stream`, whose work runs after the call; and the allocator synchronizes the
// device before it returns memory to CUDA.
struct BatonBackend::Launch {
  Launch(c10d::OpType type, std::string what, std::chrono::milliseconds timeout, bool async,
         std::optional<c10::Device> device)
      : type(type), what(std::move(what)), timeout(timeout), async(async), device(device) {
    if (device && device->is_cuda()) stream = CurrentStream(*device);
  }

  // A tensor Baton reads: itself when contiguous, else a contiguous copy.
  at::Tensor In(const at::Tensor& t) {
    if (t.is_contiguous()) return t;
    at::Tensor dense = t.contiguous();
    keep.push_back(dense);
    return dense;
  }
  // A tensor Baton writes (and reads, when `read`): itself when contiguous, else a contiguous
  // copy that is copied back into `t` on success.
  at::Tensor Out(const at::Tensor& t, bool read) {
    if (t.is_contiguous()) return t;
    at::Tensor dense = read ? t.contiguous() : at::empty_like(t, at::MemoryFormat::Contiguous);
    keep.push_back(dense);
    copy_back.emplace_back([t, dense]() mutable { t.copy_(dense); });
    return dense;
  }
  // A staging tensor Baton fills; `then` moves it into the caller's tensors on success.
  void Staged(const at::Tensor& staging, std::function<void()> then) {
    keep.push_back(staging);
    copy_back.push_back(std::move(then));
  }

  c10d::OpType type;
  std::string what;
  std::chrono::milliseconds timeout;
  bool async;
  std::optional<c10::Device> device;  // of the call's tensors; none for a barrier
  std::optional<c10::Stream> stream;  // CUDA tensors: the current stream of their device
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> copy_back;
};

BatonBackend::BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout, baton_client_t* client)
    : c10d::Backend(rank, size),
      timeout_(timeout),
      client_(client),
      watcher_(std::make_shared<CompletionWatcher>()) {
  TORCH_CHECK_VALUE(client != nullptr, "baton: no client (connect to the daemon first)");
  if (rank == 0) {
    char id[BATON_COMM_ID_MAX];
    const baton::Status created =
        baton::Status::FromC(baton_client_create_comm_id(client, id, sizeof id));
    // The other ranks wait for this key: on failure they get the reason instead of a timeout.
    const std::string value =
        created.ok() ? std::string(id) : kCommIdErrorPrefix + created.ToString();
    store->set(kCommIdKey, std::vector<uint8_t>(value.begin(), value.end()));
    if (!created.ok()) {
      ThrowBackendError(
          c10::str("baton: rank 0 could not create a communicator through its "
                   "daemon (",
                   baton_client_node_name(client), "): ", created.ToString()));
    }
  }
  const std::vector<uint8_t> published = store->get(kCommIdKey);
  comm_id_.assign(published.begin(), published.end());
  if (comm_id_.rfind(kCommIdErrorPrefix, 0) == 0) {
    ThrowBackendError(c10::str("baton: rank 0 could not create the communicator: ",
                               comm_id_.substr(sizeof kCommIdErrorPrefix - 1)));
  }
  baton_comm_t* comm = nullptr;
  const baton::Status joined = baton::Status::FromC(baton_client_join(
      client, comm_id_.c_str(), size, rank, static_cast<int64_t>(timeout.count()), &comm));
  if (!joined.ok()) {
    ThrowBackendError(
        c10::str("baton: rank ", rank, " of ", size,
                 " could not join the process group's communicator: ", joined.ToString()));
  }
  comm_ = std::make_shared<baton::Communicator>(comm);
}

BatonBackend::~BatonBackend() {
  watcher_.reset();  // lets the watched works finish; each has a deadline
  if (coalescing_) baton::GroupEnd();
}

c10d::ErrorType BatonBackend::getError() {
  if (!abort_reason_.empty() || baton_comm_get_async_error(comm_->handle()) != BATON_OK) {
    return c10d::ErrorType::COMM_ERROR;
  }
  return c10d::ErrorType::SUCCESS;
}

void BatonBackend::abort() {
  abort_reason_ = c10::str("torch.distributed aborted the process group on rank ", getRank());
  comm_->Abort(abort_reason_);
}

void BatonBackend::shutdown() { comm_->Destroy(); }

int64_t BatonBackend::operations(const std::string& collective) const {
  std::lock_guard<std::mutex> lock(counts_mu_);
  auto it = counts_.find(collective);
  return it == counts_.end() ? 0 : it->second;
}

void BatonBackend::Count(const std::string& collective, int64_t n) {
  std::lock_guard<std::mutex> lock(counts_mu_);
  counts_[collective] += n;
}

std::chrono::milliseconds BatonBackend::TimeoutOf(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout || requested.count() <= 0 ? timeout_ : requested;
}

void BatonBackend::CheckDeviceMemory(c10::Device device) {
  if (device_memory_checked_.load(std::memory_order_acquire)) return;
  // Any allocation of the caching allocator will do; registering it now costs what its first
  // use would.
  const at::Tensor probe = at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
  const baton::Status registered =
      baton::Status::FromC(baton_client_register_device(client_, probe.data_ptr(), 1));
  if (!registered.ok()) {
    ThrowBackendError(c10::str("baton: rank ", getRank(), " cannot move CUDA tensors on ", device,
                               ": libbaton does not take their memory as device memory (its "
                               "device is $BATON_DEVICE: auto, cuda, fake or none): ",
                               registered.ToString()));
  }
  device_memory_checked_.store(true, std::memory_order_release);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::Run(Launch launch, const Submit& submit) {
  baton_call_options_t options;
  baton_call_options_init(&options);
  options.timeout_ms = static_cast<int64_t>(launch.timeout.count());
  if (coalescing_ && launch.device) {
    if (!coalesced_device_) {
      coalesced_device_ = launch.device;
      coalesced_stream_ = launch.stream;
    }
    TORCH_CHECK_VALUE(*launch.device == *coalesced_device_, "baton ", launch.what,
                      ": a coalesced block takes tensors of one device, and this block's are on ",
                      *coalesced_device_);
    TORCH_CHECK_VALUE(launch.stream == coalesced_stream_, "baton ", launch.what,
                      ": the current stream changed inside a coalesced block, which runs on one "
                      "stream (that of its first call)");
  }
  // Inside a coalescing block the operations are queued in the thread's group, so they are
  // submitted as requests that complete when endCoalescing ends the group.
  bool blocking = !launch.async && !coalescing_;
  std::optional<StreamOrder> order;
  if (launch.stream) {
    CheckDeviceMemory(*launch.device);
    order = StreamOrder{*launch.stream, {}};
    if (!coalescing_) {
      options.on_stream = 1;
      options.stream = launch.stream->native_handle();
      order->comm = comm_;
      blocking = true;  // returns once the call is enqueued on the stream
    }
  }
  std::function<void()> finish;
  if (!launch.copy_back.empty()) {
    finish = [copies = std::move(launch.copy_back)]() {
      for (const auto& copy : copies) copy();
    };
  }
  // The stream's device is current while libbaton enqueues the call's event and stream wait.
  c10::OptionalStreamGuard on_stream;
  if (launch.stream) on_stream.reset_stream(*launch.stream);
  std::vector<std::shared_ptr<baton::Request>> requests =
      submit(comm_->handle(), options, blocking);
  auto work = c10::make_intrusive<BatonWork>(getRank(), launch.type, std::move(launch.what),
                                             std::move(requests), std::move(launch.outputs),
                                             std::move(finish), std::move(launch.keep), watcher_,
                                             std::move(order));
  if (launch.stream && !coalescing_) {
    work->WaitHost();  // enqueues the copies back and the work's end after the call
  } else if (blocking) {
    work->Poll(std::nullopt);  // already complete: runs the copies back now
  }
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> BatonBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = Single(tensors, "broadcast");
  Launch launch(c10d::OpType::BROADCAST, Describe("broadcast", t), TimeoutOf(opts.timeout),
                opts.asyncOp, DeviceOf("broadcast", {t}));
  const at::Tensor buf = launch.Out(t, /*read=*/true);
  launch.outputs = {t};
  const Elements e = ElementsOf(buf);
  const int root = static_cast<int>(opts.rootRank);
  Count("broadcast");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{SubmitOp(
        b, comm, o, WithRoot(Data(BATON_BROADCAST, e.data, e.data, e.count, e.type), root))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "all_reduce");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "baton: sparse all_reduce is not supported");
  const baton_reduce_op_t op = OpOf(opts.reduceOp, t.scalar_type());
  Launch launch(c10d::OpType::ALLREDUCE, Describe("all_reduce", t), TimeoutOf(opts.timeout),
                opts.asyncOp, DeviceOf("all_reduce", {t}));
  const at::Tensor buf = launch.Out(t, /*read=*/true);
  launch.outputs = {t};
  const Elements e = ElementsOf(buf);
  Count("all_reduce");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o, WithOp(Data(BATON_ALL_REDUCE, e.data, e.data, e.count, e.type), op))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "baton all_reduce_coalesced: no tensors");
  const c10::Device device = DeviceOf("all_reduce_coalesced", tensors);
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK_VALUE(t.scalar_type() == tensors[0].scalar_type(),
                      "baton all_reduce_coalesced: tensors of different types (",
                      tensors[0].scalar_type(), ", ", t.scalar_type(), ")");
  }
  const baton_reduce_op_t op = OpOf(opts.reduceOp, tensors[0].scalar_type());
  // One operation over the tensors laid end to end, as ProcessGroupGloo does.
  std::vector<at::Tensor> flat_views;
  flat_views.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat_views.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flat_views);
  Launch launch(c10d::OpType::ALLREDUCE_COALESCED, Describe("all_reduce_coalesced", flat),
                TimeoutOf(opts.timeout), opts.asyncOp, device);
  launch.outputs = tensors;
  launch.Staged(flat, [flat, tensors]() mutable { Unflatten(flat, tensors); });
  const Elements e = ElementsOf(flat);
  Count("all_reduce");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o, WithOp(Data(BATON_ALL_REDUCE, e.data, e.data, e.count, e.type), op))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "reduce");
  const baton_reduce_op_t op = OpOf(opts.reduceOp, t.scalar_type());
  Launch launch(c10d::OpType::REDUCE, Describe("reduce", t), TimeoutOf(opts.timeout), opts.asyncOp,
                DeviceOf("reduce", {t}));
  const at::Tensor buf = launch.Out(t, /*read=*/true);
  launch.outputs = {t};
  const Elements e = ElementsOf(buf);
  const int root = static_cast<int>(opts.rootRank);
  Count("reduce");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o,
                 WithRoot(WithOp(Data(BATON_REDUCE, e.data, e.data, e.count, e.type), op), root))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions& opts) {
  const c10::Device device = DeviceOf("all_gather_into_tensor", {input, output});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "baton all_gather_into_tensor: output type ", output.scalar_type(),
                   " differs from input type ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(),
                    "baton all_gather_into_tensor: output has ", output.numel(),
                    " elements, expected ", input.numel(), " x ", getSize(), " ranks");
  Launch launch(c10d::OpType::_ALLGATHER_BASE, Describe("all_gather", input),
                TimeoutOf(opts.timeout), opts.asyncOp, device);
  const Elements in = ElementsOf(launch.In(input));
  const Elements out = ElementsOf(launch.Out(output, /*read=*/false));
  launch.outputs = {output};
  Count("all_gather");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o, Data(BATON_ALL_GATHER, in.data, out.data, in.count, in.type))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = Single(inputs, "all_gather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "baton all_gather: expects one list of ", getSize(), " output tensors");
  const c10::Device device = DeviceOf("all_gather", {input}, outputs[0]);
  for (const at::Tensor& t : outputs[0]) {
    TORCH_CHECK_VALUE(t.numel() == input.numel() && t.scalar_type() == input.scalar_type(),
                      "baton all_gather: every output tensor must have the input's ", input.numel(),
                      " elements of ", input.scalar_type());
  }
  Launch launch(c10d::OpType::ALLGATHER, Describe("all_gather", input), TimeoutOf(opts.timeout),
                opts.asyncOp, device);
  const Elements in = ElementsOf(launch.In(input));
  at::Tensor flat = at::empty({getSize() * input.numel()}, input.options());
  std::vector<at::Tensor> targets = outputs[0];
  launch.outputs = targets;
  launch.Staged(flat, [flat, targets]() mutable { Unflatten(flat, targets); });
  const Elements out = ElementsOf(flat);
  Count("all_gather");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o, Data(BATON_ALL_GATHER, in.data, out.data, in.count, in.type))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "baton all_gather_coalesced: ", outputs.size(),
                    " output lists for ", inputs.size(), " inputs");
  startCoalescing();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> out = {outputs[i]};
    std::vector<at::Tensor> in = {inputs[i]};
    allgather(out, in, opts);
  }
  return endCoalescing();
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                    "baton all_gather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
                    inputs.size(), " inputs");
  const bool outer = !coalescing_;
  if (outer) startCoalescing();
  for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs[i], inputs[i], opts);
  if (outer) return endCoalescing();
  return coalesced_.back();
}

c10::intrusive_ptr<c10d::Work> BatonBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  const at::Tensor& input = Single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  c10::Device device = DeviceOf("gather", {input});
  if (is_root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "baton gather: the root expects one list of ", getSize(), " output tensors");
    device = DeviceOf("gather", {input}, outputs[0]);
    for (const at::Tensor& t : outputs[0]) {
      TORCH_CHECK_VALUE(t.numel() == input.numel() && t.scalar_type() == input.scalar_type(),
                        "baton gather: every output tensor must have the input's ", input.numel(),
                        " elements of ", input.scalar_type());
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(),
                      "baton gather: only the root takes output tensors");
  }
  Launch launch(c10d::OpType::GATHER, Describe("gather", input), TimeoutOf(opts.timeout),
                opts.asyncOp, device);
  const Elements in = ElementsOf(launch.In(input));
  void* out = nullptr;
  if (is_root) {
    at::Tensor flat = at::empty({getSize() * input.numel()}, input.options());
    std::vector<at::Tensor> targets = outputs[0];
    launch.outputs = targets;
    launch.Staged(flat, [flat, targets]() mutable { Unflatten(flat, targets); });
    out = flat.data_ptr();
  }
  Count("gather");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o, WithRoot(Data(BATON_GATHER, in.data, out, in.count, in.type), root))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  const at::Tensor& output = Single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  if (is_root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "baton scatter: the root expects one list of ", getSize(), " input tensors");
  }
  Launch launch(c10d::OpType::SCATTER, Describe("scatter", output), TimeoutOf(opts.timeout),
                opts.asyncOp,
                is_root ? DeviceOf("scatter", {output}, inputs[0]) : DeviceOf("scatter", {output}));
  const void* in = nullptr;
  if (is_root) {
    std::vector<at::Tensor> pieces;
    for (const at::Tensor& t : inputs[0]) {
      TORCH_CHECK_VALUE(t.numel() == output.numel() && t.scalar_type() == output.scalar_type(),
                        "baton scatter: every input tensor must have the output's ", output.numel(),
                        " elements of ", output.scalar_type());
      pieces.push_back(t.reshape({-1}));
    }
    at::Tensor flat = at::cat(pieces);
    launch.keep.push_back(flat);
    in = flat.data_ptr();
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(),
                      "baton scatter: only the root takes input tensors");
  }
  const Elements out = ElementsOf(launch.Out(output, /*read=*/false));
  launch.outputs = {output};
  Count("scatter");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{SubmitOp(
        b, comm, o, WithRoot(Data(BATON_SCATTER, in, out.data, out.count, out.type), root))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const c10::Device device = DeviceOf("reduce_scatter_tensor", {input, output});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "baton reduce_scatter_tensor: output type ", output.scalar_type(),
                   " differs from input type ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(),
                    "baton reduce_scatter_tensor: input has ", input.numel(),
                    " elements, expected ", output.numel(), " x ", getSize(), " ranks");
  const baton_reduce_op_t op = OpOf(opts.reduceOp, output.scalar_type());
  Launch launch(c10d::OpType::_REDUCE_SCATTER_BASE, Describe("reduce_scatter", output),
                TimeoutOf(opts.timeout), opts.asyncOp, device);
  const Elements in = ElementsOf(launch.In(input));
  const Elements out = ElementsOf(launch.Out(output, /*read=*/false));
  launch.outputs = {output};
  Count("reduce_scatter");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o,
                 WithOp(Data(BATON_REDUCE_SCATTER, in.data, out.data, out.count, out.type), op))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor output = Single(outputs, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "baton reduce_scatter: expects one list of ", getSize(), " input tensors");
  DeviceOf("reduce_scatter", {output}, inputs[0]);
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& t : inputs[0]) {
    TORCH_CHECK_VALUE(t.numel() == output.numel() && t.scalar_type() == output.scalar_type(),
                      "baton reduce_scatter: every input tensor must have the output's ",
                      output.numel(), " elements of ", output.scalar_type());
    pieces.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(pieces);
  return _reduce_scatter_base(output, flat, opts);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                    "baton reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ",
                    inputs.size(), " inputs");
  const bool outer = !coalescing_;
  if (outer) startCoalescing();
  for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs[i], inputs[i], opts);
  if (outer) return endCoalescing();
  return coalesced_.back();
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_split_sizes,
                                                           std::vector<int64_t>& input_split_sizes,
                                                           const c10d::AllToAllOptions& opts) {
  const c10::Device device = DeviceOf("all_to_all_single", {input, output});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "baton all_to_all_single: output type ", output.scalar_type(),
                   " differs from input type ", input.scalar_type());
  Launch launch(c10d::OpType::ALLTOALL_BASE, Describe("all_to_all", input), TimeoutOf(opts.timeout),
                opts.asyncOp, device);
  const Elements in = ElementsOf(launch.In(input));
  const Elements out = ElementsOf(launch.Out(output, /*read=*/false));
  launch.outputs = {output};
  Count("all_to_all");
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % getSize() == 0,
                      "baton all_to_all_single: input and output need the same number of "
                      "elements, divisible by ",
                      getSize(), " ranks (got ", input.numel(), " and ", output.numel(), ")");
    return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
      return std::vector{SubmitOp(
          b, comm, o, Data(BATON_ALL_TO_ALL, in.data, out.data, in.count / getSize(), in.type))};
    });
  }
  const std::vector<size_t> send_counts = SplitCounts(input, input_split_sizes, getSize(), "input");
  const std::vector<size_t> recv_counts =
      SplitCounts(output, output_split_sizes, getSize(), "output");
  const std::vector<size_t> send_displs = Displacements(send_counts);
  const std::vector<size_t> recv_displs = Displacements(recv_counts);
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o,
                 WithVectors(Data(BATON_ALL_TO_ALL_V, in.data, out.data, 0, in.type),
                             send_counts.data(), send_displs.data(), recv_counts.data(),
                             recv_displs.data(), send_counts.size()))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(
      static_cast<int>(outputs.size()) == getSize() && static_cast<int>(inputs.size()) == getSize(),
      "baton all_to_all: expects ", getSize(), " input and output tensors, got ", inputs.size(),
      " and ", outputs.size());
  const c10::Device device = DeviceOf("all_to_all", inputs, outputs);
  const at::ScalarType type = inputs[0].scalar_type();
  std::vector<at::Tensor> pieces;
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  const size_t per = at::isComplexType(type) ? 2 : 1;
  int64_t out_elements = 0;
  for (int i = 0; i < getSize(); ++i) {
    TORCH_CHECK_TYPE(inputs[i].scalar_type() == type && outputs[i].scalar_type() == type,
                     "baton all_to_all: every tensor must be of type ", type);
    pieces.push_back(inputs[i].reshape({-1}));
    send_counts.push_back(per * static_cast<size_t>(inputs[i].numel()));
    recv_counts.push_back(per * static_cast<size_t>(outputs[i].numel()));
    out_elements += outputs[i].numel();
  }
  at::Tensor in_flat = at::cat(pieces);
  at::Tensor out_flat = at::empty({out_elements}, outputs[0].options());
  Launch launch(c10d::OpType::ALLTOALL, Describe("all_to_all", in_flat), TimeoutOf(opts.timeout),
                opts.asyncOp, device);
  launch.keep.push_back(in_flat);
  launch.outputs = outputs;
  launch.Staged(out_flat,
                [out_flat, targets = outputs]() mutable { Unflatten(out_flat, targets); });
  const std::vector<size_t> send_displs = Displacements(send_counts);
  const std::vector<size_t> recv_displs = Displacements(recv_counts);
  const Elements in = ElementsOf(in_flat);
  void* out = out_flat.data_ptr();
  Count("all_to_all");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{
        SubmitOp(b, comm, o,
                 WithVectors(Data(BATON_ALL_TO_ALL_V, in.data, out, 0, in.type), send_counts.data(),
                             send_displs.data(), recv_counts.data(), recv_displs.data(),
                             send_counts.size()))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                  int tag) {
  const at::Tensor& t = Single(tensors, "send");
  Launch launch(c10d::OpType::SEND, c10::str(Describe("send", t), " to rank ", dst_rank), timeout_,
                /*async=*/true, DeviceOf("send", {t}));
  const Elements e = ElementsOf(launch.In(t));
  Count("send");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{SubmitOp(
        b, comm, o, WithPeer(Data(BATON_SEND, e.data, nullptr, e.count, e.type), dst_rank))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                  int tag) {
  const at::Tensor& t = Single(tensors, "recv");
  Launch launch(c10d::OpType::RECV, c10::str(Describe("recv", t), " from rank ", src_rank),
                timeout_, /*async=*/true, DeviceOf("recv", {t}));
  const Elements e = ElementsOf(launch.Out(t, /*read=*/false));
  launch.outputs = {t};
  Count("recv");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{SubmitOp(
        b, comm, o, WithPeer(Data(BATON_RECV, nullptr, e.data, e.count, e.type), src_rank))};
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                           int tag) {
  TORCH_CHECK_VALUE(false,
                    "baton: recv without a source rank is not supported (Baton matches "
                    "each message to the receive of its sender): pass src");
}

c10::intrusive_ptr<c10d::Work> BatonBackend::barrier(const c10d::BarrierOptions& opts) {
  Launch launch(c10d::OpType::BARRIER, "barrier", TimeoutOf(opts.timeout), opts.asyncOp,
                /*device=*/std::nullopt);
  Count("barrier");
  return Run(std::move(launch), [&](baton_comm_t* comm, const baton_call_options_t& o, bool b) {
    return std::vector{SubmitOp(b, comm, o, Data(BATON_BARRIER, nullptr, nullptr, 0, BATON_UINT8))};
  });
}

void BatonBackend::startCoalescing() {
  TORCH_CHECK_VALUE(!coalescing_, "baton: startCoalescing twice without endCoalescing");
  const baton::Status started = baton::GroupStart();
  if (!started.ok())
    ThrowBackendError(c10::str("baton: could not start a group: ", started.ToString()));
  coalescing_ = true;
  coalesced_.clear();
  coalesced_device_.reset();
  coalesced_stream_.reset();
}

c10::intrusive_ptr<c10d::Work> BatonBackend::endCoalescing() {
  TORCH_CHECK_VALUE(coalescing_, "baton: endCoalescing without startCoalescing");
  coalescing_ = false;
  coalesced_device_.reset();
  const std::optional<c10::Stream> stream = std::exchange(coalesced_stream_, std::nullopt);
  // A block's CUDA operations are host calls on device memory (groups do not take stream-ordered
  // calls yet): their inputs are ready once the stream has run what was enqueued before them,
  // the block's staging copies included.
  if (stream) stream->synchronize();
  // Submits the group (sends first) and waits for it; the works' requests have then completed.
  const baton::Status ended = baton::GroupEnd();
  std::vector<at::Tensor> outputs;
  for (const auto& work : coalesced_) {
    work->WaitHost();  // CUDA: enqueues its copies back on the stream
    for (const at::Tensor& t : work->result()) outputs.push_back(t);
  }
  coalesced_.clear();
  std::optional<StreamOrder> order;
  if (stream) order = StreamOrder{*stream, {}};
  auto work = c10::make_intrusive<BatonWork>(
      getRank(), c10d::OpType::COALESCED, "coalesced group of operations",
      std::vector<std::shared_ptr<baton::Request>>{std::make_shared<baton::Request>(ended)},
      std::move(outputs), nullptr, std::vector<at::Tensor>{}, watcher_, std::move(order));
  work->WaitHost();  // CPU: complete now; CUDA: its end follows every copy back of the block
  return work;
}

}  // namespace baton::torch_backend
