#include "common/status_macros.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace baton {

absl::StatusCode ErrnoToCode(int errno_value) {
  switch (errno_value) {
    case EINVAL:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EAGAIN:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(int errno_value, absl::string_view what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return absl::Status(ErrnoToCode(errno_value),
                      absl::StrCat(what, " failed: ", std::strerror(errno_value), " [",
                                   base != nullptr ? base + 1 : file, ":", line, "]"));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace baton
