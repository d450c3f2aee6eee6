#pragma once

// baton.Client and baton.SharedBuffer: a session with the node's daemon, and memory shared with it
// (baton_client_alloc), exported through the buffer protocol.
//
// The client's handle is closed (baton_client_close) once nothing uses it: the Client until
// close(), each SharedBuffer until it is freed, and each call in flight hold a reference. Memory
// is never unmapped while Python can still reach it:
//  - a SharedBuffer is freed when its object goes, and every holder of its memory holds the
//    object: buffer-protocol views (numpy arrays, memoryviews, a call's Py_buffer) through their
//    export, torch.frombuffer tensors through a reference (torch releases its export at once);
//  - free() frees at once, and so refuses while exports exist (it cannot see torch's reference);
//  - closing the client makes its buffers unusable (no new views, no calls) but frees none: each
//    is freed, and the session closed after the last, when its object goes.
// Everything here is used with the GIL held.

#include <pybind11/pybind11.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "baton/baton.h"

namespace baton::python {

namespace py = pybind11;

class Communicator;
class SharedBuffer;

// A client's handle and what depends on it; see the top of this file.
class ClientCore {
 public:
  explicit ClientCore(baton_client_t* handle);
  ~ClientCore();  // closes the handle, unless in a forked child (the parent's session)
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  baton_client_t* handle() const { return handle_; }
  // Whether this process is a fork of the one that connected: the session is the parent's.
  bool forked() const;

  bool closed = false;              // Client.close() was called
  std::set<SharedBuffer*> buffers;  // allocated and not freed yet

 private:
  baton_client_t* const handle_;
  const pid_t pid_;
};

class SharedBuffer {
 public:
  SharedBuffer(std::shared_ptr<ClientCore> client, void* data, size_t bytes);
  ~SharedBuffer();  // frees it: no view is left, since each holds a reference to this object
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  size_t bytes() const { return bytes_; }
  uintptr_t address() const;  // 0 once unusable
  bool freed() const { return !Usable(); }
  int exports() const { return exports_; }

  // Frees the memory now; BufferError while views of it exist. Idempotent.
  void FreeChecked();
  // The client is closing: the buffer is unusable from now on (its memory is freed with it).
  void OnClientClose();

  // The type's buffer protocol slots (installed by the module in place of pybind11's).
  static int GetBuffer(PyObject* self, Py_buffer* view, int flags);
  static void ReleaseBuffer(PyObject* self, Py_buffer* view);

 private:
  bool Usable() const { return client_ != nullptr && !detached_; }
  void Free();

  std::shared_ptr<ClientCore> client_;  // null once freed
  void* data_;
  const size_t bytes_;
  int exports_ = 0;
  bool detached_ = false;  // the client was closed
};

class Client {
 public:
  // Connects to the daemon at `socket` (None: baton_default_socket_path()).
  Client(py::handle socket, double timeout_seconds);
  ~Client();  // close()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& node_name() const { return node_name_; }
  bool closed() const { return core_ == nullptr; }
  uintptr_t handle() const;

  std::string CreateCommId();
  std::unique_ptr<Communicator> Join(const std::string& comm_id, int world_size, int rank,
                                     py::handle timeout);
  std::unique_ptr<SharedBuffer> Allocate(long long bytes);
  // Makes the buffers unusable and lets go of the handle, which is closed once the last buffer
  // object and call in flight are gone. Idempotent.
  void Close();

 private:
  // FAILED_PRECONDITION once closed.
  std::shared_ptr<ClientCore> Core() const;

  std::shared_ptr<ClientCore> core_;  // null once closed
  std::string socket_;
  std::string node_name_;
};

}  // namespace baton::python
