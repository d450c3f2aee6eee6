#pragma once

// An endpoint for tests that holds its callers to registered memory, as a transport that moves
// registered memory only (verbs) would: RegisterMemory hands out regions it remembers until they
// are destroyed, a send or receive that names a region must name a live one of its own that
// holds the bytes (else it fails with FailedPrecondition), and the bytes of sends and receives
// that name no region are counted (raw_bytes), so a test can require that there are none.
// Forwards to an inner endpoint that moves host memory as it is. Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/forwarding_endpoint.h"
#include "transport/transport.h"

namespace baton::test {

class RegisteredOnlyEndpoint final : public transport::ForwardingEndpoint {
 public:
  // `moves_device`: also registers (and claims to move directly) memory said to be device memory,
  // whose bytes it moves as the inner endpoint moves host memory (for tests of who asks what).
  explicit RegisteredOnlyEndpoint(transport::Endpoint* inner, bool moves_device = false)
      : ForwardingEndpoint(inner), moves_device_(moves_device) {}

  absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> RegisterMemory(
      transport::ByteSpan bytes, transport::MemoryKind kind) override {
    if (kind != transport::MemoryKind::kHost && !moves_device_) {
      return absl::InvalidArgumentError("moves host memory only");
    }
    auto region = std::make_unique<Region>(this, bytes, kind);
    absl::MutexLock lock(&mu_);
    live_.insert(region.get());
    ++registrations_;
    return region;
  }

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    raw_bytes_ += data.size();
    return ForwardingEndpoint::Send(peer, tag, data, deadline);
  }
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override {
    for (const transport::OutMessage& message : messages) {
      if (message.region == nullptr) {
        raw_bytes_ += message.data.size();
        continue;
      }
      const size_t offset = static_cast<size_t>(
          message.data.data() - static_cast<const std::byte*>(message.region->bytes().data()));
      const transport::RegionSlice slice{message.region, offset, message.data.size()};
      if (absl::Status owned = Check(slice); !owned.ok()) return owned;
    }
    return ForwardingEndpoint::SendAll(peer, messages, deadline);
  }
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override {
    raw_bytes_ += data.size();
    return ForwardingEndpoint::PostRecv(peer, tag, data, deadline, std::move(on_arrival));
  }
  std::unique_ptr<transport::PostedSend> PostSend(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  const transport::RegionSlice& slice,
                                                  absl::Time deadline) override {
    if (absl::Status owned = Check(slice); !owned.ok()) return transport::CompletedSend(owned);
    region_bytes_ += slice.length;
    return transport::CompletedSend(ForwardingEndpoint::Send(
        peer, tag, slice.region->bytes().subspan(slice.offset, slice.length), deadline));
  }
  bool MovesDirectly(const std::string& /*peer*/, transport::MemoryKind kind) const override {
    return kind == transport::MemoryKind::kHost || moves_device_;
  }
  std::unique_ptr<transport::PostedRecv> PostRecvRegion(const std::string& peer,
                                                        const transport::Tag& tag,
                                                        const transport::RegionSlice& slice,
                                                        absl::Time deadline,
                                                        ArrivalCallback on_arrival) override {
    if (absl::Status owned = Check(slice); !owned.ok()) return transport::FailedRecv(owned);
    region_bytes_ += slice.length;
    return ForwardingEndpoint::PostRecv(peer, tag,
                                        slice.region->bytes().subspan(slice.offset, slice.length),
                                        deadline, std::move(on_arrival));
  }

  // Bytes sent or posted for receiving without a region, and with one.
  uint64_t raw_bytes() const { return raw_bytes_.load(); }
  uint64_t region_bytes() const { return region_bytes_.load(); }
  uint64_t registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  size_t live_regions() const {
    absl::MutexLock lock(&mu_);
    return live_.size();
  }

 private:
  class Region final : public transport::MemoryRegion {
   public:
    Region(RegisteredOnlyEndpoint* owner, transport::ByteSpan bytes, transport::MemoryKind kind)
        : MemoryRegion(bytes, kind), owner_(owner) {}
    ~Region() override {
      absl::MutexLock lock(&owner_->mu_);
      owner_->live_.erase(this);
    }

   private:
    RegisteredOnlyEndpoint* const owner_;
  };

  absl::Status Check(const transport::RegionSlice& slice) const {
    {
      absl::MutexLock lock(&mu_);
      if (!live_.contains(slice.region)) {
        return absl::FailedPreconditionError("names a region not registered with this endpoint");
      }
    }
    if (slice.offset > slice.region->bytes().size() ||
        slice.length > slice.region->bytes().size() - slice.offset) {
      return absl::FailedPreconditionError(
          absl::StrCat("names bytes outside its region: ", slice.length, " at ", slice.offset));
    }
    return absl::OkStatus();
  }

  const bool moves_device_;
  std::atomic<uint64_t> raw_bytes_{0};
  std::atomic<uint64_t> region_bytes_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_set<const transport::MemoryRegion*> live_ ABSL_GUARDED_BY(mu_);
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton::test
