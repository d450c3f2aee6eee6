#include "daemon/grpc_log.h"

#include <grpc/support/log.h>

#include <string_view>

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
  spdlog::log(level, "grpc: {} ({}:{})", message, args->file, args->line);
}

}  // namespace

void RouteGrpcLogsToSpdlog() { gpr_set_log_function(&Log); }

}  // namespace baton::daemon
