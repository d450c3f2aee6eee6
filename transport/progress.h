#pragma once

// The data plane's one progress mechanism. No transport has a thread of its own between a
// message and the operation waiting for it: the thread that waits drives the transport itself
// (reads its sockets, polls its completion queue), so that what it waits for never crosses a
// thread hand-off on the way in. While it waits it looks for work without sleeping as long as
// looks have been paying off within a short spin (AdaptiveSpin: yielding its core between looks,
// since ranks and daemons share a few cores), then sleeps on readiness: the file descriptors
// that become ready when there is work (a socket, a completion channel) and its own event, which
// whoever delivers its completion another way signals. Transport-neutral: TCP waits on its
// connections' sockets with it, a verbs transport on its completion channels.
//
// A transport's own threads (TCP's reader of a connection nobody waits on) make progress only
// where no operation waits; they give way as soon as one does.

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/spin.h"

namespace baton::transport {

class ProgressEngine {
 public:
  // How a thread waits until something it drives is ready. One engine per daemon: every
  // transport's waits go through it and its counters show how they end.
  struct Options {
    // The longest a wait looks for work before it sleeps (AdaptiveSpin's limit).
    absl::Duration spin = absl::Microseconds(200);
  };
  // How waits ended, since the engine was made.
  struct Stats {
    uint64_t spun = 0;       // work was found while looking: the thread never slept
    uint64_t slept = 0;      // work was found after sleeping on readiness
    uint64_t woken = 0;      // the awaited completion came another way (done() or the event)
    uint64_t timed_out = 0;  // nothing by the wait's limit
  };
  enum class Ready { kWork, kDone, kTimedOut, kFailed };

  ProgressEngine() : ProgressEngine(Options()) {}
  explicit ProgressEngine(const Options& options) : spin_(options.spin) {}
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  absl::Duration spin() const { return spin_; }

  // Waits until one of `watch` (each with its events) is ready (kWork: its revents are set),
  // `done()` turns true or this thread's event is signalled (kDone), or `until` (kTimedOut);
  // kFailed if poll() itself fails. Looks first, while `spin` says that looks have been paying
  // off, then sleeps. A caller that must look at what poll() cannot see (an abort) passes an
  // `until` a slice away and waits again. `spin` is the caller's, for what it waits on (one per
  // connection, one per completion queue), and learns from this wait. `done` must be cheap and
  // must not block.
  Ready Await(std::span<pollfd> watch, absl::FunctionRef<bool()> done, absl::Time until,
              AdaptiveSpin& spin);

  Stats stats() const;

  // This thread's eventfd, which a thread that completes what this one waits for signals
  // (Signal); -1 if none could be made. Signal and Drain serve any eventfd used as a wake-up.
  static int ThreadEvent();
  static void Signal(int event);
  static void Drain(int event);
  // poll()'s timeout for waiting `wait`: whole milliseconds rounded up (so that a wait never ends
  // early and spins), 0 for none left.
  static int PollTimeoutMs(absl::Duration wait);

 private:
  const absl::Duration spin_;
  std::atomic<uint64_t> spun_{0};
  std::atomic<uint64_t> slept_{0};
  std::atomic<uint64_t> woken_{0};
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace baton::transport
