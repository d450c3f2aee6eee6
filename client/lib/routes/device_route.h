#pragma once

// The device route: a call on device memory, run by the daemon on the registered allocation
// (never copied by the host), stream-ordered (CallOptions::on_stream) or not. A stream-ordered
// call returns at once: its stream records an event the daemon waits for before it reads, and
// waits itself for the call's value in the channel's page before it goes on; the call then
// takes its place in the communicator's order like any other. Internal to libbaton.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/call.h"
#include "client/lib/channel_client.h"
#include "client/lib/client_core.h"
#include "client/lib/daemon_link.h"
#include "client/lib/group.h"

namespace baton::core {

class DeviceRoute {
 public:
  // `op_mu` is the communicator's operation lock, held while an operation uses the link's
  // channel; taken here to enable the channel's streams. Both must outlive this.
  DeviceRoute(DaemonLink& link, uint64_t comm_tag, int rank, absl::Mutex* op_mu)
      : link_(link), comm_tag_(comm_tag), rank_(rank), op_mu_(op_mu) {}
  DeviceRoute(const DeviceRoute&) = delete;
  DeviceRoute& operator=(const DeviceRoute&) = delete;

  // Runs a call on device memory (stream-ordered or not; `send_bytes` read, `recv_bytes`
  // written) through the daemon and returns the algorithm it ran. Called in the communicator's
  // order, with `op_mu` held.
  absl::StatusOr<std::string> Run(const Call& call, size_t send_bytes, size_t recv_bytes,
                                  const CallOptions& options);

  // Readies stream-ordered `call` before it is queued: checks it (device memory, the channel, a
  // size its page holds), claims the stream for this rank, records the call's event on it and
  // makes it wait for the call's value. Returns the request to queue it with, which releases
  // the stream however the call ends. Errors: the call is not queued and the stream not touched.
  absl::StatusOr<std::shared_ptr<PendingRequest>> Prepare(Call& call, const CallOptions& options);

  // The first failure of a stream-ordered call; OK while there is none.
  absl::Status AsyncError() const;
  // Refuses stream-ordered calls from now on (the communicator is being destroyed).
  void Close();

 private:
  DaemonLink& link_;
  const uint64_t comm_tag_;
  const int rank_;
  absl::Mutex* const op_mu_;

  // Stream-ordered calls: values issued and finished (common/submission_channel.h), the first
  // failure, and the channel's streams (set on the first call).
  mutable absl::Mutex mu_;
  uint32_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status async_error_ ABSL_GUARDED_BY(mu_);
  ChannelClient::Streams* streams_ ABSL_GUARDED_BY(mu_) = nullptr;  // once enabled
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint32_t>* done_ = nullptr;  // written once, before the first call queues
};

}  // namespace baton::core
