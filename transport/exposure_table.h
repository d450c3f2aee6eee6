#pragma once

// The receive side of one-sided writes that every transport shares, as ReceiveMatcher is for
// messages: the regions this endpoint exposed (Endpoint::ExposeRegion), by key, and the checks
// that a write from a peer must pass before a byte of it lands (its key, its sender and
// communicator, the region's bounds), so that all transports refuse the same writes. Also the
// send side's tally of what each writer wrote into a region, which its notifying write carries
// (WriteTally).
//
// A transport calls Expose from Endpoint::ExposeRegion, and for each incoming write BeginWrite ->
// write the bytes into Write::target() -> FinishWrite. Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_limiter.h"
#include "transport/transport.h"

namespace baton::transport {

// The LinkStats counter of the writes refused because they named no region exposed to their
// sender for their communicator, or bytes outside it.
inline constexpr std::string_view kRefusedWritesCounter = "refused_writes";

// Why a receiver refused a write, as it tells the writer (TCP's write acknowledgement carries the
// number).
enum class WriteRefusal : uint32_t {
  kNone = 0,
  // No region under that key for the writer and the communicator: never exposed, exposed to
  // another peer or for another communicator, revoked, or complete already.
  kNoRegion = 1,
  kOutOfBounds = 2,  // the bytes do not lie inside the region
};

// The writer's error for a write to `peer` (of `length` bytes at `offset`, for communicator
// `comm`) that the peer refused: PermissionDenied for kNoRegion, InvalidArgument for
// kOutOfBounds, both naming the peer.
absl::Status WriteRefusedError(const std::string& peer, uint64_t comm, uint64_t offset,
                               uint64_t length, WriteRefusal refusal);

class ExposureTable {
 private:
  struct Exposure;

 public:
  // One incoming write between a successful BeginWrite and FinishWrite. Move-only.
  class Write {
   public:
    Write(Write&&) = default;
    Write& operator=(Write&&) = default;

    // Where the write's bytes go: exactly as long as the write, inside the exposed region.
    ByteSpan target() const { return target_; }
    // True once the region was revoked or failed meanwhile: the transport may stop writing into
    // target(), drop the rest and finish with any error.
    bool cancelled() const;
    // The exposure's deadline: writing into target() must stop by then.
    absl::Time deadline() const;

   private:
    friend class ExposureTable;
    Write(std::shared_ptr<Exposure> exposure, ByteSpan target)
        : exposure_(std::move(exposure)), target_(target) {}
    std::shared_ptr<Exposure> exposure_;
    ByteSpan target_;
  };

  ExposureTable() = default;
  ExposureTable(const ExposureTable&) = delete;
  ExposureTable& operator=(const ExposureTable&) = delete;
  // Every exposure it handed out must be gone, and no Write outstanding.
  ~ExposureTable() = default;

  // Endpoint::ExposeRegion of `bytes`, for a transport that writes by key (the descriptor's
  // address is 0; its key is 64 random bits, never 0, unique among the live exposures). Fails at
  // once with the abort reason of `comm`, or the shutdown status.
  std::unique_ptr<ExposedRegion> Expose(const std::string& peer, uint64_t comm, ByteSpan bytes,
                                        absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Starts a write from `peer` for `comm` of `length` bytes at `offset` into the region `key`.
  // PermissionDenied (WriteRefusal::kNoRegion) when no open region has that key for that peer
  // and communicator, InvalidArgument (kOutOfBounds) when the bytes would leave it; either is
  // counted in the peer's kRefusedWritesCounter. A region whose deadline passed fails (its Wait
  // says DeadlineExceeded) and refuses. Every Write returned must go to FinishWrite once.
  absl::StatusOr<Write> BeginWrite(const std::string& peer, uint64_t comm, uint64_t key,
                                   uint64_t offset, uint64_t length) ABSL_LOCKS_EXCLUDED(mu_);
  // What a notifying write carries: its immediate value and the bytes its writer wrote into the
  // region in all (WriteTally).
  struct Notify {
    uint32_t immediate = 0;
    uint64_t total = 0;
  };
  // Completes a write. `status` OK: all of target() was written; with `notify`, the exposure
  // completes once the bytes written into it reach notify->total (the writes before it may land
  // after it, over another connection). Otherwise the exposure fails with `status` (unless it
  // was revoked or failed already: a cancelled write's status is dropped). Counts an accepted
  // write in the peer's rx counters (its length, plus `overhead_bytes`).
  void FinishWrite(Write write, const absl::Status& status, std::optional<Notify> notify,
                   uint64_t overhead_bytes = 0) ABSL_LOCKS_EXCLUDED(mu_);

  // Endpoint::Abort: fails the exposures of `comm` with `reason` and revokes them; later ones fail
  // at once, until Forget(comm).
  void Abort(uint64_t comm, const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(uint64_t comm) ABSL_LOCKS_EXCLUDED(mu_);
  // `peer`'s link is gone, or what it sent was altered (`status`: Unavailable or DataLoss naming
  // it): fails its exposures with `status` and revokes them.
  void PeerLost(const std::string& peer, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails every exposure, and every later one, with `status`.
  void Shutdown(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Per peer that wrote or was refused: writes refused (kRefusedWritesCounter), and the bytes
  // (with their overhead) and number of the writes accepted.
  struct PeerCounts {
    uint64_t refused = 0;
    uint64_t rx_bytes = 0;
    uint64_t rx_writes = 0;
  };
  absl::flat_hash_map<std::string, PeerCounts> Counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Exposed;
  struct Exposure {
    std::string peer;
    uint64_t comm = 0;
    ByteSpan bytes;
    absl::Time deadline;
    RemoteRegion descriptor;
    // Guarded by the table's mu_.
    bool open = true;  // in exposures_: writes may begin
    int writers = 0;   // writes begun and not finished
    uint64_t received = 0;
    std::optional<Notify> notified;
    std::optional<absl::StatusOr<WriteNotice>> result;
    std::atomic<bool> cancelled{false};
  };

  // Closes `exposure` (no write may begin) and cancels the writes in progress.
  void CloseLocked(Exposure& exposure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `exposure` with `result` unless it has one, and closes it.
  void EndLocked(Exposure& exposure, absl::StatusOr<WriteNotice> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Exposed::Wait and the destructor: waits for a result (failing the exposure at its deadline)
  // or, with `revoke`, ends it now; then until no write is in progress.
  absl::StatusOr<WriteNotice> Settle(Exposure& exposure, bool revoke) ABSL_LOCKS_EXCLUDED(mu_);
  bool Settled(Exposure& exposure) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RefuseLocked(const std::string& peer, absl::Status error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Status> aborted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Exposure>> exposures_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, PeerCounts> counts_ ABSL_GUARDED_BY(mu_);
  // Refused writes come from an authenticated daemon, but as fast as it likes.
  LogLimiter refused_log_{5, absl::Minutes(1)};
};

// The send side's tally of the bytes this endpoint wrote into each region it was given, so that
// the notifying write can say how many its receiver must have taken before it completes the
// region (writes over several connections may land out of order). Thread-safe.
class WriteTally {
 public:
  // Counts a write of `length` bytes into region `key` of `peer` for `comm`, and returns the
  // bytes written into it so far, this write's included; a notifying write (`last`) also forgets
  // the region.
  uint64_t Add(const std::string& peer, uint64_t comm, uint64_t key, uint64_t length, bool last)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the regions of `comm` (Endpoint::Forget).
  void Forget(uint64_t comm) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::tuple<std::string, uint64_t, uint64_t>;  // peer, comm, region key
  absl::Mutex mu_;
  absl::flat_hash_map<Key, uint64_t> written_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::transport
