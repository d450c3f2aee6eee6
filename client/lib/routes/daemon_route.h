#pragma once

// The daemon route: a call on host memory, run by the daemon. Memory in a buffer the daemon
// shares (Allocate, baton_client_alloc) is used in place; anything else is copied through this
// rank's staging buffer, which grows as calls need and is kept. Internal to libbaton; used by
// one operation at a time (the communicator's order).

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "baton/v1/baton.pb.h"
#include "client/lib/call.h"
#include "client/lib/client_core.h"
#include "client/lib/daemon_link.h"

namespace baton::core {

class DaemonRoute {
 public:
  explicit DaemonRoute(DaemonLink& link) : link_(link) {}
  ~DaemonRoute() { ReleaseStaging(); }
  DaemonRoute(const DaemonRoute&) = delete;
  DaemonRoute& operator=(const DaemonRoute&) = delete;

  // Where the call's buffers are for the daemon: in place, or staged (the input copied in).
  struct Placed {
    std::optional<v1::BufferRef> send;
    std::optional<v1::BufferRef> recv;
    std::byte* staged_recv = nullptr;  // the output's staged copy, copied out after the call
  };
  // Places `call`'s buffers (`send_bytes` read, `recv_bytes` written). The errors are the call's
  // own (a range that runs past its shared buffer, no memory to stage it): nothing was
  // submitted.
  absl::StatusOr<Placed> Place(const Call& call, size_t send_bytes, size_t recv_bytes);
  // Runs the placed call on the daemon and copies a staged output out; returns the algorithm
  // the daemon ran.
  absl::StatusOr<std::string> Run(const Call& call, const Placed& placed,
                                  const CallOptions& options);

  // Where [data, data + bytes) lies in the shared buffers, for use in place; nullopt to stage
  // it: memory that is not shared, and a region that does not start on a whole element of
  // `element` bytes, which the daemon refuses (its kernels access elements as their type).
  // InvalidArgument for a range that starts in a shared buffer and runs past its end.
  absl::StatusOr<std::optional<v1::BufferRef>> InBuffer(const char* what, const void* data,
                                                        size_t bytes, size_t element) const;

  // Frees the staging buffer (Destroy).
  void ReleaseStaging();

 private:
  absl::Status EnsureStaging(size_t bytes);

  DaemonLink& link_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

}  // namespace baton::core
