#include "collective/piggyback_endpoint.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/status_macros.h"

namespace baton::collective {
namespace {

// A receive that sends the endpoint's held message before it may sleep: once the transport's
// brief wait (its spin) did not complete it.
class FlushingRecv final : public transport::PostedRecv {
 public:
  FlushingRecv(PiggybackEndpoint* endpoint, std::unique_ptr<transport::PostedRecv> inner)
      : endpoint_(endpoint), inner_(std::move(inner)) {}
  absl::Status Wait() override {
    if (!inner_->WaitBriefly()) BATON_RETURN_IF_ERROR(endpoint_->Flush());
    return inner_->Wait();
  }
  bool Test() override { return inner_->Test(); }
  bool WaitBriefly() override { return inner_->WaitBriefly(); }

 private:
  PiggybackEndpoint* const endpoint_;
  const std::unique_ptr<transport::PostedRecv> inner_;
};

// The same for a posted write, and an exposure: neither has a brief wait, so the held message
// goes unless it has completed already.
class FlushingSend final : public transport::PostedSend {
 public:
  FlushingSend(PiggybackEndpoint* endpoint, std::unique_ptr<transport::PostedSend> inner)
      : endpoint_(endpoint), inner_(std::move(inner)) {}
  absl::Status Wait() override {
    if (!inner_->Test()) BATON_RETURN_IF_ERROR(endpoint_->Flush());
    return inner_->Wait();
  }
  bool Test() override { return inner_->Test(); }

 private:
  PiggybackEndpoint* const endpoint_;
  const std::unique_ptr<transport::PostedSend> inner_;
};

class FlushingExposure final : public transport::ExposedRegion {
 public:
  FlushingExposure(PiggybackEndpoint* endpoint, std::unique_ptr<transport::ExposedRegion> inner)
      : endpoint_(endpoint), inner_(std::move(inner)) {}
  const transport::RemoteRegion& descriptor() const override { return inner_->descriptor(); }
  absl::StatusOr<transport::WriteNotice> Wait() override {
    if (!inner_->Test()) BATON_RETURN_IF_ERROR(endpoint_->Flush());
    return inner_->Wait();
  }
  bool Test() override { return inner_->Test(); }

 private:
  PiggybackEndpoint* const endpoint_;
  const std::unique_ptr<transport::ExposedRegion> inner_;
};

}  // namespace

absl::Status PiggybackEndpoint::Hold(const std::string& peer, const transport::Tag& tag,
                                     transport::ConstByteSpan data, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  BATON_RETURN_IF_ERROR(FlushLocked());
  held_ = Held{peer, tag, std::vector<std::byte>(data.begin(), data.end()), deadline};
  return absl::OkStatus();
}

absl::Status PiggybackEndpoint::Flush() {
  absl::MutexLock lock(&mu_);
  return FlushLocked();
}

absl::Status PiggybackEndpoint::FlushLocked() {
  if (!held_.has_value()) return absl::OkStatus();
  const Held held = *std::exchange(held_, std::nullopt);
  return inner()->Send(held.peer, held.tag, held.data, held.deadline);
}

absl::Status PiggybackEndpoint::Send(const std::string& peer, const transport::Tag& tag,
                                     transport::ConstByteSpan data, absl::Time deadline) {
  const transport::OutMessage message{tag, data};
  return SendAll(peer, std::span(&message, 1), deadline);
}

absl::Status PiggybackEndpoint::SendAll(const std::string& peer,
                                        std::span<const transport::OutMessage> messages,
                                        absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!held_.has_value()) return inner()->SendAll(peer, messages, deadline);
  if (held_->peer == peer && !messages.empty() && held_->tag.comm == messages.front().tag.comm) {
    const Held held = *std::exchange(held_, std::nullopt);
    std::vector<transport::OutMessage> all;
    all.reserve(1 + messages.size());
    all.push_back(transport::OutMessage{held.tag, held.data});
    all.insert(all.end(), messages.begin(), messages.end());
    return inner()->SendAll(peer, std::span(all.data(), all.size()),
                            std::min(deadline, held.deadline));
  }
  size_t bytes = 0;
  for (const transport::OutMessage& message : messages) bytes += message.data.size();
  if (bytes > kHeldAcrossBytes) BATON_RETURN_IF_ERROR(FlushLocked());
  return inner()->SendAll(peer, messages, deadline);
}

std::unique_ptr<transport::PostedRecv> PiggybackEndpoint::PostRecv(const std::string& peer,
                                                                   const transport::Tag& tag,
                                                                   transport::ByteSpan data,
                                                                   absl::Time deadline,
                                                                   ArrivalCallback on_arrival) {
  return std::make_unique<FlushingRecv>(
      this, inner()->PostRecv(peer, tag, data, deadline, std::move(on_arrival)));
}

std::unique_ptr<transport::PostedRecv> PiggybackEndpoint::PostConsume(const std::string& peer,
                                                                      const transport::Tag& tag,
                                                                      size_t length,
                                                                      absl::Time deadline,
                                                                      PieceConsumer consume) {
  return std::make_unique<FlushingRecv>(
      this, inner()->PostConsume(peer, tag, length, deadline, std::move(consume)));
}

std::unique_ptr<transport::PostedSend> PiggybackEndpoint::PostSend(
    const std::string& peer, const transport::Tag& tag, const transport::RegionSlice& slice,
    absl::Time deadline) {
  if (slice.region == nullptr) return inner()->PostSend(peer, tag, slice, deadline);
  absl::StatusOr<transport::ByteSpan> bytes = slice.region->Slice(slice.offset, slice.length);
  if (!bytes.ok()) return transport::CompletedSend(bytes.status());
  // As SendAll: it may ride with the held message, and keeps naming its region. Sent when this
  // returns, as every transport's SendAll is.
  const transport::OutMessage message{tag, *bytes, slice.region};
  return transport::CompletedSend(SendAll(peer, std::span(&message, 1), deadline));
}

std::unique_ptr<transport::PostedSend> PiggybackEndpoint::PostWrite(
    const std::string& peer, uint64_t comm, const transport::RegionSlice& source,
    const transport::RemoteRegion& target, size_t target_offset, std::optional<uint32_t> notify,
    absl::Time deadline) {
  if (source.length > kHeldAcrossBytes) {
    if (absl::Status flushed = Flush(); !flushed.ok()) {
      return transport::CompletedSend(std::move(flushed));
    }
  }
  return std::make_unique<FlushingSend>(
      this, inner()->PostWrite(peer, comm, source, target, target_offset, notify, deadline));
}

std::unique_ptr<transport::ExposedRegion> PiggybackEndpoint::ExposeRegion(
    const std::string& peer, uint64_t comm, const transport::RegionSlice& slice,
    absl::Time deadline) {
  return std::make_unique<FlushingExposure>(this,
                                            inner()->ExposeRegion(peer, comm, slice, deadline));
}

std::unique_ptr<transport::PostedRecv> PiggybackEndpoint::PostRecvRegion(
    const std::string& peer, const transport::Tag& tag, const transport::RegionSlice& slice,
    absl::Time deadline, ArrivalCallback on_arrival) {
  return std::make_unique<FlushingRecv>(
      this, inner()->PostRecvRegion(peer, tag, slice, deadline, std::move(on_arrival)));
}

}  // namespace baton::collective
