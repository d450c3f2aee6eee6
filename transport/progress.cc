#include "transport/progress.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/container/inlined_vector.h"
#include "absl/time/clock.h"

namespace baton::transport {
int ProgressEngine::ThreadEvent() {
  struct Event {
    Event() : fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    ~Event() {
      if (fd >= 0) close(fd);
    }
    const int fd;
  };
  thread_local const Event event;
  return event.fd;
}

void ProgressEngine::Signal(int event) {
  const uint64_t one = 1;
  (void)!write(event, &one, sizeof(one));  // a full counter is as good as a signal
}

void ProgressEngine::Drain(int event) {
  uint64_t count = 0;
  (void)!read(event, &count, sizeof(count));
}

int ProgressEngine::PollTimeoutMs(absl::Duration wait) {
  if (wait <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))), int64_t{1} << 30));
}

ProgressEngine::Ready ProgressEngine::Await(std::span<pollfd> watch, absl::FunctionRef<bool()> done,
                                            absl::Time until, AdaptiveSpin& spin) {
  for (pollfd& entry : watch) entry.revents = 0;
  const absl::Time start = absl::Now();
  // A thread that sleeps in poll() is woken by the kernel, which on a busy or virtual machine can
  // take longer than the message itself; looking (yielding between looks) keeps it on its core.
  // Each look is a system call, so it yields from the first.
  bool ready = false;
  auto done_or_ready = [&] {
    if (done()) return true;
    ready = poll(watch.data(), watch.size(), 0) > 0;
    return ready;
  };
  if (SpinUntil(std::min(spin.next(), until - start), /*busy=*/absl::ZeroDuration(),
                done_or_ready)) {
    if (!ready) {
      woken_.fetch_add(1, std::memory_order_relaxed);
      return Ready::kDone;
    }
    spin.Record(absl::Now() - start);
    spun_.fetch_add(1, std::memory_order_relaxed);
    return Ready::kWork;
  }
  const int event = ThreadEvent();
  absl::InlinedVector<pollfd, 4> fds(watch.begin(), watch.end());
  if (event >= 0) fds.push_back(pollfd{event, POLLIN, 0});
  const int n = poll(fds.data(), fds.size(), PollTimeoutMs(until - absl::Now()));
  if (n < 0 && errno != EINTR) return Ready::kFailed;
  bool work = false;
  for (size_t i = 0; i < watch.size(); ++i) {
    watch[i].revents = n > 0 ? fds[i].revents : short{0};
    work = work || watch[i].revents != 0;
  }
  const bool signalled = event >= 0 && n > 0 && fds.back().revents != 0;
  if (signalled) Drain(event);
  if (work) {
    spin.Record(absl::Now() - start);
    slept_.fetch_add(1, std::memory_order_relaxed);
    return Ready::kWork;
  }
  if (done()) {
    woken_.fetch_add(1, std::memory_order_relaxed);
    return Ready::kDone;
  }
  // Nothing within the spin (an event left over from an earlier wait, or a slice that ended):
  // looking would not have paid off.
  spin.RecordOutlasted();
  if (signalled) return Ready::kDone;
  timed_out_.fetch_add(1, std::memory_order_relaxed);
  return Ready::kTimedOut;
}

ProgressEngine::Stats ProgressEngine::stats() const {
  return Stats{spun_.load(std::memory_order_relaxed), slept_.load(std::memory_order_relaxed),
               woken_.load(std::memory_order_relaxed), timed_out_.load(std::memory_order_relaxed)};
}

}  // namespace baton::transport
