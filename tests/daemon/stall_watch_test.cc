// StallWatch: a process that was stopped finds out for how long, and one that ran does not
// think it was stopped.

#include "daemon/stall_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <optional>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

TEST(StallWatchTest, ARunningProcessHasNoStall) {
  StallWatch watch(absl::Milliseconds(10), absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(watch.LongestSince(start).has_value());
}

// The stopped process is a child, so that the test itself keeps running; it reports in
// milliseconds, over a pipe, the stall it saw (-1 for none).
int64_t StallSeenByAChildStoppedFor(absl::Duration stopped) {
  int fds[2];
  if (pipe(fds) != 0) return -2;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    StallWatch watch(absl::Milliseconds(10), absl::Milliseconds(200));
    const absl::Time start = absl::Now();
    if (write(fds[1], "r", 1) != 1) _exit(1);
    // Stopped in here. Asked the moment it resumes, before the watch's thread may have run.
    absl::SleepFor(stopped + absl::Milliseconds(200));
    const std::optional<absl::Duration> stall = watch.LongestSince(start);
    const int64_t ms = stall ? absl::ToInt64Milliseconds(*stall) : -1;
    _exit(write(fds[1], &ms, sizeof(ms)) == sizeof(ms) ? 0 : 1);
  }
  close(fds[1]);
  char ready = 0;
  int64_t ms = -2;
  if (read(fds[0], &ready, 1) == 1) {
    absl::SleepFor(absl::Milliseconds(50));
    kill(child, SIGSTOP);
    absl::SleepFor(stopped);
    kill(child, SIGCONT);
    if (read(fds[0], &ms, sizeof(ms)) != sizeof(ms)) ms = -2;
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return ms;
}

TEST(StallWatchTest, AStoppedProcessSeesHowLongItWasStopped) {
  const int64_t ms = StallSeenByAChildStoppedFor(absl::Milliseconds(1500));
  EXPECT_GE(ms, 1200) << "the child saw a stall of " << ms << " ms";
  EXPECT_LT(ms, 5000);
}

}  // namespace
}  // namespace baton::daemon
