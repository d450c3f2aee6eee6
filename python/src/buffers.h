#pragma once

// The arguments of baton._C's calls: element types, reduce ops and algorithms by name or enum
// value, timeouts in seconds, and buffers. A buffer is an object with the buffer protocol (or what
// the package's adapter turns an object into: CPU torch tensors), held as a Py_buffer for as long
// as a C call may use its memory. Counts come from the buffers' sizes and are checked here, before
// any C call, so that no call reads or writes past a buffer.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/baton.h"

namespace baton::python {

namespace py = pybind11;

// A C enum from a name ("float32") or an int (a baton.DType, ...): INVALID_ARGUMENT for an
// unknown one, TypeError for another type.
baton_dtype_t DTypeOf(py::handle value);
baton_reduce_op_t ReduceOpOf(py::handle value);
baton_algorithm_t AlgorithmOf(py::handle value);  // None: BATON_ALGORITHM_AUTO

// Seconds (a positive float; None: the library's default) as the C API's milliseconds (0 for the
// default).
int64_t MillisOf(py::handle seconds, const char* what);

// The keyword arguments every operation takes.
struct Extras {
  py::object dtype;      // None: the buffers' own type
  py::object timeout;    // seconds; None: the library's default
  py::object algorithm;  // None, "auto", "ring", ... or a baton.Algorithm
  bool async_op = false;
};

baton_call_options_t OptionsOf(const Extras& extras);

struct ReleaseView {
  void operator()(Py_buffer* view) const;
};
// A Py_buffer this module holds; destroy only with the GIL held. On the heap because a Py_buffer
// may point into itself (PyBuffer_FillInfo's shape), so it must never move.
using View = std::unique_ptr<Py_buffer, ReleaseView>;
// The buffers one operation uses.
using Held = std::vector<View>;

// One buffer argument of a call. Plain data: safe to use without the GIL.
struct Buffer {
  std::string role;  // "send", "recv", ... for messages
  void* data = nullptr;
  size_t bytes = 0;
  std::optional<baton_dtype_t> type;  // its element type, if its format (or the adapter) says
  std::string format;
  size_t count = 0;  // elements of the call's type, set by Settle
};

// Takes hold of `object`'s memory for a call, into `held`. `writable`: the call writes into it.
// TypeError for an object without the buffer protocol that the adapter does not take;
// INVALID_ARGUMENT for memory that is not C-contiguous, or read-only where it is written.
Buffer Acquire(py::handle object, const std::string& role, bool writable, Held& held);

// Sets the function that turns an object without the buffer protocol into (buffer object, dtype
// name or None), or returns None for objects it does not take.
void SetBufferAdapter(py::object adapter);

// Settles a call's element type (`dtype`, or else the buffers' common type) and each buffer's
// count, for `op` ("all_reduce", for messages). Null entries are skipped.
baton_dtype_t Settle(const std::string& op, py::handle dtype, std::initializer_list<Buffer*> all);

// INVALID_ARGUMENT naming both counts unless `buffer` holds `want` elements.
void ExpectCount(const std::string& op, const Buffer& buffer, size_t want, baton_dtype_t type,
                 const std::string& because);

std::string TypeName(baton_dtype_t type);

}  // namespace baton::python
