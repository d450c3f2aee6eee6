#pragma once

// Futex waits and wakes on a 32-bit word in memory shared between processes (the non-private
// operations), for waiters that have spun long enough and now block.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

#include "absl/time/time.h"

namespace baton {

// Blocks while `word` holds `expected`, for at most `timeout` (or until woken; may wake early).
inline void FutexWait(const std::atomic<uint32_t>& word, uint32_t expected,
                      absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

// Wakes every waiter blocked on `word`.
inline void FutexWake(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace baton
