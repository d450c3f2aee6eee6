#include "python/src/buffers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <utility>

#include "python/src/errors.h"

namespace baton::python {
namespace {

// The package's adapter (SetBufferAdapter). Never freed: it may be called until exit.
py::object* const adapter = new py::object();

template <typename Enum>
Enum EnumOf(py::handle value, const char* what, baton_code_t (*parse)(const char*, Enum*),
            const char* (*name)(Enum)) {
  if (py::isinstance<py::str>(value)) {
    const std::string text = value.cast<std::string>();
    Enum parsed;
    if (parse(text.c_str(), &parsed) == BATON_OK) return parsed;
    Invalid(std::string("unknown ") + what + " '" + text + "'");
  }
  if (PyLong_Check(value.ptr()) != 0 && PyBool_Check(value.ptr()) == 0) {
    const long long raw = value.cast<long long>();
    if (raw >= 0 && raw <= INT_MAX) {
      // Copied, not cast: a C++ enum may not hold a value outside its range.
      const int as_int = static_cast<int>(raw);
      Enum candidate;
      std::memcpy(&candidate, &as_int, sizeof(candidate));
      if (std::strcmp(name(candidate), "unknown") != 0) return candidate;
    }
    Invalid(std::string("unknown ") + what + " " + std::to_string(raw));
  }
  throw py::type_error(std::string(what) + " must be a name or a baton enum value, not " +
                       py::str(py::type::handle_of(value)).cast<std::string>());
}

// The baton type of a buffer protocol format ("f", "<i", ...) with `itemsize` bytes per item.
std::optional<baton_dtype_t> FormatType(const std::string& format, Py_ssize_t itemsize) {
  std::string code = format;
  if (!code.empty() && (code[0] == '@' || code[0] == '=' || code[0] == '<')) code.erase(0, 1);
  if (code.size() != 1) return std::nullopt;  // big-endian, structs, arrays of items, ...
  switch (code[0]) {
    case 'b':
      return BATON_INT8;
    case 'B':
      return BATON_UINT8;
    case 'e':
      return BATON_FLOAT16;
    case 'f':
      return BATON_FLOAT32;
    case 'd':
      return BATON_FLOAT64;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return BATON_INT32;
      if (itemsize == 8) return BATON_INT64;
      return std::nullopt;
    case 'I':
    case 'L':
    case 'Q':
      if (itemsize == 4) return BATON_UINT32;
      if (itemsize == 8) return BATON_UINT64;
      return std::nullopt;
    default:
      return std::nullopt;  // int16 ('h'), bool, complex, ...: only with dtype=
  }
}

}  // namespace

baton_dtype_t DTypeOf(py::handle value) {
  return EnumOf<baton_dtype_t>(value, "dtype", baton_dtype_parse, baton_dtype_name);
}
baton_reduce_op_t ReduceOpOf(py::handle value) {
  return EnumOf<baton_reduce_op_t>(value, "reduce op", baton_reduce_op_parse, baton_reduce_op_name);
}
baton_algorithm_t AlgorithmOf(py::handle value) {
  if (value.is_none()) return BATON_ALGORITHM_AUTO;
  return EnumOf<baton_algorithm_t>(value, "algorithm", baton_algorithm_parse, baton_algorithm_name);
}

int64_t MillisOf(py::handle seconds, const char* what) {
  if (seconds.is_none()) return 0;
  const double value = py::cast<double>(seconds);
  if (!(value > 0)) Invalid(std::string(what) + " must be positive seconds or None");
  constexpr double kLongest = 1e15;  // milliseconds: ~30,000 years, still an int64
  return static_cast<int64_t>(std::ceil(std::min(value * 1000.0, kLongest)));
}

baton_call_options_t OptionsOf(const Extras& extras) {
  baton_call_options_t options;
  baton_call_options_init(&options);
  options.timeout_ms = MillisOf(extras.timeout, "timeout");
  options.algorithm = AlgorithmOf(extras.algorithm);
  return options;
}

void ReleaseView::operator()(Py_buffer* view) const {
  PyBuffer_Release(view);
  delete view;
}

void SetBufferAdapter(py::object function) { *adapter = std::move(function); }

std::string TypeName(baton_dtype_t type) { return baton_dtype_name(type); }

Buffer Acquire(py::handle object, const std::string& role, bool writable, Held& held) {
  py::object source = py::reinterpret_borrow<py::object>(object);
  std::optional<baton_dtype_t> hint;
  if (PyObject_CheckBuffer(source.ptr()) == 0) {
    const py::object adapted =
        *adapter && !adapter->is_none() ? (*adapter)(source) : py::object(py::none());
    if (adapted.is_none()) {
      throw py::type_error(role +
                           " must support the buffer protocol (a numpy array, memoryview, "
                           "bytearray or baton.SharedBuffer) or be a CPU torch tensor, not " +
                           py::str(py::type::handle_of(object)).cast<std::string>());
    }
    const auto pair = adapted.cast<py::tuple>();
    source = pair[0];
    if (!pair[1].is_none()) hint = DTypeOf(pair[1]);
  }
  auto raw = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(source.ptr(), raw.get(), PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    throw py::error_already_set();
  }
  View view(raw.release());
  Buffer buffer;
  buffer.role = role;
  buffer.data = view->buf;
  buffer.bytes = static_cast<size_t>(view->len);
  buffer.format = view->format != nullptr ? view->format : "B";
  if (PyBuffer_IsContiguous(view.get(), 'C') == 0) {
    Invalid(role +
            " is not C-contiguous: pass a contiguous buffer (numpy.ascontiguousarray(x), "
            "tensor.contiguous()), or copy the slice first");
  }
  if (writable && view->readonly != 0) {
    Invalid(role + " is read-only, and the call writes its result into it");
  }
  buffer.type = hint ? hint : FormatType(buffer.format, view->itemsize);
  held.push_back(std::move(view));
  return buffer;
}

baton_dtype_t Settle(const std::string& op, py::handle dtype, std::initializer_list<Buffer*> all) {
  baton_dtype_t type = BATON_UINT8;
  if (!dtype.is_none()) {
    type = DTypeOf(dtype);
  } else {
    const Buffer* first = nullptr;
    for (const Buffer* b : all) {
      if (b == nullptr) continue;
      if (!b->type) {
        Invalid(op + ": cannot tell the element type of " + b->role + " (buffer format '" +
                b->format + "'): pass dtype=, e.g. dtype=\"bfloat16\" for bfloat16 held as uint16");
      }
      if (first == nullptr) {
        first = b;
      } else if (*b->type != *first->type) {
        Invalid(op + ": " + first->role + " holds " + TypeName(*first->type) + " elements but " +
                b->role + " " + TypeName(*b->type) + ": use one type, or pass dtype=");
      }
    }
    if (first != nullptr) type = *first->type;
  }
  const size_t size = baton_dtype_size(type);
  for (Buffer* b : all) {
    if (b == nullptr) continue;
    if (b->bytes % size != 0) {
      Invalid(op + ": " + b->role + " has " + std::to_string(b->bytes) +
              " bytes, not a whole number of " + TypeName(type) + " elements (" +
              std::to_string(size) + " bytes each)");
    }
    b->count = b->bytes / size;
  }
  return type;
}

void ExpectCount(const std::string& op, const Buffer& buffer, size_t want, baton_dtype_t type,
                 const std::string& because) {
  if (buffer.count != want) {
    Invalid(op + ": " + buffer.role + " holds " + std::to_string(buffer.count) + " " +
            TypeName(type) + " elements but needs " + std::to_string(want) + " (" + because + ")");
  }
}

}  // namespace baton::python
