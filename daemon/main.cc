// batond: the per-node Baton daemon.

#include <malloc.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

#include "absl/strings/string_view.h"
#include "common/lock_checks.h"
#include "common/logging.h"
#include "common/options.h"
#include "common/version.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/grpc_log.h"
#include "grpc/grpc.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsage[] = R"(batond - the Baton collective-communication daemon (one per node)

Usage: batond [--config FILE] [--option=value ...]
       batond --version

Serves the client API on a unix socket, the peer API and the data plane on TCP, and Prometheus
metrics over HTTP. Every option can also be set in the config file (see docs/config.md); flags
override the file. SIGTERM or SIGINT stops the daemon cleanly.

Options:
)";

}  // namespace

int main(int argc, char** argv) {
  baton::daemon::Config config;
  baton::OptionSet options;
  std::string config_file;
  options.AddString("config", &config_file, "config file");
  baton::daemon::RegisterOptions(options, config);
  if (argc == 2 && absl::string_view(argv[1]) == "--version") {
    std::cout << "batond " << baton::kBatonVersion << "\n";
    return 0;
  }
  if (baton::WantsHelp(argc, argv)) {
    std::cout << kUsage;
    baton::OptionSet listing;
    std::string no_file;
    listing.AddString("config", &no_file, "config file (\"key = value\" lines, docs/config.md)");
    baton::daemon::Config defaults;
    baton::daemon::RegisterOptions(listing, defaults);
    std::cout << listing.Help();
    return 0;
  }
  // The config file first, then flags on top of it.
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg.rfind("--config=", 0) == 0) config_file = std::string{arg.substr(9)};
    if (arg == "--config" && i + 1 < argc) config_file = argv[i + 1];
  }
  if (!config_file.empty()) {
    if (absl::Status status = options.ParseConfigFile(config_file); !status.ok()) {
      std::cerr << "batond: " << status.message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::vector<std::string>> positional = options.ParseFlags(argc, argv);
  if (!positional.ok()) {
    std::cerr << "batond: " << positional.status().message() << "\n";
    return 2;
  }
  if (!positional->empty()) {
    std::cerr << "batond: unexpected argument '" << positional->front() << "' (see --help)\n";
    return 2;
  }
  if (absl::Status status = baton::daemon::FinalizeConfig(config); !status.ok()) {
    std::cerr << "batond: " << status.message() << "\n";
    return 2;
  }
  if (absl::Status status = baton::InitLogging("batond", config.log_level); !status.ok()) {
    std::cerr << "batond: " << status.message() << "\n";
    return 2;
  }
  baton::daemon::RouteGrpcLogsToSpdlog();

  // Off unless $BATON_DEBUG_LOCKS asks for it (the tests do): common/lock_checks.h.
  baton::ConfigureLockChecks();

  // Block the stop signals in every thread; this one waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // One reference to the gRPC library for the life of the process, so that the last channel or
  // server to go at shutdown does not shut gRPC down itself: grpc_shutdown joins gRPC's executor
  // threads, and one of them may sit in a poll with a timer of seconds (seen: 9 s after SIGTERM).
  // Exiting the process frees what gRPC holds.
  grpc_init();

  absl::StatusOr<std::unique_ptr<baton::daemon::Daemon>> daemon =
      baton::daemon::Daemon::Start(config);
  if (!daemon.ok()) {
    spdlog::error("cannot start: {}", daemon.status().ToString());
    return 1;
  }
  // glibc keeps freed memory in its arenas for reuse: after a burst of connections to the peer
  // port (each with a TLS handshake's buffers) the daemon would go on holding their peak. Give it
  // back to the system every kTrimPeriod, so that what batond holds after an attack returns to
  // what it holds at rest (measured: scripts/hostile_connections.py).
  constexpr timespec kTrimPeriod{10, 0};
  int signal_number = -1;
  while (signal_number < 0) {
    signal_number = sigtimedwait(&stop_signals, nullptr, &kTrimPeriod);
    if (signal_number < 0 && errno == EAGAIN) malloc_trim(0);
  }
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Shutdown();
  return 0;
}
