#pragma once

// Where one operation spends its time: waiting on the transport, and in reduction kernels. The
// daemon reports the rest of an operation's time as dispatch overhead (docs/metrics.md,
// baton_collective_time_seconds_total), and the bytes it staged as baton_device_staged_bytes_total.
// An operation runs on one thread, so plain fields do; reduction run elsewhere meanwhile is added
// at the end (CountReductionInWait), and so are the staging threads' bytes.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/forwarding_endpoint.h"
#include "transport/transport.h"

namespace baton::collective {

struct OpStats {
  std::chrono::nanoseconds transport{0};  // blocked in Send and Recv
  std::chrono::nanoseconds reduce{0};     // in reduction kernels
  // Copied between device and host memory, either way, to run the operation on device memory
  // through host memory (collective/device_staging.h); 0 when it ran on the host or on the device.
  uint64_t staged_bytes = 0;
  // Sent or received from memory not registered with the data plane (collective/
  // registered_memory.h): what a transport that moves registered memory only must copy.
  uint64_t unregistered_bytes = 0;
};

// Moves `reduce` of what stats->transport counts to stats->reduce: reduction that another thread
// ran while this one was waiting on the transport (a consumer of Endpoint::PostConsume). Does
// nothing if stats is null.
inline void CountReductionInWait(OpStats* stats, std::chrono::nanoseconds reduce) {
  if (stats == nullptr) return;
  stats->reduce += reduce;
  stats->transport -= std::min(stats->transport, reduce);
}

// Adds the time between its construction and destruction to *slot; does nothing if slot is null.
class PhaseTimer {
 public:
  explicit PhaseTimer(std::chrono::nanoseconds* slot)
      : slot_(slot), start_(slot == nullptr ? Clock::time_point{} : Clock::now()) {}
  ~PhaseTimer() {
    if (slot_ != nullptr) *slot_ += Clock::now() - start_;
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  std::chrono::nanoseconds* const slot_;
  const Clock::time_point start_;
};

// An endpoint that forwards to another and adds the time its Send and Recv calls block to
// stats->transport. One per operation: give it as OpContext::endpoint.
class TimingEndpoint final : public transport::ForwardingEndpoint {
 private:
  // Adds the time Wait blocks.
  class TimedRecv final : public transport::PostedRecv {
   public:
    TimedRecv(std::unique_ptr<transport::PostedRecv> inner, OpStats* stats)
        : inner_(std::move(inner)), stats_(stats) {}
    absl::Status Wait() override {
      PhaseTimer timer(&stats_->transport);
      return inner_->Wait();
    }
    bool Test() override { return inner_->Test(); }
    bool WaitBriefly() override {
      PhaseTimer timer(&stats_->transport);
      return inner_->WaitBriefly();
    }

   private:
    const std::unique_ptr<transport::PostedRecv> inner_;
    OpStats* const stats_;
  };
  // Adds the time Wait blocks.
  class TimedSend final : public transport::PostedSend {
   public:
    TimedSend(std::unique_ptr<transport::PostedSend> inner, OpStats* stats)
        : inner_(std::move(inner)), stats_(stats) {}
    absl::Status Wait() override {
      PhaseTimer timer(&stats_->transport);
      return inner_->Wait();
    }
    bool Test() override { return inner_->Test(); }

   private:
    const std::unique_ptr<transport::PostedSend> inner_;
    OpStats* const stats_;
  };

 public:
  TimingEndpoint(transport::Endpoint* inner, OpStats* stats)
      : ForwardingEndpoint(inner), stats_(stats) {}

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    PhaseTimer timer(&stats_->transport);
    return ForwardingEndpoint::Send(peer, tag, data, deadline);
  }
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override {
    PhaseTimer timer(&stats_->transport);
    return ForwardingEndpoint::SendAll(peer, messages, deadline);
  }
  std::unique_ptr<transport::PostedSend> PostSend(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  const transport::RegionSlice& slice,
                                                  absl::Time deadline) override {
    PhaseTimer timer(&stats_->transport);
    return std::make_unique<TimedSend>(ForwardingEndpoint::PostSend(peer, tag, slice, deadline),
                                       stats_);
  }
  std::unique_ptr<transport::PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                                   const transport::RegionSlice& source,
                                                   const transport::RemoteRegion& target,
                                                   size_t target_offset,
                                                   std::optional<uint32_t> notify,
                                                   absl::Time deadline) override {
    PhaseTimer timer(&stats_->transport);
    return std::make_unique<TimedSend>(
        ForwardingEndpoint::PostWrite(peer, comm, source, target, target_offset, notify, deadline),
        stats_);
  }
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override {
    PhaseTimer timer(&stats_->transport);
    return std::make_unique<TimedRecv>(
        ForwardingEndpoint::PostRecv(peer, tag, data, deadline, std::move(on_arrival)), stats_);
  }
  std::unique_ptr<transport::PostedRecv> PostConsume(const std::string& peer,
                                                     const transport::Tag& tag, size_t length,
                                                     absl::Time deadline,
                                                     PieceConsumer consume) override {
    PhaseTimer timer(&stats_->transport);
    return std::make_unique<TimedRecv>(
        ForwardingEndpoint::PostConsume(peer, tag, length, deadline, std::move(consume)), stats_);
  }
  std::unique_ptr<transport::PostedRecv> PostRecvRegion(const std::string& peer,
                                                        const transport::Tag& tag,
                                                        const transport::RegionSlice& slice,
                                                        absl::Time deadline,
                                                        ArrivalCallback on_arrival) override {
    PhaseTimer timer(&stats_->transport);
    return std::make_unique<TimedRecv>(
        ForwardingEndpoint::PostRecvRegion(peer, tag, slice, deadline, std::move(on_arrival)),
        stats_);
  }

 private:
  OpStats* const stats_;
};

}  // namespace baton::collective
