#include "common/logging.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace baton {

absl::Status InitLogging(absl::string_view name, absl::string_view level) {
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str maps anything unknown to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level, "' (trace, debug, info, warn, error, off)"));
  }
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  auto logger = spdlog::stderr_color_mt(std::string(name));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n[%P]: %v");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace baton
