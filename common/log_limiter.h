#pragma once

// Bounds how often one kind of log line is written, for lines that someone outside the daemon
// can cause (a refused connection, a failed handshake, a malformed request): however fast they
// come, the log grows by at most `lines` lines per `interval` for each limiter.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace baton {

// Lets the first `lines` events of each `interval` through and counts the others; the next line
// let through says how many were left out since the one before it. Thread-safe; one per kind of
// line, usually a member or a function-local static.
class LogLimiter {
 public:
  LogLimiter(int lines, absl::Duration interval) : lines_(lines), interval_(interval) {}
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // True when the event at `now` may be logged; then `*suppressed` is the number of events left
  // out since the last one that was let through (0 if none).
  bool Allow(absl::Time now, uint64_t* suppressed) ABSL_LOCKS_EXCLUDED(mu_);
  bool Allow(uint64_t* suppressed) { return Allow(absl::Now(), suppressed); }

  // Logs the line that `format` and `args` make at `level` if Allow lets it through, followed by
  // "(N more like it suppressed)" when lines were left out before it.
  template <typename... Args>
  void Log(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format,
           Args&&... args) {
    LogAt(absl::Now(), level, format, std::forward<Args>(args)...);
  }
  // The same for an event at `now`.
  template <typename... Args>
  void LogAt(absl::Time now, spdlog::level::level_enum level,
             spdlog::format_string_t<Args...> format, Args&&... args) {
    uint64_t suppressed = 0;
    if (!spdlog::should_log(level) || !Allow(now, &suppressed)) return;
    std::string line = fmt::format(format, std::forward<Args>(args)...);
    if (suppressed > 0) absl::StrAppend(&line, " (", suppressed, " more like it suppressed)");
    spdlog::log(level, "{}", line);
  }

 private:
  const int lines_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int allowed_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton
