// baton._c10d: the `baton` torch.distributed backend's Python entry point. baton/torch.py
// imports torch.distributed first (whose pybind11 registry holds c10d::Backend and Store, shared
// with this module through torch's bundled pybind11) and registers BatonBackend's constructor
// with torch.distributed.Backend.register_backend.

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>

#include "python/src/c10d_backend.h"

namespace py = pybind11;
using baton::torch_backend::BatonBackend;

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "The baton torch.distributed backend (C++); use baton.torch.";
  py::class_<BatonBackend, c10d::Backend, c10::intrusive_ptr<BatonBackend>>(m, "BatonBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::uintptr_t client) {
             // The handle crosses Python as an integer (baton.Client.handle).
             // NOLINTNEXTLINE(performance-no-int-to-ptr)
             auto* handle = reinterpret_cast<baton_client_t*>(client);
             return c10::make_intrusive<BatonBackend>(store, rank, size, timeout, handle);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("client"), py::call_guard<py::gil_scoped_release>(),
           "Joins rank `rank` of `size` through the client whose handle is `client`; rank 0 "
           "creates the communicator and shares its id through `store`.")
      .def_property_readonly("comm_id", &BatonBackend::comm_id,
                             "The Baton communicator id of this process group.")
      .def_property_readonly("daemon_count", &BatonBackend::daemon_count,
                             "How many daemons (nodes) the process group spans.")
      .def("operations", &BatonBackend::operations, py::arg("collective"),
           "How many Baton operations of this kind (\"all_reduce\", \"all_gather\", ...) the "
           "backend has submitted.");
}
