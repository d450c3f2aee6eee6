#pragma once

// A rank's submission channel: one page of shared memory through which libbaton hands its
// daemon one operation at a time and reads the result back, with no system call while both
// sides are awake. Per-operation submission through gRPC costs hundreds of microseconds; this
// costs a few.
//
// Protocol (one operation in flight per channel; the client serialises its rank's operations):
//   client: write `op`, then `submitted` += 1 (release), wake the daemon if it sleeps;
//   daemon: sees `submitted` change (acquire), copies `op`, runs it, writes `result`, then sets
//           `completed` = `submitted` (release), wakes the client if it sleeps;
//   daemon: sets `closed` when it stops serving (session ended, communicator destroyed, daemon
//           shutting down); the client then fails the operation instead of waiting.
// Everything in the page is untrusted by the reader: the daemon copies the descriptor once and
// validates it like a gRPC request; the client bounds every length it reads.
//
// Waiting spins briefly (the other side usually answers within microseconds) and then blocks on
// a futex in slices, so a waiter never burns a core that a rank needs, and never waits past its
// deadline or a stop request.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace baton::channel {

inline constexpr uint32_t kMagic = 0x4E435442;  // "BTCN"
// 2: `peer` in the descriptor, and the per-peer counts of all_to_all_v in the page's tail.
// 3: stream-ordered operations (device memory): the descriptor's stream fields, `stream_done`.
// 4: `node_part` in the descriptor.
inline constexpr uint32_t kVersion = 4;

// Stream-ordered operations (OpDescriptor::stream_value != 0): the rank recorded interprocess
// event `event_slot` of its event set `event_set` (session_protocol.h kRegisterEvents) on its
// stream before it submitted, and its stream waits until `stream_done` reaches `stream_value`
// before it runs the work enqueued after the operation. The daemon waits for the event before it
// touches the buffers. When the operation succeeded it stores `stream_value` into `stream_done`
// before it publishes the result, so the stream moves on without waiting for the client. When it
// failed, or the daemon does not answer (it died, the channel broke), the client stores the value
// after it has recorded the failure as the communicator's asynchronous error: whoever synchronises
// the stream past a failed operation then sees its error.

// One operation, as the client API describes it. Enumerations are collective/ values; the
// reader validates them.
struct OpDescriptor {
  uint32_t kind = 0;         // collective::Collective
  uint32_t data_type = 0;    // collective::DataType
  uint32_t reduce_op = 0;    // collective::ReduceOp
  int32_t root = 0;          // broadcast, reduce, gather and scatter
  uint32_t algorithm = 0;    // 0: the daemon chooses; else 1 + collective::Algorithm
  int32_t peer = 0;          // send: the destination rank; recv: the source rank
  uint64_t count = 0;        // as the gRPC request's count
  uint64_t send_buffer = 0;  // registered buffer ids and offsets, as in the gRPC request
  uint64_t send_offset = 0;
  uint64_t recv_buffer = 0;
  uint64_t recv_offset = 0;
  int64_t timeout_ms = 0;  // zero or less: the daemon's default
  uint64_t event_set = 0;  // stream-ordered: the session's event set
  uint32_t event_slot = 0;
  uint32_t stream_value = 0;  // 0: not stream-ordered
  uint32_t node_part = 0;     // 1: OpSpec::node_part (wire/op_codec.h)
};

// Most ranks whose all_to_all_v counts fit the page; larger worlds submit all_to_all_v through
// the gRPC Collective call (the client never has two operations of one rank in flight, so the
// order holds across both ways).
inline constexpr uint32_t kMaxVectorRanks = 64;

// all_to_all_v's per-peer counts and displacements, in elements, `entries` (the world size) of
// each; read by the daemon for all_to_all_v only, and only `entries` <= kMaxVectorRanks of them.
struct VectorTail {
  uint32_t entries = 0;
  uint32_t reserved = 0;
  uint64_t send_counts[kMaxVectorRanks] = {};
  uint64_t send_displs[kMaxVectorRanks] = {};
  uint64_t recv_counts[kMaxVectorRanks] = {};
  uint64_t recv_displs[kMaxVectorRanks] = {};
};

// The outcome of the last operation.
struct OpResult {
  int32_t code = 0;  // absl::StatusCode
  uint32_t message_length = 0;
  uint32_t algorithm_length = 0;
  uint32_t reserved = 0;
  char algorithm[16] = {};
  char message[960] = {};
};

// The shared page. Each side's words live on their own cache line.
struct Layout {
  uint32_t magic = 0;
  uint32_t version = 0;
  alignas(64) std::atomic<uint32_t> submitted{0};    // bumped by the client
  std::atomic<uint32_t> daemon_sleeping{0};          // the daemon blocks on `submitted`
  alignas(64) std::atomic<uint32_t> completed{0};    // set by the daemon
  std::atomic<uint32_t> client_sleeping{0};          // the client blocks on `completed`
  std::atomic<uint32_t> closed{0};                   // the daemon no longer serves this channel
  alignas(64) std::atomic<uint32_t> stream_done{0};  // the last stream-ordered value done
  alignas(64) OpDescriptor op;
  alignas(64) OpResult result;
  alignas(64) VectorTail vectors;  // all_to_all_v only
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline constexpr size_t kChannelBytes = 4096;
static_assert(sizeof(Layout) <= kChannelBytes, "kMaxVectorRanks must fit the page");

// How long a waiter spins (yielding its core between looks) before it blocks, while the other
// side has been answering within it (AdaptiveSpin).
inline constexpr absl::Duration kDefaultSpin = absl::Microseconds(20);

// Waits until `word` differs from `seen`. Spins for `spin` (SpinUntil, yielding), then blocks on
// the futex (announcing itself in `sleeping` so the other side knows to wake it), in slices of at
// most 50 ms; before each slice `keep_waiting` (may be empty) may end the wait with its status.
// Returns OK once the word changed; DeadlineExceeded at `deadline`.
absl::Status WaitForChange(const std::atomic<uint32_t>& word, uint32_t seen,
                           std::atomic<uint32_t>& sleeping, absl::Duration spin,
                           absl::Time deadline, const std::function<absl::Status()>& keep_waiting);

// Stores `value` into `word` and wakes a waiter that announced itself in `sleeping`.
void Publish(std::atomic<uint32_t>& word, uint32_t value, const std::atomic<uint32_t>& sleeping);

// Wakes whoever blocks on `word` (after a flag it checks, such as `closed`, changed).
void Wake(std::atomic<uint32_t>& word);

// Stores `value` into `stream_done` unless it holds a later one (values count up and may wrap).
void ReleaseStream(std::atomic<uint32_t>& stream_done, uint32_t value);

// Writes a status and algorithm name into `result`, truncating the message to fit.
void WriteResult(OpResult& result, const absl::Status& status, const std::string& algorithm);
// Reads them back; `algorithm` is set only on success. Bounds every length.
absl::Status ReadResult(const OpResult& result, std::string* algorithm);

}  // namespace baton::channel
