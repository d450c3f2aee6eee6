#pragma once

inline absl::Status ShutDownError() { return absl::UnavailableError("endpoint shut down"); }

// One TCP connection with a peer and what every part of the TCP endpoint shares about reading
// it: the buffers' sizes, the read-for-receive limits and the eventfd helpers. Internal to
// transport/tcp/.

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/spin.h"
#include "transport/auth/record_cipher.h"
#include "transport/flow_control.h"
#include "transport/progress.h"
#include "transport/receive_matcher.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/payload_reader.h"
#include "transport/tcp/socket.h"
#include "transport/transport.h"

namespace baton::transport::tcp {

// Payload bytes that nobody wants, and the pieces of a consumed message (Endpoint::PostConsume),
// are read into a buffer of this size: small enough that a piece is still in the cache when its
// consumer reads it.
constexpr size_t kPieceBytes = size_t{256} << 10;
static_assert(kPieceBytes % Endpoint::kPieceAlignment == 0);
// A consumer gets a sealed payload's pieces only once they have opened: each piece must be whole
// records (PayloadReader).
static_assert(kPieceBytes == kSealedRecordBytes);

// A thread reading a connection while it waits for its receive looks at least this often whether
// the receive has failed (aborted, peer lost, shut down) or its message came over another
// connection; a payload it reads meanwhile is parked (InFrame) and read on by the next turn.
constexpr absl::Duration kReadForReceiveSlice = absl::Milliseconds(20);

// An operation as the send side tells them apart: its communicator and sequence number.
using OperationId = std::pair<uint64_t, uint64_t>;

// A data frame whose payload is partly read: whoever held the connection's read turn left it when
// its turn ended (a thread waiting for another receive whose slice ran out, a send that reads
// what has arrived while it waits for room, the reader thread giving way to a waiting thread),
// and whoever takes the turn next reads on from where it stopped. Nothing else is read from the
// connection until it is done, so the stream stays in step.
struct InFrame {
  InFrame(BufferedReader& in, const FrameHeader& frame_header, RecordCipher* open,
          ReceiveMatcher::Delivery frame_delivery)
      : header(frame_header), body(in, frame_header, open), delivery(std::move(frame_delivery)) {}

  const FrameHeader header;
  PayloadReader body;
  // Where the payload goes; none once the receiver has given up (deadline, abort), when the
  // rest is read only to be dropped.
  std::optional<ReceiveMatcher::Delivery> delivery;
  // A consumed payload (Endpoint::PostConsume): how much of the piece being read into the
  // connection's scratch buffer is there.
  size_t piece_filled = 0;
};

// One TCP connection with a peer, whichever side opened it. Frames flow both ways: its reader
// thread reads what the peer sends, and Sends to the peer write to it, one at a time. Carrying
// both directions on one connection lets TCP's acknowledgements ride on data going the other
// way: with a connection per direction, every small message cost a second packet, a bare
// acknowledgement, which is as expensive to move through the kernel as the message itself.
// `fd` is set under mu_ before `connecting` turns false; from then on it is written by the Send
// that holds `busy`, read by the reader thread, and shut down, never closed, by others.
struct Connection {
  FileDescriptor fd;
  std::string peer;   // known at once when we connect; from the hello when we accept
  bool ours = false;  // we connected (rather than accepted) it
  // An accepted connection's remote IP address, under whose share of the handshakes it counts
  // until it is admitted (TcpOptions::max_pending_handshakes_per_source).
  std::string source;
  // A sealed connection's ciphers (frame.h), set with fd: `seal` belongs to the Send that holds
  // `busy`, `open` to the thread that holds `reading`.
  std::optional<RecordCipher> seal;
  std::optional<RecordCipher> open;
  std::thread reader;
  // Guarded by mu_.
  bool connecting = false;  // being connected by the Send that reserved it (no fd yet)
  bool busy = false;        // a Send is writing to it
  bool finished = false;    // its reader has ended and its thread only has to return
  // The operation (communicator, sequence) whose data frame was last written to it, if any: a
  // Send that finds the connection dead connects afresh unless it belongs to that operation,
  // whose earlier frames may then have been lost with the connection.
  std::optional<OperationId> last_operation;
  // Flow control (transport/flow_control.h): the grant this endpoint sends first on a connection
  // it opened, set before the connection is shared and sent by the Send that holds `busy` before
  // anything else.
  std::optional<CreditGrant> first_grant;

  // The read side. Frames are read by one thread at a time, the one that holds `reading`: the
  // reader thread, or a thread waiting for a small receive from the peer, which reads for
  // itself (ReadForReceive) and so is woken by the kernel once instead of by the reader.
  absl::Mutex read_mu;
  bool reading ABSL_GUARDED_BY(read_mu) = false;
  int readers_waiting ABSL_GUARDED_BY(read_mu) = 0;  // threads reading for their receive
  // readers_waiting as the reader thread sees it while it reads a payload without read_mu: it
  // parks the payload and gives its turn away once a waiting thread wants the turn.
  std::atomic<int> turn_wanted{0};
  absl::Time last_read_for_receive ABSL_GUARDED_BY(read_mu) = absl::InfinitePast();
  // Someone waits for what only the reader thread reads (a large receive, or a frame a waiting
  // thread left to it): the reader thread reads again without lingering.
  bool wanted ABSL_GUARDED_BY(read_mu) = false;
  bool reader_polling ABSL_GUARDED_BY(read_mu) = false;  // the reader thread waits in poll()
  absl::Status ended ABSL_GUARDED_BY(read_mu);           // why the connection ended, once it has
  // The epoch of the peer's credit on this connection: 0 until its first credit frame arrives.
  // Data goes out on the connection only against credit of that epoch.
  uint64_t credit_epoch ABSL_GUARDED_BY(read_mu) = 0;
  FileDescriptor kick;  // eventfd that takes the reader out of poll()
  // Only the thread that holds `reading` touches these.
  std::optional<BufferedReader> in;    // set with fd
  std::optional<FrameHeader> pending;  // a frame header read but left for the reader thread
  std::unique_ptr<InFrame> in_frame;   // a data frame's payload partly read
  std::vector<std::byte> scratch;
  AdaptiveSpin read_spin{absl::ZeroDuration()};  // how long a waiting thread spins (AwaitFrame)
};

// Writes `messages` as frames of `type` on `stream`, which the caller holds (`busy`), in the
// connection's protection: sealed or authenticated records, or plain frames (with a checksum if
// `checksum`). Defined in stream_pool.cc. A sealed or authenticated connection must be dropped
// unless this succeeds (the record numbers would be out of step).
absl::Status WriteFramesOn(Connection& stream, FrameType type, std::span<const OutMessage> messages,
                           bool checksum, absl::Time deadline, absl::FunctionRef<bool()> cancelled,
                           absl::FunctionRef<void()> on_full, size_t* written);

}  // namespace baton::transport::tcp
