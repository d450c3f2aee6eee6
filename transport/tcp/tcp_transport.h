#pragma once

// The TCP transport between daemons. Each endpoint listens on one port. Whichever of two endpoints
// sends first connects to the other and introduces itself with its listen address in a keyed
// handshake (transport/auth/handshake.h), so that every message received on the connection is
// attributed to the sender's endpoint address, and only if it proved that address's key; from then
// on frames flow both ways on that connection.

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/auth/handshake.h"
#include "transport/progress.h"
#include "transport/transport.h"

namespace baton::transport {

struct TcpOptions {
  // Address to listen on, "host:port"; port 0 picks a free port.
  std::string listen_address = "127.0.0.1:0";
  // Host that peers should use to reach this endpoint; empty means the listen host.
  std::string advertise_host;
  // Flow control (transport/flow_control.h): the credit this endpoint grants each peer, which
  // bounds what the peer may have sent that no receive has taken yet. Messages of up to a quarter
  // of it (less 64 bytes) are sent eagerly against that credit; larger ones wait until their
  // receive is posted (rendezvous). The endpoint reads every frame as it comes and never stops
  // reading a connection to hold a sender back; a peer that sends beyond its credit has the
  // message dropped, its receives failed with DataLoss and its connections closed. 0: no flow
  // control (every message eager, nothing bounded).
  uint64_t max_unexpected_bytes_per_peer = uint64_t{64} << 20;
  // What the credit of all the peers linked at once may add up to: a peer that links while the
  // others hold this much is granted less, down to half of max_unexpected_bytes_per_peer (never
  // less, so that its eager messages always fit). 0: no bound.
  uint64_t max_unexpected_bytes_total = uint64_t{256} << 20;
  // The daemon's progress engine (transport/progress.h), which every wait of the endpoint goes
  // through; not owned, must outlive the endpoint. Null: the endpoint makes its own, with
  // receive_spin.
  ProgressEngine* progress = nullptr;
  // Without `progress`: how long a thread waiting for a message looks at its connection before it
  // sleeps in poll(), yielding its core between looks (SpinUntil). It looks only while that
  // connection's messages have been arriving within this time, so a quiet link costs no CPU.
  // Waking a sleeping thread costs tens of microseconds where cores are few or virtual.
  absl::Duration receive_spin = absl::Microseconds(200);
  // After the last thread that waited for a message (or sent) stops reading its connection, the
  // connection's reader thread leaves it alone this long before it reads again, unless a send
  // waits for room or credit, or a round trip for its pong (the frames they need may come
  // when nobody reads for them): a run of operations then never hands the connection back and
  // forth (each hand-over costs two thread wake-ups), and frames nobody waits for are read at most
  // this late (docs/bench/2026-12-06-progress-engine.md measured 1, 5 and 20 ms). Not negative.
  absl::Duration reader_linger = absl::Milliseconds(5);
  // Connections to each peer that messages of at least kStripeMinBytes take turns on, so that
  // as many threads on each side copy (and reduce) the bulk data of one link in parallel, as
  // NCCL's sockets per thread do. Smaller messages keep to the one connection both sides prefer,
  // where acknowledgements ride on the answers. 1 .. 16.
  int streams_per_peer = 1;
  // The keys of the handshake every connection opens with (transport/auth/handshake.h); not owned,
  // must outlive the endpoint. Null: kNoHandshakeKey, which authenticates nobody.
  HandshakeKeys* handshake_keys = nullptr;
  // How long an accepted connection may take to complete the handshake before it is closed, and
  // how many may be in the handshake at once, in all and from one source (a remote IPv4 address
  // or IPv6 /64): more are closed as they arrive, so that connections that never introduce
  // themselves cannot use up descriptors or threads, and one host that opens them cannot keep
  // the others out. A dialling endpoint whose connection is closed during the handshake dials
  // again, with backoff, until its deadline. The per-source limit counts as at most the global.
  absl::Duration handshake_timeout = absl::Seconds(5);
  int max_pending_handshakes = 256;
  int max_pending_handshakes_per_source = 16;
  // Connections one peer may hold open with this endpoint beyond what its streams need; an
  // authenticated connection past 2 * streams_per_peer + this is closed.
  int spare_connections_per_peer = 4;
  // Send every data frame with the CRC32C of its payload (frame.h, kFrameFlagChecksum), which
  // the receiver verifies: corruption that TCP's own 16-bit checksum misses (a NIC, a middlebox,
  // memory on the way) then fails the receive with DataLoss instead of delivering wrong data.
  // Frames that carry a checksum are verified whatever this says, so endpoints that differ in it
  // interoperate; every endpoint must be of a build that knows the flag. Costs one pass over each
  // payload on both sides (docs/bench/2026-12-02-checksum.md).
  bool checksum = false;
  // Seal every connection this endpoint takes part in (frame.h, kFrameFlagSealed): payloads
  // encrypted and authenticated with AES-256-GCM under keys that each connection's handshake
  // derives from its handshake key, so that nobody on the network reads them or alters, drops,
  // replays or inserts a frame without the receive failing. An endpoint that does not seal
  // itself still seals a connection its peer asks to seal. Worth it only with handshake_keys
  // (without, the keys follow from public values). Sealed frames carry no checksum (their tags
  // are stronger). Every endpoint of a cluster must be of a build that knows sealing.
  bool seal = false;
  // Authenticate every connection this endpoint takes part in that is not sealed (frame.h,
  // kFrameFlagAuthenticated): payloads cross in the clear, but each record of them carries an
  // AES-256-GCM tag (GMAC) under the keys a sealed connection would have, so that nobody on the
  // network alters, drops, replays or inserts a frame without the receive failing, as with
  // `seal`. A connection is sealed if either end seals, else authenticated if either end
  // authenticates. Worth it only with handshake_keys; authenticated frames carry no checksum.
  // Every endpoint of a cluster must be of a build that knows the flag. Costs one GHASH pass
  // over each payload on both sides, no copy (docs/bench/2026-12-06-integrity.md).
  bool authenticate = false;
};

// What an endpoint with `options` asks of every connection: kSealed with `seal`, else
// kAuthenticated with `authenticate`, else kNone.
inline Protection AskedProtection(const TcpOptions& options) {
  return options.seal           ? Protection::kSealed
         : options.authenticate ? Protection::kAuthenticated
                                : Protection::kNone;
}

// Messages this large and larger take turns on the connections of TcpOptions::streams_per_peer.
inline constexpr size_t kStripeMinBytes = size_t{256} << 10;

// Starts listening and returns the endpoint. Its address() is "<advertise host>:<bound port>".
// Its LinkStats count each message's 40-byte frame header (frame.h) in the bytes (not a checksum
// trailer or seal tags, nor credit and clear-to-send frames), and carry these counters:
// kChecksumFailuresCounter, the messages from the peer whose checksum did not match,
// kSealFailuresCounter, those with a sealed or authenticated record that did not open,
// kRetransmitsCounter, the segments the kernel retransmitted on the link's connections, and
// kCreditViolationsCounter, the messages the peer sent beyond its credit.
//
// A send that finds its connection closed or reset by the peer (a peer that restarted at its
// address, say) before it wrote a byte on it connects afresh, with the handshake, within its
// deadline; if the dead connection last carried a data frame of the same operation (communicator
// and sequence), it fails instead with Unavailable naming the peer, since what the operation sent
// may not have arrived. A send that wrote part of its frames before the connection failed fails.
//
// A message whose checksum does not match, or a record of which does not open (sealed or
// authenticated), fails its receive
// with DataLoss naming the peer (a
// receive posted later, if it arrived before its receive was posted), counts as an error, and
// closes the connection it came on, whose stream can no longer be trusted; the peer's next send
// connects afresh. A consumed receive (PostConsume) has been handed the pieces of a checksummed
// message before the check at its end: it fails all the same, and what its consumer did with them
// is the caller's to discard, as for any failed receive. A consumer gets a sealed or authenticated
// message's pieces only once they have opened; a receive into a buffer may find the bytes of an
// authenticated record that did not open there, and fails.
absl::StatusOr<std::unique_ptr<Endpoint>> NewTcpEndpoint(const TcpOptions& options);

// How many threads are waiting for a receive from `peer` on `endpoint` now, reading their
// connection themselves (or waiting for their turn to), with the sends to `peer` that read while
// they wait for room: a diagnostic, for a caller that must know a receive is being waited for
// before its message is sent. 0 for an endpoint NewTcpEndpoint did
// not make.
int TcpReceivesReading(const Endpoint& endpoint, const std::string& peer);

inline constexpr std::string_view kTcpTransportName = "tcp";
inline constexpr std::string_view kChecksumFailuresCounter = "checksum_failures";
inline constexpr std::string_view kSealFailuresCounter = "seal_failures";
inline constexpr std::string_view kRetransmitsCounter = "retransmits";

// The TCP transport: Listen() is NewTcpEndpoint(options) (each call a new listener); it reaches
// every peer that advertises a "tcp" address, and moves host memory, which needs no
// registration.
std::unique_ptr<Transport> NewTcpTransport(const TcpOptions& options);

}  // namespace baton::transport
