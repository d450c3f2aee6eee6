#pragma once

// baton.Communicator: one rank's membership of a communicator, with every operation of the C API.
//
// An operation takes its buffers (buffers.h), derives the count from their sizes and checks the
// others against it, then calls the C API without the GIL: blocking, or (async_op) returning a
// Request that holds the buffers until the operation completes. The communicator's handle is
// destroyed once neither the Communicator (until close()) nor a call or request in flight uses it.
// Once the client it was joined through is closed, its operations fail with FAILED_PRECONDITION.

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "baton/baton.h"
#include "python/src/buffers.h"
#include "python/src/client.h"
#include "python/src/request.h"

namespace baton::python {

namespace py = pybind11;

class Communicator {
 public:
  Communicator(std::shared_ptr<CommCore> core, std::weak_ptr<ClientCore> client);

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int daemon_count() const { return daemons_; }
  bool closed() const { return core_ == nullptr; }
  uintptr_t handle() const;  // the baton_comm_t*
  std::string LastAlgorithm() const;

  // The operations, as <baton/baton.h> states them; each returns None, or a Request with
  // extras.async_op. A None recv means in place where the C API allows it (send == recv).
  py::object AllReduce(py::handle send, py::handle recv, py::handle op, const Extras& extras);
  py::object ReduceScatter(py::handle send, py::handle recv, py::handle op, const Extras& extras);
  py::object AllGather(py::handle send, py::handle recv, const Extras& extras);
  // In place in `buf` without `recv`; else from the root's `buf` into `recv`.
  py::object Broadcast(py::handle buf, int root, py::handle recv, const Extras& extras);
  py::object Reduce(py::handle send, py::handle recv, py::handle op, int root,
                    const Extras& extras);
  py::object AllToAll(py::handle send, py::handle recv, const Extras& extras);
  // Counts and displacements are sequences of one int per rank; None displacements pack the
  // blocks in rank order.
  py::object AllToAllV(py::handle send, py::handle send_counts, py::handle send_displs,
                       py::handle recv, py::handle recv_counts, py::handle recv_displs,
                       const Extras& extras);
  py::object Gather(py::handle send, py::handle recv, int root, const Extras& extras);
  py::object Scatter(py::handle send, py::handle recv, int root, const Extras& extras);
  py::object Barrier(const Extras& extras);
  py::object Send(py::handle buf, int peer, const Extras& extras);
  py::object Recv(py::handle buf, int peer, const Extras& extras);

  // A new Communicator, or None for a negative color. `key` None: this rank.
  py::object Split(int color, py::handle key, py::handle timeout);
  void Abort(const std::string& reason);
  void Leave();
  // Leaves (its outcome is lost: leave() shows it) and lets go of the handle, which is destroyed
  // once no request of it is pending. Idempotent.
  void Close();

 private:
  // FAILED_PRECONDITION once this communicator or its client is closed.
  std::shared_ptr<CommCore> Core() const;

  // Submits `op` (baton_submit): blocking, or with a request when extras.async_op (returned).
  py::object Run(Held held, const Extras& extras, const baton_op_t& op);

  std::shared_ptr<CommCore> core_;  // null once closed
  std::weak_ptr<ClientCore> client_;
  const int rank_;
  const int world_;
  const int daemons_;
};

}  // namespace baton::python
