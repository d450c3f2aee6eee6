#pragma once

// How baton._C reports failures: a CallError (a code and a message) thrown by the binding's C++
// and raised in Python as baton.BatonError, or the subclass for its code, by the translator that
// RegisterErrors installs. Exceptions are pybind11's way of raising in Python; they stay inside
// this extension.

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "baton/baton.h"

namespace baton::python {

namespace py = pybind11;

// A failure to raise as baton.BatonError (or the subclass for its code).
class CallError : public std::exception {
 public:
  CallError(baton_code_t code, std::string message) : code_(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  baton_code_t code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  baton_code_t code_;
  std::string message_;
};

// Throws INVALID_ARGUMENT (baton.InvalidArgumentError, a ValueError).
[[noreturn]] void Invalid(const std::string& message);

// Runs `call`, a C call returning a baton_code_t, without the GIL; throws its error.
template <typename Call>
void Check(Call call) {
  baton_code_t code = BATON_OK;
  std::string message;
  {
    py::gil_scoped_release unlocked;
    code = call();
    if (code != BATON_OK) message = baton_last_error();
  }
  if (code != BATON_OK) throw CallError(code, message);
}

// Runs `f`, which must not touch Python or throw, without the GIL if this thread holds it
// (destructors run both ways). Plain CPython calls rather than py::gil_scoped_release, which
// destructors could not call without risking an exception.
template <typename F>
void WithoutGil(F f) noexcept {
  if (PyGILState_Check() != 0) {
    PyThreadState* const state = PyEval_SaveThread();
    f();
    PyEval_RestoreThread(state);
  } else {
    f();
  }
}

// Text from libbaton or the daemon as a str, whatever its bytes.
py::str Text(const std::string& text);

// Adds BatonError, TimeoutError, InvalidArgumentError and UnavailableError to `module` and
// translates CallError into them. Once, at import.
void RegisterErrors(py::module_& module);

}  // namespace baton::python
