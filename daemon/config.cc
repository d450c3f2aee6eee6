#include "daemon/config.h"

#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace baton::daemon {

void RegisterOptions(OptionSet& options, Config& config) {
  options.AddString("node_name", &config.node_name,
                    "name of this node in logs and metrics (default: $NODE_NAME, then hostname)");
  options.AddString("socket", &config.socket, "unix socket of the client API");
  options.AddString("peer_listen", &config.peer_listen,
                    "host:port of the peer gRPC API (port 0 picks a free port)");
  options.AddString("data_listen", &config.data_listen,
                    "host:port of the TCP data-plane transport (port 0 picks a free port)");
  options.AddString("metrics_listen", &config.metrics_listen,
                    "host:port of the HTTP /metrics endpoint (port 0 picks a free port)");
  options.AddString("advertise_host", &config.advertise_host,
                    "address other daemons use to reach this one");
  options.AddDuration("op_timeout", &config.op_timeout,
                      "longest a collective may wait on a peer before it fails");
  options.AddInt("chunk_bytes", &config.chunk_bytes, "pipeline chunk size of the data plane");
  options.AddString("log_level", &config.log_level, "trace, debug, info, warn, error or off");
  options.AddString("ready_file", &config.ready_file,
                    "file written with the bound addresses once the daemon serves");
  options.AddString("topology_file", &config.topology_file,
                    "recorded topology (NCCL XML, hwloc XML, nvidia-smi topo -m, or JSON) to use "
                    "instead of discovering this node, like NCCL_TOPO_FILE");
  options.AddString("device", &config.device,
                    "GPU support: auto (CUDA when this node has a driver and a GPU), cuda (fail "
                    "without one), none, or fake (host memory posing as device memory, for tests)");
  options.AddDuration("probe_interval", &config.probe_interval,
                      "time between link probe rounds to peer daemons (0 disables probing)");
  options.AddInt("probe_bytes", &config.probe_bytes,
                 "payload of a bandwidth probe (4 KiB to 2 MiB)");
  options.AddString("probe_peers", &config.probe_peers,
                    "comma-separated peer API addresses (host:port) to probe even when no "
                    "communicator includes them");
  options.AddDuration("peer_linger", &config.peer_linger,
                      "how long a peer's links stay in metrics and probes after its last "
                      "communicator ends");
  options.AddString("locality", &config.locality,
                    "where this node sits, comma-separated labels from coarse to fine (e.g. "
                    "\"pod-a,rack-07\"; default $BATON_LOCALITY); rings cross label boundaries as "
                    "rarely as possible");
  options.AddDuration("submit_spin", &config.submit_spin,
                      "how long the daemon spins, yielding its core, waiting for a rank's next "
                      "operation before it sleeps; only while operations have been coming within "
                      "that time (0 to 1ms; longer trades CPU for latency)");
  options.AddDuration("receive_spin", &config.receive_spin,
                      "how long a thread waiting for a message from a peer daemon looks at the "
                      "connection, yielding its core, before it sleeps (the progress engine's "
                      "spin); only while messages have been arriving within that time (0 to 1ms; "
                      "longer trades CPU for latency)");
  options.AddBool("tuner_learn", &config.tuner_learn,
                  "let the daemons choose all_reduce algorithms by the times they measured as well "
                  "as by their cost model, trying each close candidate on a few operations; a "
                  "communicator follows its root daemon's setting");
  options.AddInt("tcp_streams", &config.tcp_streams,
                 "TCP connections to each peer daemon that messages of 256 KiB and more take "
                 "turns on, so that as many threads copy one link's bulk data in parallel (1 to "
                 "16)");
  options.AddBool("data_checksum", &config.data_checksum,
                  "send every data-plane message with a CRC32C of its payload, which the peer "
                  "verifies: a corrupted message fails its operation with DATA_LOSS naming the "
                  "link instead of delivering wrong data. Messages that carry one are verified "
                  "whatever this says; every daemon must be of a version that knows the checksum");
  options.AddBool("data_encryption", &config.data_encryption,
                  "encrypt and authenticate every data connection this daemon takes part in "
                  "(AES-256-GCM under keys that each connection's handshake derives from its "
                  "handshake key): nobody on the network can read payloads, or alter, drop, "
                  "replay or insert a message without the operation failing with DATA_LOSS. "
                  "Needs tls_cert, tls_key and tls_ca. A daemon seals a connection whenever "
                  "either end asks; every daemon must be of a version that knows sealing");
  options.AddString("data_integrity", &config.data_integrity,
                    "authenticate every data connection this daemon takes part in that is not "
                    "sealed: payloads cross in the clear, but every 256 KiB of them carries a "
                    "GMAC tag (AES-256-GCM, keys from the connection's handshake), so a message "
                    "altered, dropped, replayed or inserted on the way fails its operation with "
                    "DATA_LOSS. auto (the default): on when tls_cert, tls_key and tls_ca are set, "
                    "off without them; on (needs them); or off. A daemon authenticates a "
                    "connection whenever either end asks; every daemon must be of a version that "
                    "knows it (set off during an upgrade from one that does not)");
  options.AddString("tls_cert", &config.tls_cert,
                    "PEM certificate (then any intermediates) this daemon presents to peers; it "
                    "must name node_name (common name or DNS alternative name). With tls_key and "
                    "tls_ca, the peer API runs mutual TLS; without all three it is unauthenticated "
                    "(development only)");
  options.AddString("tls_key", &config.tls_key, "PEM private key of tls_cert (unencrypted)");
  options.AddString("tls_ca", &config.tls_ca,
                    "PEM CA bundle that every peer daemon's certificate must chain to; the three "
                    "files are re-read every minute, so renewed certificates need no restart");
  options.AddString("allowed_uids", &config.allowed_uids,
                    "comma-separated uids that may open sessions on the client socket (root "
                    "always may); with allowed_gids empty as well, anyone who can open the socket");
  options.AddString("allowed_gids", &config.allowed_gids,
                    "comma-separated group ids whose members (by primary group) may open sessions");
  options.AddInt("max_sessions", &config.max_sessions,
                 "client sessions this daemon keeps at once (1 to 65536)");
  options.AddInt("max_sessions_per_uid", &config.max_sessions_per_uid,
                 "client sessions one uid may hold at once (1 to max_sessions)");
  options.AddInt("max_buffers_per_session", &config.max_buffers_per_session,
                 "shared-memory buffers one session may register at once (1 to 1048576)");
  options.AddInt("max_buffers_per_uid", &config.max_buffers_per_uid,
                 "buffers the sessions of one uid may register at once (1 to 1048576)");
  options.AddInt("max_buffers", &config.max_buffers,
                 "buffers all sessions may register at once (1 to 1048576); each is a mapping "
                 "of the daemon's, so keep it well below vm.max_map_count");
  options.AddInt("max_mapped_bytes_per_session", &config.max_mapped_bytes_per_session,
                 "bytes of host and device memory one session's buffers may span (1 MiB to 64 "
                 "TiB); a sparse memfd counts all the bytes it is registered with");
  options.AddInt("max_mapped_bytes_per_uid", &config.max_mapped_bytes_per_uid,
                 "bytes the buffers of one uid's sessions may span (1 MiB to 64 TiB)");
  options.AddInt("max_mapped_bytes", &config.max_mapped_bytes,
                 "bytes all sessions' buffers may span: the daemon's address space they take, "
                 "however sparse the memory (1 MiB to 64 TiB)");
  options.AddInt("max_ranks_per_session", &config.max_ranks_per_session,
                 "communicator ranks one session may hold at once, joined or joining (1 to "
                 "65536); each costs the daemon a communicator's threads and memory");
  options.AddInt("max_ranks_per_uid", &config.max_ranks_per_uid,
                 "communicator ranks the sessions of one uid may hold at once (1 to 65536)");
  options.AddInt("max_ranks", &config.max_ranks,
                 "communicator ranks all sessions may hold at once (1 to 65536)");
  options.AddInt("max_world_size", &config.max_world_size,
                 "the most ranks a communicator may have (1 to 16777216); larger joins are "
                 "refused before anything is allocated for them");
  options.AddDuration("comm_id_ttl", &config.comm_id_ttl,
                      "how long a communicator id this daemon created stays valid while no rank "
                      "has joined with it");
  options.AddInt("max_pending_comm_ids", &config.max_pending_comm_ids,
                 "communicator ids this daemon keeps until their communicator forms (1 to "
                 "1048576); beyond that the oldest that no rank has joined with are forgotten, "
                 "and new ones are refused while every id has a rank");
  options.AddInt("max_pending_comm_ids_per_uid", &config.max_pending_comm_ids_per_uid,
                 "communicator ids the sessions of one uid may have pending at once (1 to "
                 "1048576); more are refused until some form or expire");
  options.AddDuration("data_handshake_timeout", &config.data_handshake_timeout,
                      "how long a connection to the data port may take to complete its keyed "
                      "handshake before it is closed");
  options.AddInt("max_pending_data_handshakes", &config.max_pending_data_handshakes,
                 "connections to the data port that may be in their handshake at once (1 to "
                 "65536); more are closed on arrival, and a daemon dialling here tries again until "
                 "its deadline");
  options.AddInt("max_pending_data_handshakes_per_source",
                 &config.max_pending_data_handshakes_per_source,
                 "of those, how many may come from one remote IPv4 address or IPv6 /64 (1 to "
                 "max_pending_data_handshakes), so that one host cannot keep the others out");
  options.AddInt("max_pending_sessions", &config.max_pending_sessions,
                 "connections to the session socket that may wait at once without having opened "
                 "a session (1 to 65536); more are closed on arrival");
  options.AddInt("max_pending_sessions_per_uid", &config.max_pending_sessions_per_uid,
                 "of those, how many may be of one uid (1 to max_pending_sessions), so that one "
                 "user cannot keep the others from opening sessions");
  options.AddDuration("session_handshake_timeout", &config.session_handshake_timeout,
                      "how long a connection to the session socket may take to open its session "
                      "before it is closed");
}

absl::StatusOr<std::vector<uint32_t>> ParseIdList(absl::string_view name, const std::string& list) {
  std::vector<uint32_t> ids;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    uint32_t id;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " must be comma-separated numeric ids; '", part.substr(0, 32), "' is not one"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::Status CheckChunkBytes(int64_t chunk_bytes, absl::string_view where) {
  if (chunk_bytes >= 4096 && chunk_bytes <= (int64_t{1} << 30)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("chunk_bytes must be between 4096 and 1 GiB, got ", chunk_bytes, " in ", where));
}

bool DataIntegrity(const Config& config) {
  const bool tls = !config.tls_cert.empty() && !config.tls_key.empty() && !config.tls_ca.empty();
  return config.data_integrity == "on" || (config.data_integrity == "auto" && tls);
}

absl::Status FinalizeConfig(Config& config) {
  if (config.node_name.empty()) {
    if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') {
      config.node_name = env;
    } else {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      config.node_name = host;
    }
  }
  if (config.locality.empty()) {
    if (const char* env = std::getenv("BATON_LOCALITY"); env != nullptr) config.locality = env;
  }
  if (config.socket.empty()) return absl::InvalidArgumentError("socket must not be empty");
  if (config.op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("op_timeout must be positive");
  }
  BATON_RETURN_IF_ERROR(CheckChunkBytes(config.chunk_bytes, "the configuration"));
  if (config.probe_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("probe_interval must not be negative");
  }
  if (config.probe_bytes < 4096 || config.probe_bytes > (int64_t{2} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_bytes must be between 4096 and 2 MiB, got ", config.probe_bytes));
  }
  if (config.submit_spin < absl::ZeroDuration() || config.submit_spin > absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("submit_spin must be between 0 and 1ms, got ",
                                                   absl::FormatDuration(config.submit_spin)));
  }
  if (config.receive_spin < absl::ZeroDuration() || config.receive_spin > absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("receive_spin must be between 0 and 1ms, got ",
                                                   absl::FormatDuration(config.receive_spin)));
  }
  if (config.peer_linger < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("peer_linger must not be negative");
  }
  if (config.data_handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("data_handshake_timeout must be positive");
  }
  // Each limit of one source must leave room for others under the global one.
  for (const auto& [name, total, per_source, per_name] :
       {std::tuple{"max_pending_data_handshakes", config.max_pending_data_handshakes,
                   config.max_pending_data_handshakes_per_source,
                   "max_pending_data_handshakes_per_source"},
        std::tuple{"max_pending_sessions", config.max_pending_sessions,
                   config.max_pending_sessions_per_uid, "max_pending_sessions_per_uid"}}) {
    if (total < 1 || total > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be between 1 and 65536, got ", total));
    }
    if (per_source < 1 || per_source > total) {
      return absl::InvalidArgumentError(
          absl::StrCat(per_name, " must be between 1 and ", name, ", got ", per_source));
    }
  }
  if (config.data_encryption &&
      (config.tls_cert.empty() || config.tls_key.empty() || config.tls_ca.empty())) {
    // Without mutual TLS the handshake keys, and so the keys that seal, follow from public values.
    return absl::InvalidArgumentError(
        "data_encryption needs tls_cert, tls_key and tls_ca: without mutual TLS the keys that "
        "seal data connections would protect nothing");
  }
  if (config.data_integrity != "auto" && config.data_integrity != "on" &&
      config.data_integrity != "off") {
    return absl::InvalidArgumentError(absl::StrCat("data_integrity must be auto, on or off, got '",
                                                   config.data_integrity.substr(0, 32), "'"));
  }
  if (config.data_integrity == "on" &&
      (config.tls_cert.empty() || config.tls_key.empty() || config.tls_ca.empty())) {
    // As for data_encryption: the keys would follow from public values.
    return absl::InvalidArgumentError(
        "data_integrity=on needs tls_cert, tls_key and tls_ca: without mutual TLS the keys that "
        "authenticate data connections would protect nothing");
  }
  BATON_RETURN_IF_ERROR(ParseIdList("allowed_uids", config.allowed_uids).status());
  BATON_RETURN_IF_ERROR(ParseIdList("allowed_gids", config.allowed_gids).status());
  if (config.max_sessions < 1 || config.max_sessions > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions must be between 1 and 65536, got ", config.max_sessions));
  }
  if (config.max_sessions_per_uid < 1 || config.max_sessions_per_uid > config.max_sessions) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions_per_uid must be between 1 and max_sessions, got ",
                     config.max_sessions_per_uid));
  }
  if (config.max_buffers_per_session < 1 || config.max_buffers_per_session > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_buffers_per_session must be between 1 and 1048576, got ",
                     config.max_buffers_per_session));
  }
  for (const auto& [name, value] : {std::pair{"max_buffers", config.max_buffers},
                                    std::pair{"max_buffers_per_uid", config.max_buffers_per_uid}}) {
    if (value < 1 || value > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be between 1 and 1048576, got ", value));
    }
  }
  // A 47-bit address space is 128 TiB: at most half of it goes to sessions' buffers.
  for (const auto& [name, value] :
       {std::pair{"max_mapped_bytes", config.max_mapped_bytes},
        std::pair{"max_mapped_bytes_per_uid", config.max_mapped_bytes_per_uid},
        std::pair{"max_mapped_bytes_per_session", config.max_mapped_bytes_per_session}}) {
    if (value < (int64_t{1} << 20) || value > (int64_t{64} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " must be between 1048576 (1 MiB) and 70368744177664 (64 TiB), got ", value));
    }
  }
  for (const auto& [name, value] :
       {std::pair{"max_ranks_per_session", config.max_ranks_per_session},
        std::pair{"max_ranks_per_uid", config.max_ranks_per_uid},
        std::pair{"max_ranks", config.max_ranks}}) {
    if (value < 1 || value > (1 << 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be between 1 and 65536, got ", value));
    }
  }
  if (config.max_world_size < 1 || config.max_world_size > (1 << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_world_size must be between 1 and 16777216, got ", config.max_world_size));
  }
  if (config.comm_id_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("comm_id_ttl must be positive");
  }
  if (config.max_pending_comm_ids < 1 || config.max_pending_comm_ids > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_pending_comm_ids must be between 1 and 1048576, got ", config.max_pending_comm_ids));
  }
  if (config.max_pending_comm_ids_per_uid < 1 || config.max_pending_comm_ids_per_uid > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_pending_comm_ids_per_uid must be between 1 and 1048576, got ",
                     config.max_pending_comm_ids_per_uid));
  }
  if (config.session_handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("session_handshake_timeout must be positive");
  }
  if (config.tcp_streams < 1 || config.tcp_streams > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp_streams must be between 1 and 16, got ", config.tcp_streams));
  }
  return absl::OkStatus();
}

}  // namespace baton::daemon
