#include "python/src/communicator.h"

#include <optional>
#include <utility>
#include <vector>

#include "python/src/baton_op.h"
#include "python/src/errors.h"

namespace baton::python {

using python_ops::MakeOp;
namespace {

// One all_to_all_v array: an int per rank.
std::vector<size_t> Counts(py::handle values, const char* what, int world) {
  std::vector<size_t> counts;
  for (py::handle value : py::iter(values)) {
    const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!index) throw py::error_already_set();
    const long long count = index.cast<long long>();
    if (count < 0) Invalid(std::string("all_to_all_v: ") + what + " has a negative entry");
    counts.push_back(static_cast<size_t>(count));
  }
  if (counts.size() != static_cast<size_t>(world)) {
    Invalid(std::string("all_to_all_v: ") + what + " has " + std::to_string(counts.size()) +
            " entries; it needs one per rank (world size " + std::to_string(world) + ")");
  }
  return counts;
}

// Displacements, or (None) the counts packed one after another.
std::vector<size_t> Displs(py::handle values, const char* what, const std::vector<size_t>& counts,
                           int world) {
  if (!values.is_none()) return Counts(values, what, world);
  std::vector<size_t> displs(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = at;
    at += counts[i];
  }
  return displs;
}

[[noreturn]] void PastTheEnd(const Buffer& buffer, const std::string& name, size_t i, size_t count,
                             size_t displ) {
  const std::string at = "[" + std::to_string(i) + "]";
  Invalid("all_to_all_v: " + name + " holds " + std::to_string(buffer.count) + " elements, but " +
          name + "_displs" + at + " + " + name + "_counts" + at + " = " + std::to_string(displ) +
          " + " + std::to_string(count) + " goes past its end");
}

// INVALID_ARGUMENT unless every block lies inside `buffer`.
void Spans(const Buffer& buffer, const std::vector<size_t>& counts,
           const std::vector<size_t>& displs, const std::string& name) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > buffer.count || displs[i] > buffer.count - counts[i]) {
      PastTheEnd(buffer, name, i, counts[i], displs[i]);
    }
  }
}

}  // namespace

Communicator::Communicator(std::shared_ptr<CommCore> core, std::weak_ptr<ClientCore> client)
    : core_(std::move(core)),
      client_(std::move(client)),
      rank_(baton_comm_rank(core_->handle())),
      world_(baton_comm_world_size(core_->handle())),
      daemons_(baton_comm_daemon_count(core_->handle())) {}

uintptr_t Communicator::handle() const { return reinterpret_cast<uintptr_t>(Core()->handle()); }

std::string Communicator::LastAlgorithm() const {
  char name[64] = {};
  baton_comm_last_algorithm(Core()->handle(), name, sizeof(name));
  return name;
}

std::shared_ptr<CommCore> Communicator::Core() const {
  if (core_ == nullptr) throw CallError(BATON_FAILED_PRECONDITION, "the communicator is closed");
  const std::shared_ptr<ClientCore> client = client_.lock();
  if (client == nullptr || client->closed) {
    throw CallError(BATON_FAILED_PRECONDITION,
                    "the client this communicator was joined through is closed");
  }
  return core_;
}

py::object Communicator::Run(Held held, const Extras& extras, const baton_op_t& op) {
  const baton_call_options_t options = OptionsOf(extras);
  const std::shared_ptr<CommCore> core = Core();
  ReapOrphans();
  baton_request_t* request = nullptr;
  Check([&] {
    return baton_submit(core->handle(), &op, &options, extras.async_op ? &request : nullptr);
  });
  if (extras.async_op) {
    return py::cast(std::make_unique<Request>(request, std::move(held), core));
  }
  if (InGroup()) HoldUntilGroupEnd(std::move(held));  // queued, not run yet
  return py::none();
}

py::object Communicator::AllReduce(py::handle send_object, py::handle recv_object,
                                   py::handle op_object, const Extras& extras) {
  Held held;
  const bool in_place = recv_object.is_none();
  Buffer send = Acquire(send_object, "send", in_place, held);
  Buffer recv = in_place ? send : Acquire(recv_object, "recv", true, held);
  const baton_dtype_t type = Settle("all_reduce", extras.dtype, {&send, &recv});
  ExpectCount("all_reduce", recv, send.count, type, "as many as send");
  baton_op_t op = MakeOp(BATON_ALL_REDUCE, send.data, recv.data, send.count, type);
  op.op = ReduceOpOf(op_object);
  return Run(std::move(held), extras, op);
}

py::object Communicator::ReduceScatter(py::handle send_object, py::handle recv_object,
                                       py::handle op_object, const Extras& extras) {
  Held held;
  Buffer send = Acquire(send_object, "send", false, held);
  Buffer recv = Acquire(recv_object, "recv", true, held);
  const baton_dtype_t type = Settle("reduce_scatter", extras.dtype, {&send, &recv});
  ExpectCount("reduce_scatter", send, recv.count * world_, type,
              "recv's count times the world size");
  baton_op_t op = MakeOp(BATON_REDUCE_SCATTER, send.data, recv.data, recv.count, type);
  op.op = ReduceOpOf(op_object);
  return Run(std::move(held), extras, op);
}

py::object Communicator::AllGather(py::handle send_object, py::handle recv_object,
                                   const Extras& extras) {
  Held held;
  Buffer send = Acquire(send_object, "send", false, held);
  Buffer recv = Acquire(recv_object, "recv", true, held);
  const baton_dtype_t type = Settle("all_gather", extras.dtype, {&send, &recv});
  ExpectCount("all_gather", recv, send.count * world_, type, "send's count times the world size");
  return Run(std::move(held), extras,
             MakeOp(BATON_ALL_GATHER, send.data, recv.data, send.count, type));
}

py::object Communicator::Broadcast(py::handle buf_object, int root, py::handle recv_object,
                                   const Extras& extras) {
  Held held;
  const bool in_place = recv_object.is_none();
  const bool at_root = root == rank_;
  std::optional<Buffer> send;
  if (!buf_object.is_none()) send = Acquire(buf_object, in_place ? "buf" : "send", in_place, held);
  if (in_place && !send) Invalid("broadcast: buf is None (pass a buffer, or send and recv)");
  Buffer recv = in_place ? *send : Acquire(recv_object, "recv", true, held);
  if (at_root && !send) Invalid("broadcast: the root needs the buffer to send (buf is None)");
  const baton_dtype_t type =
      Settle("broadcast", extras.dtype, {at_root && send ? &*send : nullptr, &recv});
  if (at_root && !in_place) ExpectCount("broadcast", recv, send->count, type, "as many as sent");
  // Off the root nothing is read from send; recv stands in for a missing one.
  const void* source = send ? send->data : recv.data;
  baton_op_t op = MakeOp(BATON_BROADCAST, source, recv.data, recv.count, type);
  op.root = root;
  return Run(std::move(held), extras, op);
}

py::object Communicator::Reduce(py::handle send_object, py::handle recv_object,
                                py::handle op_object, int root, const Extras& extras) {
  Held held;
  const bool in_place = recv_object.is_none();
  const bool at_root = root == rank_;
  Buffer send = Acquire(send_object, "send", in_place && at_root, held);
  // recv is written on the root only.
  Buffer recv = in_place ? send : Acquire(recv_object, "recv", at_root, held);
  const baton_dtype_t type =
      Settle("reduce", extras.dtype, {&send, at_root && !in_place ? &recv : nullptr});
  if (at_root && !in_place) ExpectCount("reduce", recv, send.count, type, "as many as send");
  baton_op_t op = MakeOp(BATON_REDUCE, send.data, recv.data, send.count, type);
  op.op = ReduceOpOf(op_object);
  op.root = root;
  return Run(std::move(held), extras, op);
}

py::object Communicator::AllToAll(py::handle send_object, py::handle recv_object,
                                  const Extras& extras) {
  Held held;
  const bool in_place = recv_object.is_none();
  Buffer send = Acquire(send_object, "send", in_place, held);
  Buffer recv = in_place ? send : Acquire(recv_object, "recv", true, held);
  const baton_dtype_t type = Settle("all_to_all", extras.dtype, {&send, &recv});
  if (send.count % world_ != 0) {
    Invalid("all_to_all: send holds " + std::to_string(send.count) + " " + TypeName(type) +
            " elements, not a multiple of the world size " + std::to_string(world_));
  }
  ExpectCount("all_to_all", recv, send.count, type, "as many as send");
  const size_t count = send.count / world_;
  return Run(std::move(held), extras, MakeOp(BATON_ALL_TO_ALL, send.data, recv.data, count, type));
}

py::object Communicator::AllToAllV(py::handle send_object, py::handle send_counts_object,
                                   py::handle send_displs_object, py::handle recv_object,
                                   py::handle recv_counts_object, py::handle recv_displs_object,
                                   const Extras& extras) {
  Held held;
  Buffer send = Acquire(send_object, "send", false, held);
  Buffer recv = Acquire(recv_object, "recv", true, held);
  const baton_dtype_t type = Settle("all_to_all_v", extras.dtype, {&send, &recv});
  const std::vector<size_t> send_counts = Counts(send_counts_object, "send_counts", world_);
  const std::vector<size_t> recv_counts = Counts(recv_counts_object, "recv_counts", world_);
  const std::vector<size_t> send_displs =
      Displs(send_displs_object, "send_displs", send_counts, world_);
  const std::vector<size_t> recv_displs =
      Displs(recv_displs_object, "recv_displs", recv_counts, world_);
  Spans(send, send_counts, send_displs, "send");
  Spans(recv, recv_counts, recv_displs, "recv");
  baton_op_t op = MakeOp(BATON_ALL_TO_ALL_V, send.data, recv.data, 0, type);
  op.send_counts = send_counts.data();
  op.send_displs = send_displs.data();
  op.recv_counts = recv_counts.data();
  op.recv_displs = recv_displs.data();
  op.entries = send_counts.size();
  return Run(std::move(held), extras, op);  // the arrays are copied before it returns
}

py::object Communicator::Gather(py::handle send_object, py::handle recv_object, int root,
                                const Extras& extras) {
  Held held;
  const bool at_root = root == rank_;
  Buffer send = Acquire(send_object, "send", false, held);
  std::optional<Buffer> recv;
  if (!recv_object.is_none()) recv = Acquire(recv_object, "recv", at_root, held);
  if (at_root && !recv) Invalid("gather: the root needs recv");
  // recv is neither read nor written off the root.
  const baton_dtype_t type = Settle("gather", extras.dtype, {&send, at_root ? &*recv : nullptr});
  if (at_root) {
    ExpectCount("gather", *recv, send.count * world_, type, "send's count times the world size");
  }
  void* into = recv ? recv->data : nullptr;
  baton_op_t op = MakeOp(BATON_GATHER, send.data, into, send.count, type);
  op.root = root;
  return Run(std::move(held), extras, op);
}

py::object Communicator::Scatter(py::handle send_object, py::handle recv_object, int root,
                                 const Extras& extras) {
  Held held;
  const bool at_root = root == rank_;
  std::optional<Buffer> send;
  if (!send_object.is_none()) send = Acquire(send_object, "send", false, held);
  if (at_root && !send) Invalid("scatter: the root needs send");
  Buffer recv = Acquire(recv_object, "recv", true, held);
  // send is read on the root only.
  const baton_dtype_t type = Settle("scatter", extras.dtype, {at_root ? &*send : nullptr, &recv});
  if (at_root) {
    ExpectCount("scatter", *send, recv.count * world_, type, "recv's count times the world size");
  }
  const void* from = send ? send->data : nullptr;
  baton_op_t op = MakeOp(BATON_SCATTER, from, recv.data, recv.count, type);
  op.root = root;
  return Run(std::move(held), extras, op);
}

py::object Communicator::Barrier(const Extras& extras) {
  return Run(Held(), extras, MakeOp(BATON_BARRIER, nullptr, nullptr, 0, BATON_UINT8));
}

py::object Communicator::Send(py::handle buf_object, int peer, const Extras& extras) {
  Held held;
  Buffer buf = Acquire(buf_object, "buf", false, held);
  const baton_dtype_t type = Settle("send", extras.dtype, {&buf});
  baton_op_t op = MakeOp(BATON_SEND, buf.data, nullptr, buf.count, type);
  op.peer = peer;
  return Run(std::move(held), extras, op);
}

py::object Communicator::Recv(py::handle buf_object, int peer, const Extras& extras) {
  Held held;
  Buffer buf = Acquire(buf_object, "buf", true, held);
  const baton_dtype_t type = Settle("recv", extras.dtype, {&buf});
  baton_op_t op = MakeOp(BATON_RECV, nullptr, buf.data, buf.count, type);
  op.peer = peer;
  return Run(std::move(held), extras, op);
}

py::object Communicator::Split(int color, py::handle key, py::handle timeout) {
  const std::shared_ptr<CommCore> core = Core();
  const int order = key.is_none() ? rank_ : key.cast<int>();
  const int64_t ms = MillisOf(timeout, "timeout");
  baton_comm_t* out = nullptr;
  Check([&] { return baton_comm_split(core->handle(), color, order, ms, &out); });
  if (out == nullptr) return py::none();
  return py::cast(std::make_unique<Communicator>(std::make_shared<CommCore>(out), client_));
}

void Communicator::Abort(const std::string& reason) {
  const std::shared_ptr<CommCore> core = Core();
  Check([&] { return baton_comm_abort(core->handle(), reason.c_str()); });
}

void Communicator::Leave() {
  const std::shared_ptr<CommCore> core = Core();
  Check([&] { return baton_comm_leave(core->handle()); });
}

void Communicator::Close() {
  if (core_ == nullptr) return;
  std::shared_ptr<CommCore> core = std::move(core_);
  WithoutGil([&core] {
    baton_comm_leave(core->handle());
    core.reset();
  });
}

}  // namespace baton::python
