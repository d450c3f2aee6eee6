#pragma once

// An endpoint that holds one small message back until it can travel with the next message to the
// same peer (one SendAll), so that it costs no packet of its own: an operation's signature, sent
// to the next daemon on the check's cycle, rides with the operation's first message to that
// daemon. The held message goes out alone before anything that may wait long: a wait for a
// receive that the transport's brief wait (PostedRecv::WaitBriefly, its spin) did not complete, a
// send of more than kHeldAcrossBytes to another peer (which may wait for room), Flush. Holding it
// therefore delays it only while the caller computes or sends small messages, and nobody can wait
// for it forever. Thread-safe; sends through it are serialized.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/forwarding_endpoint.h"
#include "transport/transport.h"

namespace baton::collective {

class PiggybackEndpoint final : public transport::ForwardingEndpoint {
 public:
  // Sends to other peers of at most this many bytes in all leave the held message held: the kernel
  // takes them at once (TCP: socket buffers are larger).
  static constexpr size_t kHeldAcrossBytes = size_t{64} << 10;

  // `inner` must outlive this endpoint.
  explicit PiggybackEndpoint(transport::Endpoint* inner) : transport::ForwardingEndpoint(inner) {}

  // Holds a copy of `data` for `peer`. A message held already is sent first (its error returns).
  absl::Status Hold(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline);
  // Sends the held message, if any, on its own.
  absl::Status Flush();

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override;
  // The receive flushes before its Wait may sleep.
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override;
  std::unique_ptr<transport::PostedRecv> PostConsume(const std::string& peer,
                                                     const transport::Tag& tag, size_t length,
                                                     absl::Time deadline,
                                                     PieceConsumer consume) override;
  // A region's bytes go through Send and PostRecv above, so that they keep their order with the
  // held message (which is a copy in host memory); the posted send is complete when returned.
  std::unique_ptr<transport::PostedSend> PostSend(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  const transport::RegionSlice& slice,
                                                  absl::Time deadline) override;
  // One-sided writes keep no order with messages. A write of more than kHeldAcrossBytes flushes
  // first (it may wait for room), and so do a write's and an exposure's waits before they may
  // sleep.
  std::unique_ptr<transport::PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                                   const transport::RegionSlice& source,
                                                   const transport::RemoteRegion& target,
                                                   size_t target_offset,
                                                   std::optional<uint32_t> notify,
                                                   absl::Time deadline) override;
  std::unique_ptr<transport::ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                                         const transport::RegionSlice& slice,
                                                         absl::Time deadline) override;
  std::unique_ptr<transport::PostedRecv> PostRecvRegion(const std::string& peer,
                                                        const transport::Tag& tag,
                                                        const transport::RegionSlice& slice,
                                                        absl::Time deadline,
                                                        ArrivalCallback on_arrival) override;

 private:
  struct Held {
    std::string peer;
    transport::Tag tag;
    std::vector<std::byte> data;
    absl::Time deadline;
  };
  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::optional<Held> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::collective
