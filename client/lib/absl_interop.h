#pragma once

// For Baton's own programs (the CLI, the tests) that use the public C++ API (<baton/baton.hpp>)
// next to absl: conversions between the two. Not installed; the codes are the same numbers.

#include <chrono>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "baton/baton.hpp"

namespace baton {

inline absl::Status ToAbsl(const Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

inline absl::Duration ToAbsl(std::chrono::nanoseconds d) { return absl::FromChrono(d); }

}  // namespace baton
