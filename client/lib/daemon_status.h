#pragma once

// A daemon's status as `baton status` shows it: the daemon's GetStatus answer over its gRPC
// Client API, and that answer as JSON. Shared by the CLI (client/cli/baton_main.cc) and libbaton's
// baton_daemon_status_json, so both print the same document. Internal.

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "baton/v1/baton.pb.h"
#include "google/protobuf/message.h"

namespace baton::core {

// The GetStatus answer of the daemon listening on the unix socket `socket`; with `probe_links`,
// after a fresh round of link probes (which takes up to a few seconds per unreachable peer).
// Opens no session. Unavailable, naming the socket, if the daemon does not answer by `timeout`.
absl::StatusOr<v1::DaemonStatus> FetchDaemonStatus(const std::string& socket, bool probe_links,
                                                   absl::Duration timeout);

// `message` as indented JSON with every field (zeros and empty lists too) under its proto name;
// 64-bit integers are strings, as protobuf's JSON mapping writes them. Internal if protobuf
// cannot render it.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

}  // namespace baton::core
