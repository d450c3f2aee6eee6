#include "python/src/request.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "python/src/errors.h"

namespace baton::python {
namespace {

// A request dropped before it completed: its buffers stay held until it does.
struct Orphan {
  baton_request_t* handle;
  Held held;
  std::shared_ptr<CommCore> comm;
};
// Never freed: held buffers must not be released at exit, when the GIL may not be held.
auto* const orphans = new std::vector<Orphan>;

struct GroupState {
  int depth = 0;
  std::vector<Held> held;  // the buffers of blocking calls queued in the group
};

GroupState& ThisThreadsGroup() {
  // Never freed: a thread-local destructor would run at thread exit without the GIL.
  thread_local auto* state = new GroupState;
  return *state;
}

}  // namespace

CommCore::CommCore(baton_comm_t* handle) : handle_(handle), pid_(getpid()) {}

CommCore::~CommCore() {
  if (getpid() == pid_) WithoutGil([this] { baton_comm_destroy(handle_); });
}

Request::Request(baton_request_t* handle, Held held, std::shared_ptr<CommCore> comm)
    : handle_(handle), held_(std::move(held)), comm_(std::move(comm)) {}

Request::~Request() {
  if (handle_ == nullptr) return;
  int finished = 0;
  baton_request_wait(handle_, 0, &finished);
  if (finished != 0) {
    baton_request_free(handle_);
  } else {
    orphans->push_back(Orphan{handle_, std::move(held_), std::move(comm_)});
  }
}

void Request::Wait(py::handle timeout) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kSliceMs = 100;  // how often Ctrl-C is looked for
  const bool forever = timeout.is_none();
  int64_t wait_ms = 0;
  if (!forever) {
    const double seconds = py::cast<double>(timeout);
    if (!(seconds >= 0)) Invalid("timeout must be >= 0 seconds or None");
    wait_ms = static_cast<int64_t>(std::ceil(std::min(seconds * 1000.0, 1e15)));
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  while (!result_) {
    int64_t slice = kSliceMs;
    if (!forever) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      slice = std::clamp<int64_t>(left, 0, kSliceMs);
    }
    int finished = 0;
    baton_code_t code = BATON_OK;
    std::string message;
    {
      py::gil_scoped_release unlocked;
      code = baton_request_wait(handle_, slice, &finished);
      if (code != BATON_OK) message = baton_last_error();
    }
    if (finished != 0) {
      Complete(code, message);
      break;
    }
    // Not done for another reason than time: e.g. waited on inside the group that queued it.
    if (code != BATON_DEADLINE_EXCEEDED) throw CallError(code, message);
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!forever && Clock::now() >= deadline) {
      throw CallError(BATON_DEADLINE_EXCEEDED, "the request is still running after " +
                                                   std::to_string(wait_ms) +
                                                   " ms; wait again, or test() it");
    }
  }
  if (result_->first != BATON_OK) throw CallError(result_->first, result_->second);
}

bool Request::Test() {
  if (result_) return true;
  int finished = 0;
  const baton_code_t code = baton_request_wait(handle_, 0, &finished);
  if (finished != 0) Complete(code, code != BATON_OK ? baton_last_error() : "");
  return finished != 0;
}

void Request::Complete(baton_code_t code, const std::string& message) {
  result_.emplace(code, message);
  baton_request_free(handle_);
  handle_ = nullptr;
  held_.clear();  // the operation no longer uses them
  comm_.reset();
}

void ReapOrphans() {
  // Finished orphans are moved out first and destroyed last: releasing their buffers may release
  // the GIL (a shared buffer's last view freeing it), and the list must be whole by then.
  std::vector<Orphan> finished;
  std::vector<Orphan> running;
  for (Orphan& orphan : *orphans) {
    int done = 0;
    baton_request_wait(orphan.handle, 0, &done);
    if (done != 0) baton_request_free(orphan.handle);
    (done != 0 ? finished : running).push_back(std::move(orphan));
  }
  orphans->swap(running);
}

void GroupStart() {
  Check([] { return baton_group_start(); });
  ++ThisThreadsGroup().depth;
}

void GroupEnd() {
  GroupState& group = ThisThreadsGroup();
  baton_code_t code = BATON_OK;
  std::string message;
  {
    py::gil_scoped_release unlocked;
    code = baton_group_end();
    if (code != BATON_OK) message = baton_last_error();
  }
  // The outermost end has run every queued operation to its end, failed or not.
  if (group.depth > 0 && --group.depth == 0) {
    const std::vector<Held> done = std::move(group.held);
    group.held.clear();
  }
  if (code != BATON_OK) throw CallError(code, message);
}

bool InGroup() { return ThisThreadsGroup().depth > 0; }

void HoldUntilGroupEnd(Held held) { ThisThreadsGroup().held.push_back(std::move(held)); }

}  // namespace baton::python
