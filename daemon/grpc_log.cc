#include "daemon/grpc_log.h"

#include <grpc/support/log.h>

#include <string_view>

#include "common/log_limiter.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {
namespace {

void Log(gpr_log_func_args* args) {
  const std::string_view message(args->message);
  constexpr std::string_view kServerNameNoise = "No match found for server name";
  spdlog::level::level_enum level = spdlog::level::info;
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      level = spdlog::level::debug;
      break;
    case GPR_LOG_SEVERITY_INFO:
      level = spdlog::level::info;
      break;
    case GPR_LOG_SEVERITY_ERROR:
      level = message.find(kServerNameNoise) == std::string_view::npos ? spdlog::level::err
                                                                       : spdlog::level::debug;
      break;
  }
  if (level == spdlog::level::debug) {
    spdlog::log(level, "grpc: {} ({}:{})", message, args->file, args->line);
    return;
  }
  // Anyone who reaches the peer port can make gRPC log (a failed TLS handshake, a malformed
  // request), once per connection: a few lines a minute at most.
  static LogLimiter limiter(20, absl::Minutes(1));
  limiter.Log(level, "grpc: {} ({}:{})", message, args->file, args->line);
}

}  // namespace

void RouteGrpcLogsToSpdlog() { gpr_set_log_function(&Log); }

}  // namespace baton::daemon
