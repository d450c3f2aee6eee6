#pragma once

// A development cluster of batond processes on this machine, each with its own unix socket, peer
// port, data port, metrics port and log under one directory - what `baton local up` starts and
// what integration tests use. Only loopback addresses are used.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton::client {

struct LocalDaemon {
  std::string node_name;
  pid_t pid = 0;
  std::string socket;
  std::string peer_address;
  std::string data_address;
  std::string metrics_address;
  std::string log;
  // Its mutual-TLS files (empty without TLS): certificate, key and the cluster's CA bundle.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
};

struct LocalClusterOptions {
  std::string dir;  // created if missing; holds sockets, logs and cluster.txt
  int nodes = 4;
  std::string batond;                   // path of the batond binary
  std::vector<std::string> extra_args;  // passed to every daemon, e.g. {"--op-timeout=5s"}
  absl::Duration start_timeout = absl::Seconds(30);
  // The daemons get SIGTERM when the thread that started them ends, however it ends (a killed
  // test must not leave daemons behind); otherwise they outlive the caller, as `baton local up`
  // needs.
  bool stop_with_caller = false;
  // Mutual TLS between the daemons: a throwaway CA (made once per process; its key never leaves
  // memory) and one certificate per daemon, under <dir>/tls (WriteDevCertificates).
  bool tls = true;
};

// Writes a throwaway CA (its certificate as <dir>/ca.pem; its key is never written) and, for each
// of `names`, <dir>/<name>.pem and <dir>/<name>.key (mode 0600): certificates that name the node
// and serve as TLS client and server, for daemons' tls_cert, tls_key and tls_ca. The CA is made
// once per process, so clusters one process starts (a test's) trust each other. For development
// clusters and tests, never production.
absl::Status WriteDevCertificates(const std::string& dir, const std::vector<std::string>& names);

// Starts the daemons (in their own sessions, so they outlive the caller unless
// stop_with_caller), waits until each has written its ready file, and records them in
// <dir>/cluster.txt. FailedPrecondition if the directory already holds a running cluster. On
// failure, daemons already started are stopped.
absl::StatusOr<std::vector<LocalDaemon>> StartLocalCluster(const LocalClusterOptions& options);

// Reads <dir>/cluster.txt. NotFound if there is no cluster there.
absl::StatusOr<std::vector<LocalDaemon>> ReadLocalCluster(const std::string& dir);

// True if the process is alive (and not a zombie of ours).
bool IsRunning(pid_t pid);

// Sends SIGTERM and waits up to `grace` for the process to exit, then SIGKILLs it.
// Returns true if it stopped within the grace period.
bool StopProcess(pid_t pid, absl::Duration grace);

// Stops every daemon of the cluster in `dir` and removes cluster.txt (logs are kept).
absl::Status StopLocalCluster(const std::string& dir, absl::Duration grace = absl::Seconds(10));

// The batond binary next to the running executable, else "batond" (found on PATH).
std::string DefaultBatondPath();

}  // namespace baton::client
