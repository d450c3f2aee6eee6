#pragma once

// The client's side of one rank's submission channel (common/submission_channel.h). Internal.

#include <unistd.h>

#include <atomic>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/lib/session.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "common/submission_channel.h"
#include "device/device.h"

namespace baton::core {

// The client's side of one rank's submission channel (common/submission_channel.h). Used by one
// thread at a time (the communicator runs its rank's operations one after another).
class ChannelClient {
 public:
  // Creates a channel for rank `rank` of communicator `comm_tag` and has the daemon attach it.
  // On failure the rank keeps using the gRPC path; the status says why.
  static absl::StatusOr<std::unique_ptr<ChannelClient>> Open(std::shared_ptr<Session> session,
                                                             uint64_t comm_tag, int rank) {
    // The page is a buffer of the session, registered like any other.
    absl::StatusOr<void*> memory = session->Allocate(channel::kChannelBytes);
    if (!memory.ok()) return memory.status();
    std::optional<v1::BufferRef> buffer = session->Find(*memory, channel::kChannelBytes);
    auto* page = new (*memory) channel::Layout;
    page->magic = channel::kMagic;
    page->version = channel::kVersion;
    v1::OpenChannelRequest request;
    request.set_session_id(session->id());
    request.set_comm_tag(comm_tag);
    request.set_rank(rank);
    request.set_buffer_id(buffer ? buffer->buffer_id() : 0);
    v1::OpenChannelResponse response;
    grpc::ClientContext context;
    session->Prepare(context, kControlTimeout);
    absl::Status status = FromGrpc(session->stub()->OpenChannel(&context, request, &response));
    if (!status.ok()) {
      session->Free(*memory).IgnoreError();
      return status;
    }
    return std::unique_ptr<ChannelClient>(new ChannelClient(std::move(session), page));
  }

  ~ChannelClient() {
    if (streams_ != nullptr) {
      // A stream may still have to pass its wait on the page (the GPU reads the word when the
      // stream gets there): the page and its registration stay for the life of the process,
      // whatever happens to the session.
      absl::StatusOr<std::unique_ptr<SharedMemory>> page = session_->Detach(page_);
      if (page.ok()) streams_->page_memory = *std::move(page);
      // Never freed (the streams may outlive every destructor); out of memory ends the process.
      static auto* retired_mu = new absl::Mutex;  // NOLINT(bugprone-unhandled-exception-at-new)
      // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new)
      static auto* retired = new std::vector<std::unique_ptr<Streams>>;
      absl::MutexLock lock(retired_mu);
      retired->push_back(std::move(streams_));
      return;
    }
    session_->Free(page_).IgnoreError();
  }
  ChannelClient(const ChannelClient&) = delete;
  ChannelClient& operator=(const ChannelClient&) = delete;

  // Runs one operation; returns the algorithm the daemon ran. After a failure to hear back (the
  // daemon closed the channel or vanished, or did not answer by the deadline) every later call
  // fails the same way: the daemon aborts the communicator in those cases anyway.
  // `aborted`: the communicator was aborted; stop waiting (the channel is not used again).
  absl::StatusOr<std::string> Run(const channel::OpDescriptor& op, absl::Duration timeout,
                                  const Session& session, const std::atomic<bool>& aborted) {
    if (!broken_.ok()) return broken_;
    page_->op = op;
    const uint32_t previous = submitted_++;
    channel::Publish(page_->submitted, submitted_, page_->daemon_sleeping);
    // The daemon enforces the timeout; this deadline only guards against a daemon that stopped
    // answering altogether.
    const absl::Time start = absl::Now();
    absl::Time lost_since = absl::InfiniteFuture();
    absl::Status waited = channel::WaitForChange(
        page_->completed, previous, page_->client_sleeping, spin_.next(),
        absl::Now() + timeout + absl::Seconds(10), [&]() -> absl::Status {
          // A result published just before the channel closed still counts.
          if (page_->completed.load() != previous) return absl::OkStatus();
          if (aborted.load()) return absl::AbortedError("the communicator was aborted");
          if (page_->closed.load() != 0) {
            return absl::UnavailableError(
                "batond closed this rank's submission channel (the daemon is shutting down or "
                "the communicator was destroyed)");
          }
          if (session.lost()) {
            // A daemon that shuts down ends the sessions first, then fails the operations in
            // flight and publishes their errors: give it a moment to say why.
            if (lost_since == absl::InfiniteFuture()) lost_since = absl::Now();
            if (absl::Now() - lost_since < kLostGrace) return absl::OkStatus();
            return absl::UnavailableError("lost the connection to batond");
          }
          return absl::OkStatus();
        });
    spin_.Record(absl::Now() - start);
    if (!waited.ok()) {
      broken_ = absl::IsDeadlineExceeded(waited)
                    ? absl::DeadlineExceededError("batond did not answer before the deadline")
                    : waited;
      return broken_;
    }
    std::string algorithm;
    absl::Status status = channel::ReadResult(page_->result, &algorithm);
    if (!status.ok()) return status;
    return algorithm;
  }

  // all_to_all_v's counts, written before Run.
  channel::VectorTail& vectors() { return page_->vectors; }

  // Stream-ordered operations (common/submission_channel.h): the rank's interprocess events,
  // made and registered with the daemon on first use, and the page registered for stream waits.
  static constexpr uint32_t kEvents = session::kMaxEvents;
  struct Streams {
    std::unique_ptr<SharedMemory> page_memory;  // set when retired (the destructor)
    device::Device* device = nullptr;
    std::vector<std::unique_ptr<device::Event>> events;
    uint64_t event_set = 0;
    std::unique_ptr<device::HostRegistration> page;
  };
  absl::StatusOr<Streams*> EnableStreams(device::Device* device) {
    if (streams_ != nullptr) return streams_.get();
    auto streams = std::make_unique<Streams>();
    streams->device = device;
    std::vector<const device::Event*> handles;
    for (uint32_t i = 0; i < kEvents; ++i) {
      BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event, device->CreateIpcEvent());
      handles.push_back(event.get());
      streams->events.push_back(std::move(event));
    }
    BATON_ASSIGN_OR_RETURN(streams->page, device->RegisterHost(page_, channel::kChannelBytes));
    BATON_ASSIGN_OR_RETURN(streams->event_set, session_->RegisterEvents(handles));
    streams_ = std::move(streams);
    return streams_.get();
  }
  // Null until EnableStreams.
  Streams* streams() const { return streams_.get(); }
  // The word the rank's streams wait on.
  std::atomic<uint32_t>& stream_done() { return page_->stream_done; }

 private:
  ChannelClient(std::shared_ptr<Session> session, channel::Layout* page)
      : session_(std::move(session)), page_(page) {}

  const std::shared_ptr<Session> session_;
  channel::Layout* const page_;
  // How long a result may still come after the daemon's session stream ended.
  static constexpr absl::Duration kLostGrace = absl::Seconds(1);

  uint32_t submitted_ = 0;
  std::unique_ptr<Streams> streams_;
  AdaptiveSpin spin_{channel::kDefaultSpin};
  absl::Status broken_;
};

}  // namespace baton::core
