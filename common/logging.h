#pragma once

// Process-wide logging setup. Every binary calls InitLogging once; code then logs with spdlog's
// free functions (spdlog::info, spdlog::warn, ...), which go to the default logger set up here.

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/fmt/fmt.h"

namespace baton {

// Sets the default logger's name (shown in every line) and level ("trace", "debug", "info",
// "warn", "error", "off"). Returns InvalidArgument for an unknown level.
absl::Status InitLogging(absl::string_view name, absl::string_view level);

}  // namespace baton

// Debian's abseil has its own string_view type (not std::string_view): let fmt/spdlog print it.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view text, FormatContext& context) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text.data(), text.size()),
                                                    context);
  }
};
