// baton._C: libbaton's C API (<baton/baton.h>) for Python, over pybind11. The package's
// __init__.py re-exports it with the enums, baton.group(), baton.default_client() and the adapter
// that lets CPU torch tensors through; _C.pyi states the Python signatures.
//
// What this module adds to the C API, and why:
//  - Buffers are any object with the buffer protocol (numpy arrays, memoryview, bytearray,
//    SharedBuffer), or what the package's adapter turns an object into. A buffer's own pointer
//    goes to libbaton: this module copies nothing. Element counts are derived from the buffers'
//    sizes and checked before any C call, so no call can read or write past a buffer.
//  - A C call may use a buffer only while this module holds its Py_buffer: a blocking call holds
//    it for the call (inside a group, until the group ends), a request until it completes, even
//    when the Request object is dropped first (it is kept aside and reaped later).
//  - Handles are freed only when nothing uses them: a Client's handle outlives close() while its
//    shared buffers still have views (numpy arrays, memoryviews) or a call is in flight, so
//    closing never unmaps memory that Python can still reach.
//  - The GIL is released around every C call that can block.
//  - Failures are Python exceptions (pybind11's way, at this edge only): baton.BatonError, or its
//    subclass for the code, carrying the code and baton_last_error()'s message.
// Everything mutable here is touched only with the GIL held, unless a comment says otherwise.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "baton/baton.h"
#include "python/src/buffers.h"
#include "python/src/client.h"
#include "python/src/communicator.h"
#include "python/src/errors.h"
#include "python/src/request.h"

namespace baton::python {
namespace {

std::string DaemonStatusJson(py::handle socket, py::handle timeout) {
  const std::string path = socket.is_none() ? std::string() : socket.cast<std::string>();
  const int64_t ms = MillisOf(timeout, "timeout");
  std::string json(size_t{16} << 10, '\0');
  size_t needed = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    baton_code_t code = BATON_OK;
    std::string message;
    {
      py::gil_scoped_release unlocked;
      code = baton_daemon_status_json(path.c_str(), ms, json.data(), json.size(), &needed);
      if (code != BATON_OK) message = baton_last_error();
    }
    if (code == BATON_OK) {
      json.resize(needed - 1);
      return json;
    }
    if (code != BATON_OUT_OF_RANGE) throw CallError(code, message);
    json.assign(needed + (size_t{4} << 10), '\0');  // the status may grow meanwhile
  }
  throw CallError(BATON_OUT_OF_RANGE, "the daemon's status kept growing");
}

// What a call would see of `object`: its address, bytes and element type (None if unknown).
py::tuple DescribeBuffer(py::handle object, bool writable) {
  Held held;
  const Buffer buffer = Acquire(object, "buffer", writable, held);
  return py::make_tuple(
      reinterpret_cast<uintptr_t>(buffer.data), buffer.bytes,
      buffer.type ? py::object(py::str(TypeName(*buffer.type))) : py::object(py::none()));
}

}  // namespace
}  // namespace baton::python

PYBIND11_MODULE(_C, m) {
  using namespace baton::python;  // NOLINT(google-build-using-namespace): the module's own names
  using py::literals::operator""_a;

  m.doc() = "libbaton's C API for Python (the extension behind the `baton` package; use `baton`).";

  RegisterErrors(m);

  // Names.
  m.def(
      "version", [] { return std::string(baton_version()); },
      "libbaton's version, \"MAJOR.MINOR.PATCH\".");
  m.def(
      "default_socket_path", [] { return std::string(baton_default_socket_path()); },
      "$BATON_SOCKET if set, else \"/run/baton/batond.sock\".");
  m.def(
      "code_name",
      [](int code) {
        baton_code_t c;
        std::memcpy(&c, &code, sizeof(c));
        return std::string(baton_code_name(c));
      },
      "code"_a, "\"OK\", \"INVALID_ARGUMENT\", ...; \"UNKNOWN_CODE\" outside the codes.");
  m.def(
      "dtype_name", [](py::handle t) { return std::string(baton_dtype_name(DTypeOf(t))); },
      "dtype"_a, "The canonical name of a dtype (a name or a baton.DType).");
  m.def(
      "dtype_size", [](py::handle t) { return baton_dtype_size(DTypeOf(t)); }, "dtype"_a,
      "Bytes per element of a dtype.");
  m.def(
      "reduce_op_name",
      [](py::handle op) { return std::string(baton_reduce_op_name(ReduceOpOf(op))); }, "op"_a,
      "The canonical name of a reduce op.");
  m.def(
      "algorithm_name",
      [](py::handle a) { return std::string(baton_algorithm_name(AlgorithmOf(a))); }, "algorithm"_a,
      "The canonical name of an algorithm (None: \"auto\").");

  m.def("group_start", &GroupStart,
        "Starts (or nests) this thread's group: like ncclGroupStart. Use baton.group().");
  m.def("group_end", &GroupEnd,
        "Ends this thread's group; the outermost end runs the queued operations (sends first), "
        "waits for them and raises the first error. Use baton.group().");
  m.def("daemon_status_json", &DaemonStatusJson, "socket"_a = py::none(), "timeout"_a = 5.0,
        "The status of the daemon at `socket` (None: $BATON_SOCKET or the default path) as the "
        "JSON document `baton status --json` prints (baton_daemon_status_json). Opens no "
        "session. UnavailableError if no daemon answers within `timeout` seconds.");
  m.def("_set_buffer_adapter", &SetBufferAdapter, "adapter"_a,
        "Sets the function that turns an object without the buffer protocol into (buffer, dtype "
        "name or None), or returns None (the package sets it: CPU torch tensors).");
  m.def("_describe_buffer", &DescribeBuffer, "buffer"_a, "writable"_a = false,
        "(address, nbytes, dtype name or None) of a buffer as a call would take it, for tests.");

  // SharedBuffer.
  py::class_<SharedBuffer> shared(m, "SharedBuffer", py::buffer_protocol(), R"doc(
Memory shared with the daemon, from Client.allocate(nbytes): collectives on it copy nothing
between this process and the daemon. A writable bytes-like object ('B' format):
numpy.frombuffer(buf, dtype) and torch.frombuffer(buf, dtype=...) view it without copying.

It is freed when the last reference to it goes (numpy arrays and memoryviews of it hold one, as
do tensors from torch.frombuffer), or at once by free(). Closing its client makes it unusable
(no new views, no calls) without unmapping it: views that exist still work, and the memory is
freed, and the session closed, once the object is gone.)doc");
  // The buffer protocol is this class's own, not pybind11's: it counts exports, so that free()
  // can refuse while a view of it exists.
  auto* heap_type = reinterpret_cast<PyHeapTypeObject*>(shared.ptr());
  heap_type->as_buffer.bf_getbuffer = &SharedBuffer::GetBuffer;
  heap_type->as_buffer.bf_releasebuffer = &SharedBuffer::ReleaseBuffer;
  shared.def_property_readonly("nbytes", &SharedBuffer::bytes, "Its size in bytes.")
      .def("__len__", &SharedBuffer::bytes)
      .def_property_readonly("address", &SharedBuffer::address,
                             "Its address (an int; 0 once freed), for code that takes pointers.")
      .def_property_readonly("freed", &SharedBuffer::freed,
                             "Whether it was freed (or its client closed).")
      .def_property_readonly("exports", &SharedBuffer::exports,
                             "How many views (buffer exports) of it exist.")
      .def("free", &SharedBuffer::FreeChecked,
           "Frees the memory now (idempotent); BufferError while buffer-protocol views of it "
           "exist. A tensor from torch.frombuffer holds a reference, not a view: drop the "
           "tensor rather than free() under it.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](SharedBuffer& self, const py::args&) { self.FreeChecked(); })
      .def("__repr__", [](const SharedBuffer& self) {
        return "<baton.SharedBuffer of " + std::to_string(self.bytes()) + " bytes" +
               (self.freed() ? ", freed>" : ">");
      });

  // Request.
  py::class_<Request>(m, "Request", R"doc(
An operation submitted with async_op=True. It keeps every buffer the operation uses alive
until the operation completes, even if this object is dropped first.)doc")
      .def("wait", &Request::Wait, "timeout"_a = py::none(),
           "Waits up to `timeout` seconds (None: until done) and raises the operation's error; "
           "baton.TimeoutError if it is still running then (wait again).")
      .def("test", &Request::Test,
           "Whether the operation has completed, successfully or not (wait() raises its error).")
      .def_property_readonly("done", &Request::Test, "test() as a property.");

  // Communicator.
  const py::arg_v dtype = "dtype"_a = py::none();
  const py::arg_v timeout = "timeout"_a = py::none();
  const py::arg_v algorithm = "algorithm"_a = py::none();
  const py::arg_v async_op = "async_op"_a = false;
  py::class_<Communicator>(m, "Communicator", R"doc(
One rank's membership of a communicator (Client.join, Communicator.split).

Every operation takes keyword arguments dtype= (the element type; default: the buffers' own,
from their format), timeout= (seconds; None: the library's default of 10 minutes),
algorithm= (None or "auto": the daemons choose; "ring", "tree", "direct", "doubling",
"halving_doubling") and async_op= (True: return a Request at once). Buffers are objects with
the buffer protocol or CPU torch tensors, C-contiguous; counts follow from their sizes and are
checked before anything is sent. Operations of one communicator run in the order they were
called. Inside baton.group() a blocking call only queues its operation, which runs at the
group's end.)doc")
      .def_property_readonly("rank", &Communicator::rank, "This rank.")
      .def_property_readonly("world_size", &Communicator::world_size, "The number of ranks.")
      .def_property_readonly("daemon_count", &Communicator::daemon_count,
                             "The number of daemons (nodes) it spans.")
      .def_property_readonly("last_algorithm", &Communicator::LastAlgorithm,
                             "The algorithm of this rank's last successful operation (\"ring\", "
                             "..., \"local\" when every rank shares one daemon; \"\" before).")
      .def_property_readonly("closed", &Communicator::closed, "Whether close() was called.")
      .def_property_readonly("handle", &Communicator::handle,
                             "The baton_comm_t* address, for C code (valid until close()).")
      .def(
          "all_reduce",
          [](Communicator& self, py::handle send, py::handle recv, py::handle op, py::object d,
             py::object t, py::object a, bool async) {
            return self.AllReduce(send, recv, op,
                                  {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a = py::none(), "op"_a = "sum", py::kw_only(), dtype, timeout, algorithm,
          async_op, "recv[i] = op over all ranks of send[i]; recv=None: in place, into send.")
      .def(
          "reduce_scatter",
          [](Communicator& self, py::handle send, py::handle recv, py::handle op, py::object d,
             py::object t, py::object a, bool async) {
            return self.ReduceScatter(send, recv, op,
                                      {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a, "op"_a = "sum", py::kw_only(), dtype, timeout, algorithm, async_op,
          "recv = block `rank` of op over all ranks' send (world_size blocks of len(recv)).")
      .def(
          "all_gather",
          [](Communicator& self, py::handle send, py::handle recv, py::object d, py::object t,
             py::object a, bool async) {
            return self.AllGather(send, recv, {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a, py::kw_only(), dtype, timeout, algorithm, async_op,
          "recv = every rank's send, in rank order.")
      .def(
          "broadcast",
          [](Communicator& self, py::handle buf, int root, py::handle recv, py::object d,
             py::object t, py::object a, bool async) {
            return self.Broadcast(buf, root, recv,
                                  {std::move(d), std::move(t), std::move(a), async});
          },
          "buf"_a, "root"_a = 0, "recv"_a = py::none(), py::kw_only(), dtype, timeout, algorithm,
          async_op,
          "The root's buf to every rank: in place in buf, or (recv given) from buf into recv. "
          "With recv, buf is read on the root only and may be None elsewhere.")
      .def(
          "reduce",
          [](Communicator& self, py::handle send, py::handle recv, py::handle op, int root,
             py::object d, py::object t, py::object a, bool async) {
            return self.Reduce(send, recv, op, root,
                               {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a = py::none(), "op"_a = "sum", "root"_a = 0, py::kw_only(), dtype,
          timeout, algorithm, async_op,
          "The root's recv = op over all ranks' send (recv=None: into send); recv is written on "
          "the root only.")
      .def(
          "all_to_all",
          [](Communicator& self, py::handle send, py::handle recv, py::object d, py::object t,
             py::object a, bool async) {
            return self.AllToAll(send, recv, {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a = py::none(), py::kw_only(), dtype, timeout, algorithm, async_op,
          "Block j of send goes to rank j; block i of recv comes from rank i (world_size equal "
          "blocks; recv=None: in place).")
      .def(
          "all_to_all_v",
          [](Communicator& self, py::handle send, py::handle send_counts, py::handle send_displs,
             py::handle recv, py::handle recv_counts, py::handle recv_displs, py::object d,
             py::object t, py::object a, bool async) {
            return self.AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs,
                                  {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "send_counts"_a, "send_displs"_a, "recv"_a, "recv_counts"_a, "recv_displs"_a,
          py::kw_only(), dtype, timeout, algorithm, async_op,
          "Like MPI_Alltoallv: send_counts[j] elements from element send_displs[j] of send go to "
          "rank j; recv_counts[i] elements from rank i land at element recv_displs[i] of recv. "
          "Sequences of one int per rank; displs None: the counts packed in order.")
      .def(
          "gather",
          [](Communicator& self, py::handle send, py::handle recv, int root, py::object d,
             py::object t, py::object a, bool async) {
            return self.Gather(send, recv, root, {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a = py::none(), "root"_a = 0, py::kw_only(), dtype, timeout, algorithm,
          async_op,
          "The root's recv = every rank's send, in rank order; recv may be None off the root.")
      .def(
          "scatter",
          [](Communicator& self, py::handle send, py::handle recv, int root, py::object d,
             py::object t, py::object a, bool async) {
            return self.Scatter(send, recv, root,
                                {std::move(d), std::move(t), std::move(a), async});
          },
          "send"_a, "recv"_a, "root"_a = 0, py::kw_only(), dtype, timeout, algorithm, async_op,
          "recv = block `rank` of the root's send; send may be None off the root.")
      .def(
          "barrier",
          [](Communicator& self, py::object t, py::object a, bool async) {
            return self.Barrier({py::none(), std::move(t), std::move(a), async});
          },
          py::kw_only(), timeout, algorithm, async_op, "Returns once every rank has entered it.")
      .def(
          "send",
          [](Communicator& self, py::handle buf, int peer, py::object d, py::object t, py::object a,
             bool async) {
            return self.Send(buf, peer, {std::move(d), std::move(t), std::move(a), async});
          },
          "buf"_a, "peer"_a, py::kw_only(), dtype, timeout, algorithm, async_op,
          "Sends buf to rank `peer`; returns once the daemon has the data. Matched in order with "
          "the peer's recv calls.")
      .def(
          "recv",
          [](Communicator& self, py::handle buf, int peer, py::object d, py::object t, py::object a,
             bool async) {
            return self.Recv(buf, peer, {std::move(d), std::move(t), std::move(a), async});
          },
          "buf"_a, "peer"_a, py::kw_only(), dtype, timeout, algorithm, async_op,
          "Receives rank `peer`'s next message into buf (its size must match the send's).")
      .def("split", &Communicator::Split, "color"_a, "key"_a = py::none(), py::kw_only(), timeout,
           py::keep_alive<0, 1>(),
           "Like MPI_Comm_split: ranks with the same color form a new Communicator, ordered by "
           "(key, rank); key None: this rank. Every rank must call it. A negative color joins "
           "none and returns None. timeout None: 60 s.")
      .def("abort", &Communicator::Abort, "reason"_a = "",
           "Fails the communicator's pending and future operations on every rank with ABORTED "
           "and `reason`.")
      .def("leave", &Communicator::Leave,
           "Leaves once the operations already submitted have finished; later operations fail. "
           "Idempotent.")
      .def("close", &Communicator::Close,
           "Leaves (ignoring its outcome: see leave()) and frees the handle once no request of "
           "it is pending. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Communicator& self, const py::args&) { self.Close(); })
      .def("__repr__", [](const Communicator& self) {
        return "<baton.Communicator rank " + std::to_string(self.rank()) + " of " +
               std::to_string(self.world_size()) + (self.closed() ? ", closed>" : ">");
      });

  // Client.
  py::class_<Client>(m, "Client", R"doc(
A session with the node's daemon (batond), over its unix socket.

Client(socket=None, timeout=10.0) connects to the daemon at `socket` (None: $BATON_SOCKET, else
/run/baton/batond.sock), waiting up to `timeout` seconds; UnavailableError if none answers.
Thread-safe. Close it with close() or a with block; communicators and buffers keep it alive.)doc")
      .def(py::init<py::handle, double>(), "socket"_a = py::none(), "timeout"_a = 10.0)
      .def_property_readonly("socket", &Client::socket, "The daemon's socket path.")
      .def_property_readonly("node_name", &Client::node_name,
                             "The name of the node whose daemon this client talks to.")
      .def_property_readonly("closed", &Client::closed, "Whether close() was called.")
      .def_property_readonly(
          "handle", &Client::handle,
          "The baton_client_t* address as an int, for C code linking the same libbaton.so (the "
          "torch backend). Valid until close(); FAILED_PRECONDITION after.")
      .def("create_comm_id", &Client::CreateCommId,
           "A new communicator id rooted at this daemon, to share with every rank out of band.")
      .def("join", &Client::Join, "comm_id"_a, "world_size"_a, "rank"_a, "timeout"_a = 60.0,
           py::keep_alive<0, 1>(),
           "Joins communicator `comm_id` as rank `rank` of `world_size`, waiting up to `timeout` "
           "seconds for every rank (baton.TimeoutError names the missing ones).")
      .def("allocate", &Client::Allocate, "nbytes"_a, py::keep_alive<0, 1>(),
           "A SharedBuffer of `nbytes` bytes shared with the daemon (zero copies).")
      .def("close", &Client::Close,
           "Closes the client: its shared buffers become unusable (views of them still work) "
           "and its communicators' calls fail. The session closes once no SharedBuffer object "
           "of it is left (each is freed when it goes). Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Client& self, const py::args&) { self.Close(); })
      .def("__repr__", [](const Client& self) {
        return "<baton.Client of " + self.node_name() + " at " + self.socket() +
               (self.closed() ? ", closed>" : ">");
      });
}
