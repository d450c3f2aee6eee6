#include "python/src/errors.h"

namespace baton::python {
namespace {

// The exception classes, made at import and kept for the interpreter's life.
struct ErrorClasses {
  py::object base;         // baton.BatonError(RuntimeError)
  py::object timeout;      // DEADLINE_EXCEEDED: also the builtin TimeoutError
  py::object invalid;      // INVALID_ARGUMENT: also ValueError
  py::object unavailable;  // UNAVAILABLE: also ConnectionError
};
ErrorClasses* error_classes = nullptr;  // never freed: errors may be raised at exit

py::object NewErrorClass(const char* name, const char* doc, py::handle bases, baton_code_t code) {
  py::dict attributes;
  attributes["code"] = static_cast<int>(code);
  attributes["code_name"] = baton_code_name(code);
  attributes["message"] = "";
  PyObject* type = PyErr_NewExceptionWithDoc(name, doc, bases.ptr(), attributes.ptr());
  if (type == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(type);
}

// Sets the Python error for `error`: "<CODE_NAME>: <message>", with .code, .code_name and
// .message.
void Raise(const CallError& error) {
  const ErrorClasses& classes = *error_classes;
  const py::object& type = error.code() == BATON_DEADLINE_EXCEEDED  ? classes.timeout
                           : error.code() == BATON_INVALID_ARGUMENT ? classes.invalid
                           : error.code() == BATON_UNAVAILABLE      ? classes.unavailable
                                                                    : classes.base;
  const char* name = baton_code_name(error.code());
  py::object raised = type(Text(std::string(name) + ": " + error.message()));
  raised.attr("code") = static_cast<int>(error.code());
  raised.attr("code_name") = name;
  raised.attr("message") = Text(error.message());
  PyErr_SetObject(type.ptr(), raised.ptr());
}

}  // namespace

void Invalid(const std::string& message) { throw CallError(BATON_INVALID_ARGUMENT, message); }

py::str Text(const std::string& text) {
  PyObject* decoded =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

void RegisterErrors(py::module_& module) {
  auto* classes = new ErrorClasses;
  classes->base = NewErrorClass(
      "baton.BatonError",
      "A libbaton call failed. .code is the canonical status code (an int), .code_name its name "
      "(\"UNAVAILABLE\"), .message libbaton's message; str() is \"<code_name>: <message>\".",
      PyExc_RuntimeError, BATON_UNKNOWN);
  classes->timeout = NewErrorClass(
      "baton.TimeoutError", "DEADLINE_EXCEEDED: a deadline passed (also the builtin TimeoutError).",
      py::make_tuple(classes->base, py::handle(PyExc_TimeoutError)), BATON_DEADLINE_EXCEEDED);
  classes->invalid = NewErrorClass(
      "baton.InvalidArgumentError",
      "INVALID_ARGUMENT: a bad argument; nothing was done (also ValueError).",
      py::make_tuple(classes->base, py::handle(PyExc_ValueError)), BATON_INVALID_ARGUMENT);
  classes->unavailable = NewErrorClass(
      "baton.UnavailableError",
      "UNAVAILABLE: a daemon or rank was lost, or no daemon answers (also ConnectionError).",
      py::make_tuple(classes->base, py::handle(PyExc_ConnectionError)), BATON_UNAVAILABLE);
  error_classes = classes;
  module.attr("BatonError") = classes->base;
  module.attr("TimeoutError") = classes->timeout;
  module.attr("InvalidArgumentError") = classes->invalid;
  module.attr("UnavailableError") = classes->unavailable;
  // pybind11 takes a function pointer with the exception_ptr by value.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const CallError& error) {
      try {
        Raise(error);
      } catch (py::error_already_set& failed) {
        failed.restore();
      }
    }
  });
}

}  // namespace baton::python
