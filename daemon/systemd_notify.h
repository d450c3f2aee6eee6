#pragma once

// systemd's notify protocol (sd_notify(3)) without libsystemd: a datagram to $NOTIFY_SOCKET.
// Outside systemd (no $NOTIFY_SOCKET) every call is a no-op.

#include <optional>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace baton::daemon {

// Sends `state`, e.g. "READY=1", "STOPPING=1", "WATCHDOG=1", "STATUS=...". Returns false if a
// notify socket is configured but the message could not be sent.
bool NotifySystemd(absl::string_view state);

// The interval at which systemd expects WATCHDOG=1 ($WATCHDOG_USEC, for this pid), if any.
std::optional<absl::Duration> SystemdWatchdogInterval();

}  // namespace baton::daemon
