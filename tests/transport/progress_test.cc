#include "transport/progress.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/spin.h"
#include "gtest/gtest.h"

namespace baton::transport {
namespace {

// An eventfd standing for what a transport waits on (a socket, a completion channel).
class Source {
 public:
  Source() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  ~Source() { close(fd_); }
  void MakeReady() { ProgressEngine::Signal(fd_); }
  pollfd Watch() const { return pollfd{fd_, POLLIN, 0}; }

 private:
  const int fd_;
};

absl::Time In(absl::Duration d) { return absl::Now() + d; }

TEST(ProgressEngineTest, WorkThatIsAlreadyThereIsFoundWithoutSleeping) {
  ProgressEngine engine;
  Source source;
  source.MakeReady();
  pollfd watch = source.Watch();
  AdaptiveSpin spin(engine.spin());
  EXPECT_EQ(engine.Await(
                std::span(&watch, 1), [] { return false; }, In(absl::Seconds(10)), spin),
            ProgressEngine::Ready::kWork);
  EXPECT_NE(watch.revents & POLLIN, 0);
  EXPECT_EQ(engine.stats().spun, 1u);
  EXPECT_EQ(engine.stats().slept, 0u);
}

TEST(ProgressEngineTest, ASleepingWaitWakesOnReadiness) {
  // No spin: the wait sleeps at once, and the source becomes ready only later.
  ProgressEngine engine(ProgressEngine::Options{.spin = absl::ZeroDuration()});
  Source source;
  pollfd watch = source.Watch();
  AdaptiveSpin spin(engine.spin());
  std::thread later([&source] {
    absl::SleepFor(absl::Milliseconds(20));
    source.MakeReady();
  });
  EXPECT_EQ(engine.Await(
                std::span(&watch, 1), [] { return false; }, In(absl::Seconds(30)), spin),
            ProgressEngine::Ready::kWork);
  later.join();
  EXPECT_EQ(engine.stats().slept, 1u);
}

TEST(ProgressEngineTest, ACompletionDeliveredByAnotherThreadEndsTheWait) {
  ProgressEngine engine(ProgressEngine::Options{.spin = absl::ZeroDuration()});
  Source idle;  // never ready
  pollfd watch = idle.Watch();
  AdaptiveSpin spin(engine.spin());
  std::atomic<bool> delivered{false};
  const int event = ProgressEngine::ThreadEvent();
  ASSERT_GE(event, 0);
  std::thread deliverer([&delivered, event] {
    absl::SleepFor(absl::Milliseconds(20));
    delivered.store(true);
    ProgressEngine::Signal(event);
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(engine.Await(
                std::span(&watch, 1), [&delivered] { return delivered.load(); },
                In(absl::Seconds(30)), spin),
            ProgressEngine::Ready::kDone);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "woken by the event, not the limit";
  deliverer.join();
  EXPECT_EQ(engine.stats().woken, 1u);
}

TEST(ProgressEngineTest, NothingByTheLimitTimesOutAndTurnsTheSpinOff) {
  ProgressEngine engine(ProgressEngine::Options{.spin = absl::Milliseconds(1)});
  Source idle;
  pollfd watch = idle.Watch();
  AdaptiveSpin spin(engine.spin());
  EXPECT_EQ(spin.next(), absl::Milliseconds(1));
  EXPECT_EQ(engine.Await(
                std::span(&watch, 1), [] { return false; }, In(absl::Milliseconds(30)), spin),
            ProgressEngine::Ready::kTimedOut);
  EXPECT_EQ(engine.stats().timed_out, 1u);
  EXPECT_EQ(spin.next(), absl::ZeroDuration()) << "looking did not pay off";
}

TEST(ProgressEngineTest, EachThreadHasItsOwnEvent) {
  const int mine = ProgressEngine::ThreadEvent();
  int theirs = -1;
  std::thread([&theirs] { theirs = ProgressEngine::ThreadEvent(); }).join();
  EXPECT_GE(mine, 0);
  EXPECT_EQ(mine, ProgressEngine::ThreadEvent());
  EXPECT_NE(mine, theirs);
}

}  // namespace
}  // namespace baton::transport
