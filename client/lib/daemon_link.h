#pragma once

// How one rank's operation reaches its daemon once its buffers are registered memory: through
// the rank's submission channel (a shared page and a futex, common/submission_channel.h) when it
// has one and the operation fits the page, else the gRPC Collective call. Every route that runs
// an operation on the daemon (host memory, device memory, the node arena's step between nodes)
// submits through here. Internal to libbaton; used by one operation at a time (the
// communicator's order).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "baton/v1/baton.pb.h"
#include "client/lib/abort_state.h"
#include "client/lib/call.h"
#include "client/lib/channel_client.h"
#include "client/lib/client_core.h"
#include "client/lib/session.h"

namespace baton::core {

class DaemonLink {
 public:
  // `channel` may be null (the rank submits over gRPC); `abort` must outlive this.
  DaemonLink(std::shared_ptr<Session> session, uint64_t comm_tag, int rank,
             std::unique_ptr<ChannelClient> channel, AbortState* abort)
      : session_(std::move(session)),
        comm_tag_(comm_tag),
        rank_(rank),
        channel_(std::move(channel)),
        abort_(abort) {}

  // Runs `call` on the daemon with its input at `send` and output at `recv` (registered memory;
  // unset where the call has none) and returns the algorithm the daemon ran. A stream-ordered
  // call (Call::stream_value) needs the channel, with its streams enabled. Cut short by an
  // abort: the abort's reason.
  absl::StatusOr<std::string> Run(const Call& call, const std::optional<v1::BufferRef>& send,
                                  const std::optional<v1::BufferRef>& recv,
                                  const CallOptions& options);

  // Asks the daemon to abort the communicator with `reason` (it tells the other daemons); its
  // operations then fail with `code` (with `from_next_operation`: only from this rank's next
  // collective on, daemon/node.h, AbortCommunicator). Returns within kAbortTimeout.
  absl::Status AbortOnDaemon(absl::string_view reason,
                             absl::StatusCode code = absl::StatusCode::kAborted,
                             bool from_next_operation = false);
  // The bound of an abort's reason (the daemon keeps as much).
  static constexpr size_t kMaxReason = 512;
  // An abort must return even when the daemon is gone.
  static constexpr absl::Duration kAbortTimeout = absl::Seconds(2);

  uint64_t comm_tag() const { return comm_tag_; }
  // Null when the rank submits over gRPC ($BATON_SUBMIT=grpc, or the daemon refused a channel).
  ChannelClient* channel() const { return channel_.get(); }
  Session& session() const { return *session_; }

 private:
  absl::StatusOr<std::string> RunOnChannel(const Call& call,
                                           const std::optional<v1::BufferRef>& send,
                                           const std::optional<v1::BufferRef>& recv,
                                           const CallOptions& options);
  absl::StatusOr<std::string> RunOnGrpc(const Call& call, const std::optional<v1::BufferRef>& send,
                                        const std::optional<v1::BufferRef>& recv,
                                        const CallOptions& options);

  const std::shared_ptr<Session> session_;
  const uint64_t comm_tag_;
  const int rank_;
  const std::unique_ptr<ChannelClient> channel_;
  AbortState* const abort_;
};

}  // namespace baton::core
