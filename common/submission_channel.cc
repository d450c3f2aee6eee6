#include "common/submission_channel.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/futex.h"
#include "common/spin.h"

namespace baton::channel {
namespace {

constexpr absl::Duration kSlice = absl::Milliseconds(50);

}  // namespace

absl::Status WaitForChange(const std::atomic<uint32_t>& word, uint32_t seen,
                           std::atomic<uint32_t>& sleeping, absl::Duration spin,
                           absl::Time deadline, const std::function<absl::Status()>& keep_waiting) {
  // The spin yields between looks from the start: a busy spin keeps the core from a thread the
  // scheduler put on the same core, often the very one that must answer (a rank and its daemon's
  // channel thread, which wake each other, tend to share a core); busy spins of 20 us made every
  // such hand-over wait 20 us or more (docs/bench/2026-11-per-operation-cost.md).
  if (SpinUntil(spin, /*busy=*/absl::ZeroDuration(),
                [&word, seen] { return word.load(std::memory_order_acquire) != seen; })) {
    return absl::OkStatus();
  }
  while (true) {
    if (keep_waiting) {
      absl::Status status = keep_waiting();
      if (!status.ok()) return status;
    }
    // Announce, then look again: with both sides sequentially consistent, either the publisher
    // sees `sleeping` and wakes us, or we see its new value here. The futex re-checks the word.
    sleeping.store(1, std::memory_order_seq_cst);
    if (word.load(std::memory_order_seq_cst) != seen) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      sleeping.store(0, std::memory_order_relaxed);
      return absl::DeadlineExceededError("deadline passed while waiting");
    }
    FutexWait(word, seen, std::min(kSlice, deadline - now));
    sleeping.store(0, std::memory_order_relaxed);
    if (word.load(std::memory_order_acquire) != seen) return absl::OkStatus();
  }
  // The seq_cst load that saw the change also acquired what the publisher wrote before it.
  sleeping.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

void Publish(std::atomic<uint32_t>& word, uint32_t value, const std::atomic<uint32_t>& sleeping) {
  word.store(value, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) FutexWake(word);
}

void Wake(std::atomic<uint32_t>& word) { FutexWake(word); }

void WriteResult(OpResult& result, const absl::Status& status, const std::string& algorithm) {
  result.code = static_cast<int32_t>(status.code());
  const size_t message = std::min(status.message().size(), sizeof(result.message));
  // An OK status's message may have no storage at all: memcpy must not see its null pointer.
  if (message > 0) std::memcpy(result.message, status.message().data(), message);
  result.message_length = static_cast<uint32_t>(message);
  const size_t name = std::min(algorithm.size(), sizeof(result.algorithm));
  std::memcpy(result.algorithm, algorithm.data(), name);
  result.algorithm_length = static_cast<uint32_t>(name);
}

absl::Status ReadResult(const OpResult& result, std::string* algorithm) {
  const OpResult copy = result;  // one read of each field, whatever the other side does
  if (copy.code == 0) {
    *algorithm = std::string(copy.algorithm,
                             std::min<size_t>(copy.algorithm_length, sizeof(copy.algorithm)));
    return absl::OkStatus();
  }
  const bool known =
      copy.code > 0 && copy.code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated);
  return absl::Status(
      known ? static_cast<absl::StatusCode>(copy.code) : absl::StatusCode::kUnknown,
      std::string(copy.message, std::min<size_t>(copy.message_length, sizeof(copy.message))));
}

void ReleaseStream(std::atomic<uint32_t>& stream_done, uint32_t value) {
  uint32_t seen = stream_done.load(std::memory_order_acquire);
  while (static_cast<int32_t>(value - seen) > 0 &&
         !stream_done.compare_exchange_weak(seen, value, std::memory_order_acq_rel)) {
  }
}

}  // namespace baton::channel
