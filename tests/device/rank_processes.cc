#include "tests/device/rank_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/baton.h"
#include "device/device.h"

namespace baton::device_check {
namespace {

// Everything a child wrote to the read end `fd` until it closed its end; closes `fd`.
std::string ReadAll(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t got;
  while ((got = read(fd, buffer, sizeof buffer)) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0) text.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return text;
}

bool WriteAll(int fd, const std::string& text) {
  return write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

}  // namespace

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

pid_t ForkChild(absl::FunctionRef<int()> body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(3);  // the parent died before prctl
    const int rc = body();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  return pid;
}

int WaitChild(pid_t pid, Clock::time_point deadline) {
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return -1000;
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", prefix, "XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", dir, ": ", std::strerror(errno)));
  }
  return dir;
}

absl::Status Daemon::Start(const DaemonOptions& options, const std::string& dir) {
  socket_ = dir + "/batond.sock";
  log_ = dir + "/batond.log";
  const std::string ready = dir + "/batond.ready";
  const std::vector<std::string> args = {options.batond,
                                         "--node-name=" + options.node_name,
                                         "--socket=" + socket_,
                                         "--peer-listen=127.0.0.1:0",
                                         "--data-listen=127.0.0.1:0",
                                         "--metrics-listen=127.0.0.1:0",
                                         "--advertise-host=127.0.0.1",
                                         "--ready-file=" + ready,
                                         "--device=" + options.device,
                                         "--op-timeout=30s",
                                         "--probe-interval=0",
                                         "--log-level=warn"};
  pid_ = ForkChild([&] {
    const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    // The daemon stops cleanly (SIGTERM) when the parent dies, rather than SIGKILL.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", argv[0], std::strerror(errno));
    return 127;
  });
  if (pid_ < 0) return absl::InternalError("fork failed");
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(ready)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("batond exited during start; ", log_, ":\n", ReadFile(log_)));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("batond not ready in 30 s; see ", log_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

Daemon::~Daemon() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  if (WaitChild(pid_, Clock::now() + std::chrono::seconds(10)) == -SIGKILL) {
    std::printf("batond did not stop within 10 s of SIGTERM; killed\n");
  }
}

absl::StatusOr<std::vector<std::string>> MakeCommIds(const std::string& socket, int n) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = ForkChild([&] {
    close(fds[0]);
    baton_client_t* client = nullptr;
    if (baton_client_connect(socket.c_str(), 10000, &client) != BATON_OK) {
      std::fprintf(stderr, "baton_client_connect: %s\n", baton_last_error());
      return 1;
    }
    std::string ids;
    for (int i = 0; i < n; ++i) {
      char id[BATON_COMM_ID_MAX];
      if (baton_client_create_comm_id(client, id, sizeof id) != BATON_OK) {
        std::fprintf(stderr, "baton_client_create_comm_id: %s\n", baton_last_error());
        return 1;
      }
      absl::StrAppend(&ids, id, "\n");
    }
    baton_client_close(client);
    return WriteAll(fds[1], ids) ? 0 : 1;
  });
  close(fds[1]);
  const std::string text = ReadAll(fds[0]);
  const int rc = pid < 0 ? -1000 : WaitChild(pid, Clock::now() + std::chrono::seconds(30));
  std::vector<std::string> ids = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (rc != 0 || static_cast<int>(ids.size()) != n) {
    return absl::UnavailableError(absl::StrCat("could not create communicator ids (rc ", rc, ")"));
  }
  return ids;
}

absl::StatusOr<std::string> ProbeDevice(const std::string& name) {
  constexpr int kUnavailable = 77;
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = ForkChild([&] {
    close(fds[0]);
    absl::StatusOr<std::unique_ptr<device::Device>> device = device::OpenDevice(name);
    if (!device.ok() || *device == nullptr || (*device)->count() < 1) {
      WriteAll(fds[1], device.ok() ? "no device" : device.status().ToString());
      return kUnavailable;
    }
    return WriteAll(fds[1], (*device)->Describe()) ? 0 : 1;
  });
  close(fds[1]);
  // A child stuck past the deadline keeps the pipe open; the read ends when WaitChild kills it,
  // so wait first (the answer is one short line, well within the pipe's buffer).
  const int rc = pid < 0 ? -1000 : WaitChild(pid, Clock::now() + std::chrono::seconds(60));
  const std::string text = ReadAll(fds[0]);
  if (rc == kUnavailable) return absl::UnavailableError(text);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("probing device ", name, " crashed or failed (", rc,
                                            ")", text.empty() ? "" : ": ", text));
  }
  return text;
}

}  // namespace baton::device_check
