#pragma once

// The process plumbing of the device programs (device_collectives_check, device_bench): one
// batond started from a path, rank processes forked from a parent that never touches the GPU or
// libbaton itself, communicator ids made in a child, and a probe of the device in a child.
//
// Why children: CUDA must not be initialised in a process that forks afterwards, and the host
// fake's device memory and libbaton's state are per process, so the parent stays clean and every
// rank opens the device and connects on its own.
//
// Threads: none of this is thread-safe; the parent calls it from one thread.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::device_check {

using Clock = std::chrono::steady_clock;

// Seconds from `since` until now.
double Seconds(Clock::time_point since);

// Forks a child that runs `body` and _exits with its result, never returning into the caller's
// state; the child dies with its parent (PR_SET_PDEATHSIG). Returns the child's pid, or -1 when
// fork fails. stdout and stderr are flushed before the fork and at the child's end.
pid_t ForkChild(absl::FunctionRef<int()> body);

// Waits for `pid` until `deadline`, then SIGKILLs it. Its exit status, -signal when a signal
// ended it (-SIGKILL after the deadline), or -1000 when waitpid fails.
int WaitChild(pid_t pid, Clock::time_point deadline);

// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);

// A new directory "$TMPDIR/<prefix>XXXXXX" (TMPDIR defaults to /tmp), or why there is none.
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

struct DaemonOptions {
  std::string batond;                  // the executable
  std::string device;                  // batond's --device=
  std::string node_name = "devcheck";  // batond's --node-name=
};

// One batond on loopback and a unix socket in a directory, stopped (SIGTERM, then SIGKILL after
// 10 s) by the destructor.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  // Starts batond with its socket, log and ready file in `dir` and waits (30 s at most) until
  // it serves. Unavailable, with its log, when it exits during start; DeadlineExceeded when it
  // is not ready in time; Internal when it cannot be forked. Call once.
  absl::Status Start(const DaemonOptions& options, const std::string& dir);

  const std::string& socket() const { return socket_; }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  std::string socket_;
  std::string log_;
};

// `n` communicator ids from the daemon at `socket`, made in a child process (the parent never
// loads libbaton's state before forking ranks). Unavailable when the child cannot make them.
absl::StatusOr<std::vector<std::string>> MakeCommIds(const std::string& socket, int n);

// Opens device `name` (device::OpenDevice) in a child, so that the parent never initialises
// CUDA, and returns its Describe(). Unavailable, saying why, when there is no such device (no
// driver, no GPU: the programs exit 77); Internal when the child crashed or did not answer
// within 60 s.
absl::StatusOr<std::string> ProbeDevice(const std::string& name);

}  // namespace baton::device_check
