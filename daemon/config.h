#pragma once

// batond's configuration: every option can be set in the config file (docs/config.md) or as a
// flag of the same name; flags win. Every default works on a single machine.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/options.h"

namespace baton::daemon {

struct Config {
  std::string node_name;  // defaults to $NODE_NAME, then the host name
  std::string socket = "/run/baton/batond.sock";
  std::string peer_listen = "0.0.0.0:7460";
  std::string data_listen = "0.0.0.0:7461";
  std::string metrics_listen = "0.0.0.0:9460";
  std::string advertise_host = "127.0.0.1";
  absl::Duration op_timeout = absl::Seconds(60);
  int64_t chunk_bytes = int64_t{1} << 20;
  std::string log_level = "info";
  std::string ready_file;     // written with the bound addresses once serving
  std::string topology_file;  // a recorded topology to use instead of discovering this node
  // The GPU implementation: "auto" (CUDA when a driver and GPU are there), "cuda", "none", or
  // "fake" (memfd-backed host memory posing as device memory, for tests).
  std::string device = "auto";
  absl::Duration probe_interval = absl::Seconds(10);  // zero: no background link probes
  int64_t probe_bytes = int64_t{1} << 20;             // payload of a bandwidth probe
  std::string probe_peers;  // comma-separated peer API addresses to probe even without a job
  absl::Duration peer_linger = absl::Minutes(5);  // how long a peer stays after its last job
  std::string locality;  // comma-separated labels, coarse to fine (e.g. "pod-a,rack-07")
  // How long a submission channel's thread spins for the rank's next operation before it sleeps.
  absl::Duration submit_spin = absl::Microseconds(20);
  // How long a thread waiting for a small message from a peer daemon spins before it sleeps.
  absl::Duration receive_spin = absl::Microseconds(200);
  // TCP connections to each peer daemon that large messages take turns on.
  int64_t tcp_streams = 1;
  // Send every data-plane message with a CRC32C of its payload, which the peer verifies
  // (transport::TcpOptions::checksum).
  bool data_checksum = false;
  // Seal every data connection (AES-256-GCM, keys from its handshake): needs tls_cert, tls_key
  // and tls_ca (transport::TcpOptions::seal).
  bool data_encryption = false;
  // Authenticate every data connection that is not sealed (GMAC, keys from its handshake;
  // transport::TcpOptions::authenticate): "auto" (on when tls_cert, tls_key and tls_ca are set),
  // "on" (needs them) or "off". DataIntegrity() says what it comes to.
  std::string data_integrity = "auto";
  // Let all_reduce algorithm choices follow measured times (collective::MeasuredTimes).
  bool tuner_learn = true;
  // Who may open sessions (comma-separated uids and group ids; both empty: anyone who can reach
  // the socket), and how many sessions and buffers the daemon keeps.
  std::string allowed_uids;
  std::string allowed_gids;
  int64_t max_sessions = 4096;
  int64_t max_sessions_per_uid = 1024;
  int64_t max_buffers_per_session = 4096;
  // Buffers sessions map into the daemon, and the bytes they span, per session, per uid and in
  // all (daemon::SessionLimits).
  int64_t max_buffers_per_uid = 8192;
  int64_t max_buffers = 32768;
  int64_t max_mapped_bytes_per_session = int64_t{2} << 40;
  int64_t max_mapped_bytes_per_uid = int64_t{4} << 40;
  int64_t max_mapped_bytes = int64_t{32} << 40;
  // Communicator ranks sessions hold (joined, or waiting in a join, and not destroyed), per
  // session, per uid and in all: each costs the daemon a communicator's threads and memory.
  int64_t max_ranks_per_session = 512;
  int64_t max_ranks_per_uid = 2048;
  int64_t max_ranks = 8192;
  // The largest communicator a join may ask for.
  int64_t max_world_size = 65536;
  // How long a communicator id nobody joined stays valid, and how many such ids the daemon keeps.
  absl::Duration comm_id_ttl = absl::Hours(1);
  int64_t max_pending_comm_ids = 16384;
  int64_t max_pending_comm_ids_per_uid = 1024;
  absl::Duration session_handshake_timeout = absl::Seconds(5);
  // How long a connection to the data port may take to prove who it is before it is closed.
  absl::Duration data_handshake_timeout = absl::Seconds(5);
  // Connections in their handshake on the data port, in all and from one remote IPv4 address or
  // IPv6 /64, and connections to the session socket without a session yet, in all and of one uid:
  // past these, new ones are closed at once (transport::TcpOptions, SessionServerOptions).
  int64_t max_pending_data_handshakes = 256;
  int64_t max_pending_data_handshakes_per_source = 16;
  int64_t max_pending_sessions = 1024;
  int64_t max_pending_sessions_per_uid = 64;
  // Mutual TLS on the peer API: this daemon's certificate and key, and the CA bundle peers'
  // certificates must chain to (PEM files; all three or none - none is for development only).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
};

// A comma-separated list of numeric ids (the allow-lists); InvalidArgument naming `name` and
// the bad entry otherwise. FinalizeConfig checks both lists with it.
absl::StatusOr<std::vector<uint32_t>> ParseIdList(absl::string_view name, const std::string& list);

// Registers every Config field on `options`, pointing at `config`.
void RegisterOptions(OptionSet& options, Config& config);

// InvalidArgument unless 4 KiB <= chunk_bytes <= 1 GiB; `where` names its source in the message.
absl::Status CheckChunkBytes(int64_t chunk_bytes, absl::string_view where);

// Whether this daemon asks that its data connections be authenticated: data_integrity "on", or
// "auto" with tls_cert, tls_key and tls_ca all set. (data_encryption seals connections, which
// authenticates them too, whatever this says.)
bool DataIntegrity(const Config& config);

// Fills defaults that depend on the environment (node name) and checks values.
absl::Status FinalizeConfig(Config& config);

}  // namespace baton::daemon
