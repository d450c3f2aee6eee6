#include "python/src/client.h"

#include <unistd.h>

#include <utility>

#include "python/src/buffers.h"
#include "python/src/communicator.h"
#include "python/src/errors.h"

namespace baton::python {

ClientCore::ClientCore(baton_client_t* handle) : handle_(handle), pid_(getpid()) {}

ClientCore::~ClientCore() {
  // A forked child shares the parent's session socket: closing it here would end the parent's
  // session.
  if (!forked()) WithoutGil([this] { baton_client_close(handle_); });
}

bool ClientCore::forked() const { return getpid() != pid_; }

SharedBuffer::SharedBuffer(std::shared_ptr<ClientCore> client, void* data, size_t bytes)
    : client_(std::move(client)), data_(data), bytes_(bytes) {
  client_->buffers.insert(this);
}

SharedBuffer::~SharedBuffer() { Free(); }

uintptr_t SharedBuffer::address() const {
  return Usable() ? reinterpret_cast<uintptr_t>(data_) : 0;
}

void SharedBuffer::FreeChecked() {
  if (exports_ > 0) {
    throw py::buffer_error("cannot free the shared buffer: " + std::to_string(exports_) +
                           (exports_ == 1 ? " view" : " views") +
                           " of it (numpy arrays, memoryviews, tensors, pending requests) still "
                           "exist; delete them first");
  }
  Free();
}

void SharedBuffer::OnClientClose() { detached_ = true; }

int SharedBuffer::GetBuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  SharedBuffer* buffer = nullptr;
  try {
    buffer = py::handle(self).cast<SharedBuffer*>();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_BufferError, "not a baton.SharedBuffer");
    return -1;
  }
  if (!buffer->Usable()) {
    PyErr_SetString(PyExc_BufferError, buffer->client_ == nullptr
                                           ? "the shared buffer was freed"
                                           : "the shared buffer's client was closed");
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, buffer->data_, static_cast<Py_ssize_t>(buffer->bytes_),
                        /*readonly=*/0, flags) != 0) {
    return -1;
  }
  ++buffer->exports_;
  return 0;
}

void SharedBuffer::ReleaseBuffer(PyObject* self, Py_buffer* /*view*/) {
  SharedBuffer* buffer = nullptr;
  try {
    buffer = py::handle(self).cast<SharedBuffer*>();
  } catch (const py::cast_error&) {
    return;  // cannot happen: GetBuffer exported it
  }
  --buffer->exports_;
}

void SharedBuffer::Free() {
  if (client_ == nullptr) return;
  client_->buffers.erase(this);
  std::shared_ptr<ClientCore> client = std::move(client_);
  void* data = data_;
  data_ = nullptr;
  detached_ = false;
  WithoutGil([&client, data] {
    if (!client->forked()) baton_client_free(client->handle(), data);
    client.reset();  // the last reference closes the client
  });
}

Client::Client(py::handle socket, double timeout_seconds) {
  socket_ =
      socket.is_none() ? std::string(baton_default_socket_path()) : socket.cast<std::string>();
  const int64_t ms = MillisOf(py::float_(timeout_seconds), "timeout");
  baton_client_t* handle = nullptr;
  Check([&] { return baton_client_connect(socket_.c_str(), ms, &handle); });
  core_ = std::make_shared<ClientCore>(handle);
  node_name_ = baton_client_node_name(handle);
}

Client::~Client() { Close(); }

uintptr_t Client::handle() const { return reinterpret_cast<uintptr_t>(Core()->handle()); }

std::string Client::CreateCommId() {
  const std::shared_ptr<ClientCore> core = Core();
  char id[BATON_COMM_ID_MAX] = {};
  Check([&] { return baton_client_create_comm_id(core->handle(), id, sizeof(id)); });
  return id;
}

std::unique_ptr<Communicator> Client::Join(const std::string& comm_id, int world_size, int rank,
                                           py::handle timeout) {
  const std::shared_ptr<ClientCore> core = Core();
  const int64_t ms = MillisOf(timeout, "timeout");
  baton_comm_t* comm = nullptr;
  Check([&] {
    return baton_client_join(core->handle(), comm_id.c_str(), world_size, rank, ms, &comm);
  });
  return std::make_unique<Communicator>(std::make_shared<CommCore>(comm), core);
}

std::unique_ptr<SharedBuffer> Client::Allocate(long long bytes) {
  if (bytes <= 0) Invalid("allocate: nbytes must be positive, not " + std::to_string(bytes));
  const std::shared_ptr<ClientCore> core = Core();
  void* data = nullptr;
  Check([&] { return baton_client_alloc(core->handle(), static_cast<size_t>(bytes), &data); });
  return std::make_unique<SharedBuffer>(core, data, static_cast<size_t>(bytes));
}

void Client::Close() {
  if (core_ == nullptr) return;
  core_->closed = true;
  for (SharedBuffer* buffer : core_->buffers) buffer->OnClientClose();
  std::shared_ptr<ClientCore> core = std::move(core_);
  WithoutGil([&core] { core.reset(); });
}

std::shared_ptr<ClientCore> Client::Core() const {
  if (core_ == nullptr || core_->closed) {
    throw CallError(BATON_FAILED_PRECONDITION, "the client is closed");
  }
  return core_;
}

}  // namespace baton::python
