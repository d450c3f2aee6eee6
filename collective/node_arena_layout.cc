#include "collective/node_arena_layout.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collective/op_spec.h"
#include "common/futex.h"
#include "common/spin.h"

namespace baton::collective::arena {
namespace {

// How long a reader of the abort word waits for a writer to finish the reason (a few
// instructions, unless the writer was descheduled or died in between).
constexpr absl::Duration kWriterGrace = absl::Milliseconds(100);

}  // namespace

Signature SignatureOf(Collective collective, DataType type, uint64_t count,
                      std::optional<ReduceOp> op, int root, uint32_t flags) {
  Signature signature;
  signature.collective = static_cast<uint32_t>(collective);
  signature.type = static_cast<uint32_t>(type);
  signature.op = op ? static_cast<uint32_t>(*op) : 0;
  signature.root = root;
  signature.count = count;
  signature.flags = flags;
  return signature;
}

Signature ReadSignature(const Signature& shared) {
  Signature copy;
  copy.collective = ReadOnce(shared.collective);
  copy.type = ReadOnce(shared.type);
  copy.op = ReadOnce(shared.op);
  copy.root = ReadOnce(shared.root);
  copy.count = ReadOnce(shared.count);
  copy.algorithm = ReadOnce(shared.algorithm);
  copy.flags = ReadOnce(shared.flags);
  return copy;
}

std::string Describe(const Signature& signature) {
  // The names of out-of-range values read "unknown" (CollectiveName and the others).
  return absl::StrCat(signature.AsSpec().Describe(),
                      (signature.flags & kThroughDaemon) != 0 ? " through the daemon" : "",
                      (signature.flags & kAgreeing) != 0 ? " (agreeing on its route)" : "");
}

void Header::Abort(const absl::Status& reason) {
  uint32_t live = kLive;
  if (!abort_state.compare_exchange_strong(live, kWriting, std::memory_order_acq_rel)) return;
  abort_code = static_cast<int32_t>(reason.ok() ? absl::StatusCode::kAborted : reason.code());
  const size_t length = std::min(reason.message().size(), kReasonBytes - 1);
  if (length > 0) std::memcpy(abort_reason, reason.message().data(), length);
  abort_reason[length] = '\0';
  abort_state.store(kAborted, std::memory_order_release);
  RingAll();
}

void Header::RingAll() {
  bell.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(bell);
}

absl::Status Header::Reason() const {
  uint32_t state = abort_state.load(std::memory_order_acquire);
  if (state == kLive) return absl::OkStatus();
  if (state == kWriting) {
    SpinUntil(kWriterGrace, /*busy=*/absl::Microseconds(1), [&] {
      state = abort_state.load(std::memory_order_acquire);
      return state != kWriting;
    });
  }
  if (state == kWriting) {
    return absl::AbortedError(
        "the node's shared arena was aborted, but its reason was not written within 100 ms (a "
        "local rank died while aborting it, or wrote the arena's abort word itself)");
  }
  if (state != kAborted) {
    // Whatever the word holds, the arena is no longer live: never report OK here.
    return absl::AbortedError(absl::StrCat("the node's shared arena's abort word holds ", state,
                                           ", which no rank writes: a local rank wrote over the "
                                           "arena"));
  }
  const int32_t code = ReadOnce(abort_code);
  // OK or a value that is no status code would turn the abort into success or nonsense.
  const bool known = code > 0 && code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated);
  char reason[kReasonBytes];
  for (size_t i = 0; i < kReasonBytes; ++i) reason[i] = ReadOnce(abort_reason[i]);
  return absl::Status(known ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kAborted,
                      std::string(reason, strnlen(reason, kReasonBytes)));
}

NodeArena::Counters ReadTally(const RankBlock::Tally& tally) {
  NodeArena::Counters counters;
  counters.operations = tally.operations.load(std::memory_order_relaxed);
  counters.failed = tally.failed.load(std::memory_order_relaxed);
  counters.bytes = tally.bytes.load(std::memory_order_relaxed);
  counters.busy_ns = tally.busy_ns.load(std::memory_order_relaxed);
  counters.wait_ns = tally.wait_ns.load(std::memory_order_relaxed);
  counters.local_phases = tally.local_phases.load(std::memory_order_relaxed);
  return counters;
}

}  // namespace baton::collective::arena
