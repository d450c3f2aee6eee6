#include "client/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/tls_certificates.h"

namespace baton::client {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> ReadKeyValues(const std::string& path) {
  std::map<std::string, std::string> values;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return values;
}

// Writes `text` to a new file `path` that only gets permissions `mode`.
absl::Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return BATON_ERRNO_STATUS(absl::StrCat("create ", path));
  const ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string Tail(const std::string& path, size_t max_bytes = 2000) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  return text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
}

absl::StatusOr<pid_t> Spawn(const std::string& binary, const std::vector<std::string>& args,
                            const std::string& log, bool stop_with_caller) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
  if (pid == 0) {
    setsid();  // outlive the caller's terminal and process group
    if (stop_with_caller) {
      // SIGTERM when the thread that forked ends; the caller may have died before this line.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
    }
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execvp(binary.c_str(), argv.data());
    dprintf(STDERR_FILENO, "cannot execute %s: %s\n", binary.c_str(), strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string ClusterFile(const std::string& dir) { return (fs::path(dir) / "cluster.txt").string(); }

}  // namespace

bool IsRunning(pid_t pid) {
  if (pid <= 0) return false;
  int status = 0;
  const pid_t reaped = waitpid(pid, &status, WNOHANG);
  if (reaped == pid) return false;  // it was our child and has exited
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  // Exited but not yet reaped by its parent (a zombie, state Z): it holds nothing any more.
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(") ");
  return name_end == std::string::npos || line.compare(name_end + 2, 1, "Z") != 0;
}

bool StopProcess(pid_t pid, absl::Duration grace) {
  if (!IsRunning(pid)) return true;
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (!IsRunning(pid)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  for (int i = 0; i < 100 && IsRunning(pid); ++i) absl::SleepFor(absl::Milliseconds(20));
  return false;
}

std::string DefaultBatondPath() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path sibling = self.parent_path() / "batond";
    if (fs::exists(sibling, error)) return sibling.string();
  }
  return "batond";
}

absl::StatusOr<std::vector<LocalDaemon>> ReadLocalCluster(const std::string& dir) {
  std::ifstream in(ClusterFile(dir));
  if (!in) return absl::NotFoundError(absl::StrCat("no local cluster in ", dir));
  std::vector<LocalDaemon> daemons;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    LocalDaemon daemon;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      const size_t eq = field.find('=');
      if (eq == absl::string_view::npos) continue;
      const absl::string_view key = field.substr(0, eq);
      const std::string value(field.substr(eq + 1));
      if (key == "node") daemon.node_name = value;
      if (key == "pid") (void)absl::SimpleAtoi(value, &daemon.pid);
      if (key == "socket") daemon.socket = value;
      if (key == "peer") daemon.peer_address = value;
      if (key == "data") daemon.data_address = value;
      if (key == "metrics") daemon.metrics_address = value;
      if (key == "log") daemon.log = value;
    }
    daemons.push_back(std::move(daemon));
  }
  return daemons;
}

absl::Status WriteDevCertificates(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  // One CA per process: clusters a test starts side by side trust each other's daemons.
  static const absl::StatusOr<DevCertificateAuthority>* const process_authority =
      new absl::StatusOr<DevCertificateAuthority>(
          DevCertificateAuthority::Create("baton development CA"));
  const absl::StatusOr<DevCertificateAuthority>& authority = *process_authority;
  if (!authority.ok()) return authority.status();
  BATON_RETURN_IF_ERROR(
      WriteFile((fs::path(dir) / "ca.pem").string(), authority->certificate_pem(), 0644));
  for (const std::string& name : names) {
    if (name.empty() || name.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("not a node name: '", name, "'"));
    }
    absl::StatusOr<KeyAndCertificate> issued = authority->Issue(name);
    if (!issued.ok()) return issued.status();
    BATON_RETURN_IF_ERROR(
        WriteFile((fs::path(dir) / (name + ".pem")).string(), issued->certificate_pem, 0644));
    BATON_RETURN_IF_ERROR(
        WriteFile((fs::path(dir) / (name + ".key")).string(), issued->key_pem, 0600));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LocalDaemon>> StartLocalCluster(const LocalClusterOptions& options) {
  if (options.nodes < 1) return absl::InvalidArgumentError("a cluster needs at least one node");
  std::error_code error;
  fs::create_directories(options.dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", options.dir, ": ", error.message()));
  }
  if (absl::StatusOr<std::vector<LocalDaemon>> existing = ReadLocalCluster(options.dir);
      existing.ok()) {
    for (const LocalDaemon& daemon : *existing) {
      if (IsRunning(daemon.pid)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "a local cluster is already running in ", options.dir, " (", daemon.node_name,
            " is pid ", daemon.pid, "); stop it with `baton local down`"));
      }
    }
  }

  std::vector<LocalDaemon> daemons;
  std::vector<std::string> ready_files;
  auto fail = [&](absl::Status status) {
    for (const LocalDaemon& daemon : daemons) StopProcess(daemon.pid, absl::Seconds(5));
    return status;
  };
  const fs::path tls_dir = fs::path(options.dir) / "tls";
  if (options.tls) {
    std::vector<std::string> names;
    names.reserve(options.nodes);
    for (int i = 0; i < options.nodes; ++i) names.push_back(absl::StrCat("node-", i));
    BATON_RETURN_IF_ERROR(WriteDevCertificates(tls_dir.string(), names));
  }
  for (int i = 0; i < options.nodes; ++i) {
    LocalDaemon daemon;
    daemon.node_name = absl::StrCat("node-", i);
    if (options.tls) {
      daemon.tls_ca = (tls_dir / "ca.pem").string();
      daemon.tls_cert = (tls_dir / (daemon.node_name + ".pem")).string();
      daemon.tls_key = (tls_dir / (daemon.node_name + ".key")).string();
    }
    daemon.socket = (fs::path(options.dir) / (daemon.node_name + ".sock")).string();
    daemon.log = (fs::path(options.dir) / (daemon.node_name + ".log")).string();
    const std::string ready = (fs::path(options.dir) / (daemon.node_name + ".ready")).string();
    fs::remove(ready, error);
    std::vector<std::string> args = {
        "--node-name=" + daemon.node_name, "--socket=" + daemon.socket,
        "--peer-listen=127.0.0.1:0",       "--data-listen=127.0.0.1:0",
        "--metrics-listen=127.0.0.1:0",    "--advertise-host=127.0.0.1",
        "--ready-file=" + ready,
    };
    if (options.tls) {
      args.push_back("--tls-cert=" + daemon.tls_cert);
      args.push_back("--tls-key=" + daemon.tls_key);
      args.push_back("--tls-ca=" + daemon.tls_ca);
    }
    args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
    absl::StatusOr<pid_t> pid = Spawn(options.batond, args, daemon.log, options.stop_with_caller);
    if (!pid.ok()) return fail(pid.status());
    daemon.pid = *pid;
    daemons.push_back(daemon);
    ready_files.push_back(ready);
  }

  const absl::Time deadline = absl::Now() + options.start_timeout;
  for (size_t i = 0; i < daemons.size(); ++i) {
    LocalDaemon& daemon = daemons[i];
    while (!fs::exists(ready_files[i], error)) {
      if (!IsRunning(daemon.pid)) {
        return fail(
            absl::UnavailableError(absl::StrCat(daemon.node_name, " exited during start; ",
                                                daemon.log, " ends with:\n", Tail(daemon.log))));
      }
      if (absl::Now() > deadline) {
        return fail(absl::DeadlineExceededError(
            absl::StrCat(daemon.node_name, " did not become ready within ",
                         absl::FormatDuration(options.start_timeout), "; see ", daemon.log)));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    std::map<std::string, std::string> values = ReadKeyValues(ready_files[i]);
    daemon.peer_address = values["peer_address"];
    daemon.data_address = values["data_address"];
    daemon.metrics_address = values["metrics_address"];
  }

  std::ofstream out(ClusterFile(options.dir), std::ios::trunc);
  out << "# baton local cluster: one daemon per line\n";
  for (const LocalDaemon& daemon : daemons) {
    out << "node=" << daemon.node_name << " pid=" << daemon.pid << " socket=" << daemon.socket
        << " peer=" << daemon.peer_address << " data=" << daemon.data_address
        << " metrics=" << daemon.metrics_address << " log=" << daemon.log << "\n";
  }
  if (!out)
    return fail(absl::InternalError(absl::StrCat("cannot write ", ClusterFile(options.dir))));
  return daemons;
}

absl::Status StopLocalCluster(const std::string& dir, absl::Duration grace) {
  absl::StatusOr<std::vector<LocalDaemon>> daemons = ReadLocalCluster(dir);
  if (!daemons.ok()) return daemons.status();
  // Signal all first so they shut down in parallel, then wait for each.
  for (const LocalDaemon& daemon : *daemons) {
    if (IsRunning(daemon.pid)) kill(daemon.pid, SIGTERM);
  }
  std::vector<std::string> forced;
  for (const LocalDaemon& daemon : *daemons) {
    if (!StopProcess(daemon.pid, grace)) forced.push_back(daemon.node_name);
  }
  std::error_code error;
  fs::remove(ClusterFile(dir), error);
  if (!forced.empty()) {
    return absl::DeadlineExceededError(absl::StrCat("had to kill ", forced.size(),
                                                    " daemon(s) that did not stop within ",
                                                    absl::FormatDuration(grace)));
  }
  return absl::OkStatus();
}

}  // namespace baton::client
