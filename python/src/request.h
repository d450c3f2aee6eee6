#pragma once

// baton.Request, the handle of a communicator, and groups: what keeps a C call's buffers and
// communicator alive for as long as the call may use them.
//  - A Request holds its operation's buffers until the operation completes. Dropped before
//    that, it is kept aside (an orphan) and freed, buffers and all, once its operation has
//    completed (ReapOrphans, called as new operations are submitted).
//  - Inside a group (baton_group_start/end) a blocking call only queues its operation, so its
//    buffers are held until the thread's outermost group_end has run it.
// Everything here is used with the GIL held.

#include <pybind11/pybind11.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "baton/baton.h"
#include "python/src/buffers.h"

namespace baton::python {

namespace py = pybind11;

// A communicator's handle, destroyed (baton_comm_destroy) once nothing uses it: the Communicator
// until close(), and its calls and requests in flight.
class CommCore {
 public:
  explicit CommCore(baton_comm_t* handle);
  ~CommCore();  // not in a forked child
  CommCore(const CommCore&) = delete;
  CommCore& operator=(const CommCore&) = delete;
  baton_comm_t* handle() const { return handle_; }

 private:
  baton_comm_t* const handle_;
  const pid_t pid_;
};

class Request {
 public:
  Request(baton_request_t* handle, Held held, std::shared_ptr<CommCore> comm);
  ~Request();  // an orphan if the operation is still running
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Waits up to `timeout` seconds (None: until it completes) and raises the operation's error;
  // DEADLINE_EXCEEDED if it is still running then. Ctrl-C interrupts the wait.
  void Wait(py::handle timeout);
  // Whether the operation has completed, successfully or not (never raises its error).
  bool Test();

 private:
  void Complete(baton_code_t code, const std::string& message);

  baton_request_t* handle_;  // null once complete
  Held held_;
  std::shared_ptr<CommCore> comm_;
  std::optional<std::pair<baton_code_t, std::string>> result_;
};

// Frees the dropped requests whose operations have completed.
void ReapOrphans();

// This thread's groups (baton_group_start/end). GroupEnd raises the group's first error.
void GroupStart();
void GroupEnd();
// Whether this thread is inside a group.
bool InGroup();
// Keeps a queued blocking call's buffers until this thread's outermost group ends.
void HoldUntilGroupEnd(Held held);

}  // namespace baton::python
