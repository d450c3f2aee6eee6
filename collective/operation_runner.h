#pragma once

// Runs one operation of a communicator on this daemon, once every local rank has submitted it:
// the check that every daemon's ranks called the same operation (with the ring neighbours,
// overlapped with the operation), the tuner's choice of algorithm and the daemons' exchange of
// measured times, and the schedule the registry maps the (collective, algorithm) to. Errors name
// the operation, this node, and peers by node name. One operation at a time (the communicator
// sequences them); Predict may be called concurrently.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/device_staging.h"
#include "collective/layout.h"
#include "collective/op_stats.h"
#include "collective/piggyback_endpoint.h"
#include "collective/registered_memory.h"
#include "collective/schedule.h"
#include "collective/tuner.h"
#include "device/operation_device.h"
#include "transport/transport.h"

namespace baton::collective {

struct RunnerOptions {
  absl::Duration op_timeout = absl::Seconds(60);
  size_t chunk_bytes = size_t{1} << 20;
  // Let the all_reduce algorithm follow the times the daemons measured, not only the model
  // (MeasuredTimes); every daemon of a communicator must use the same setting.
  bool learn_algorithms = true;
  LinkModel link;                      // the model's inputs, as the plan recorded them
  std::vector<int64_t> measured_seed;  // the table to start from (MeasuredTimes::Agreed)
  // Told the agreed measured times after every exchange; may be empty.
  std::function<void(std::vector<int64_t>)> on_measured;
  // Where the algorithms take their scratch from: the daemon's pool, registered with the same
  // endpoint (shared by its communicators). Null: the runner keeps a pool of its own.
  ScratchPool* scratch = nullptr;
  // The registrations of the memory device operations stage through (the daemon's pinned
  // staging buffers, registered with the same endpoint when made); may be null.
  const RegionLookup* staging_regions = nullptr;
};

// The daemons (positions in the layout) that daemon `self` of `size` sends its operations'
// signatures to and receives them from: one cycle through all daemons, so that if any two
// disagree, some neighbouring pair does. With a power-of-two number of daemons (4 or more) it is
// the reflected Gray code order, in which neighbours differ in one bit of their position: each
// daemon's next is a partner of the pairwise all-reduces (doubling, halving-doubling), so the
// signature rides with the operation's first message for half of the daemons, and the others'
// arrives on a connection the operation reads anyway. Otherwise the ring order.
struct CheckNeighbours {
  int next = 0;
  int prev = 0;
};
CheckNeighbours SignatureCheckNeighbours(int self, int size);

class OperationRunner {
 public:
  // `endpoint` must outlive the runner; `comm` is the communicator's tag.
  OperationRunner(Layout layout, uint64_t comm, transport::Endpoint* endpoint,
                  RunnerOptions options);

  const Layout& layout() const { return layout_; }

  // Runs operation `seq` of the local ranks' `parts` (by local index). Returns the algorithm
  // that ran ("local" with a single daemon) and sets `algorithm_name` as soon as it is chosen, so
  // that a failure reports it too. FailedPrecondition when ranks called different operations.
  // The operation fails at `deadline` (the earliest of its ranks' call deadlines) or after
  // options.op_timeout, whichever comes first. With `device`, the parts' buffers are device
  // memory of that GPU (collective/device_staging.h says where it runs).
  absl::StatusOr<std::string> Run(uint64_t seq, std::span<const LocalPart> parts, OpStats& stats,
                                  std::string& algorithm_name,
                                  absl::Time deadline = absl::InfiniteFuture(),
                                  const device::OperationDevice* device = nullptr);

  // The tuner's prediction for `collective` on `bytes` across the daemons, cheapest first; empty
  // with a single daemon.
  std::vector<AlgorithmCost> Predict(Collective collective, size_t bytes) const;

 private:
  struct PeerCheck;
  absl::StatusOr<std::string> RunSchedule(uint64_t seq, std::span<const LocalPart> parts,
                                          absl::Time deadline, transport::Endpoint* endpoint,
                                          OpStats& stats, std::string& algorithm_name,
                                          const device::Kernels* kernels);
  // Run's work once the local parts agree: on the device, staged, or on the host.
  absl::StatusOr<std::string> RunOn(uint64_t seq, std::span<const LocalPart> parts,
                                    absl::Time deadline, transport::Endpoint* endpoint,
                                    OpStats& stats, std::string& algorithm_name,
                                    const device::OperationDevice* device);
  // Whether the link to every other daemon moves device memory itself (Endpoint::MovesDirectly).
  bool LinksMoveDevice(const transport::Endpoint& endpoint) const;
  Algorithm ChooseAlgorithm(const OpSpec& spec);
  // Every kMeasurementExchangeEvery-th operation, before it runs, the daemons sum the all_reduce
  // times each measured since the last exchange and add them to the table every choice reads.
  static constexpr uint64_t kMeasurementExchangeEvery = 64;
  absl::Status ExchangeMeasurements(uint64_t seq, absl::Time deadline);
  // The operation's signature exchange with the check neighbours, overlapped with the operation:
  // StartPeerCheck posts the receive of the previous daemon's signature and gives this daemon's
  // to `piggyback`, which sends it with the operation's first message to the next daemon, or
  // alone before the operation first waits; FinishPeerCheck, after the operation (whose outcome
  // it is given), makes sure it went, waits for the previous one's and returns
  // FailedPrecondition describing both sides if they differ. A disagreement also aborts the
  // communicator's transport the moment it arrives, so a running operation stops.
  absl::Status StartPeerCheck(uint64_t seq, absl::Time deadline, const OpSpec& mine,
                              PiggybackEndpoint& piggyback, PeerCheck& check) const;
  absl::Status FinishPeerCheck(uint64_t seq, PiggybackEndpoint& piggyback, PeerCheck& check,
                               const absl::Status& outcome) const;
  absl::Status PeerCheckError(uint64_t seq, const absl::Status& status) const;
  // Rewrites data addresses in a transport error into "node (address)" for operators.
  absl::Status NamePeers(const absl::Status& status) const;
  const std::string& node_name() const { return layout_.daemons[layout_.self].name; }

  // Idle scratch a runner without the daemon's pool keeps between operations.
  static constexpr size_t kOwnScratchKeepBytes = size_t{16} << 20;

  const Layout layout_;
  const uint64_t comm_;
  transport::Endpoint* const endpoint_;
  const RunnerOptions options_;
  const CheckNeighbours check_neighbours_;
  // The scratch pool when options_ gives none, and the one the algorithms use.
  const std::unique_ptr<ScratchPool> own_scratch_;
  ScratchPool* const scratch_;
  // The running operation updates it; Predict reads it.
  mutable absl::Mutex measured_mu_;
  MeasuredTimes measured_ ABSL_GUARDED_BY(measured_mu_);
};

}  // namespace baton::collective
