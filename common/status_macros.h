#pragma once

// Small helpers that turn fallible calls into absl::Status propagation. Our code throws nothing;
// every C API failure (errno, CUDA, verbs) is wrapped once here with the call and its location.

#include <cerrno>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton {

// Maps an errno value to the canonical code that fits it best.
absl::StatusCode ErrnoToCode(int errno_value);

// Returns a status for a failed POSIX call: "<what> failed: <strerror> [<file>:<line>]".
absl::Status ErrnoStatus(int errno_value, absl::string_view what, const char* file, int line);

// Prefixes an error's message with context, keeping its code. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace baton

#define BATON_STATUS_CONCAT_INNER(a, b) a##b
#define BATON_STATUS_CONCAT(a, b) BATON_STATUS_CONCAT_INNER(a, b)

#define BATON_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status baton_status_ = (expr);         \
    if (!baton_status_.ok()) return baton_status_; \
  } while (0)

#define BATON_ASSIGN_OR_RETURN(lhs, expr) \
  BATON_ASSIGN_OR_RETURN_IMPL(BATON_STATUS_CONCAT(baton_statusor_, __LINE__), lhs, expr)
// `lhs` may be a declaration ("Node node"), which parentheses would break, and
// `tmp` is always the identifier BATON_ASSIGN_OR_RETURN makes.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define BATON_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

// Evaluates a POSIX call returning -1 on failure; returns an errno status from the enclosing
// function when it fails.
#define BATON_POSIX_RETURN_IF_ERROR(call)                                            \
  do {                                                                               \
    if ((call) == -1) return ::baton::ErrnoStatus(errno, #call, __FILE__, __LINE__); \
  } while (0)

#define BATON_ERRNO_STATUS(what) ::baton::ErrnoStatus(errno, what, __FILE__, __LINE__)
