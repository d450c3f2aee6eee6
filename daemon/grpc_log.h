#pragma once

// Routes gRPC's own log lines (which it otherwise prints to stderr in its own format) into
// batond's log, with gRPC's severity, so that they carry the daemon's timestamps and level
// filter. Known noise is lowered to debug: gRPC's TLS server complains at error level about
// every client that sends an IP address as its TLS server name, which daemons dialling peers by
// address always do.

namespace baton::daemon {

// Once, before the first gRPC object is made.
void RouteGrpcLogsToSpdlog();

}  // namespace baton::daemon
