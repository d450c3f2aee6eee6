#pragma once

// libbaton's session with its node's daemon: the gRPC stub, the session id, and the shared-memory
// buffers registered with the daemon (pointer -> buffer resolution). Internal.

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/shared_memory.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {

inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

inline void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

inline constexpr absl::Duration kControlTimeout = absl::Seconds(30);

// What a communicator needs of its client: the session, and pointer -> buffer resolution.
class Session {
 public:
  Session(std::unique_ptr<v1::Client::Stub> stub, uint64_t id, std::string node_name)
      : stub_(std::move(stub)), id_(id), node_name_(std::move(node_name)) {}

  v1::Client::Stub* stub() { return stub_.get(); }
  uint64_t id() const { return id_; }
  // Set once the session's watch stream to the daemon has ended (the daemon went away).
  void MarkLost() { lost_.store(true); }
  bool lost() const { return lost_.load(); }
  const std::string& node_name() const { return node_name_; }

  absl::StatusOr<void*> Allocate(size_t bytes) {
    static std::atomic<uint64_t> counter{0};
    const std::string name = absl::StrCat("/baton.", getpid(), ".", id_, ".", counter.fetch_add(1));
    absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Create(name, bytes);
    if (!memory.ok()) return memory.status();
    v1::RegisterBufferRequest request;
    request.set_session_id(id_);
    request.set_shm_name(name);
    request.set_size(bytes);
    v1::RegisterBufferResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    absl::Status status = FromGrpc(stub_->RegisterBuffer(&context, request, &response));
    // Both sides hold a mapping now (or the daemon failed): the name is no longer needed.
    (*memory)->Unlink();
    if (!status.ok()) return status;
    void* data = (*memory)->data();
    absl::MutexLock lock(&mu_);
    buffers_[static_cast<std::byte*>(data)] = Buffer{std::move(*memory), response.buffer_id()};
    return data;
  }

  absl::Status Free(void* data) {
    Buffer buffer;
    {
      absl::MutexLock lock(&mu_);
      auto it = buffers_.find(static_cast<std::byte*>(data));
      if (it == buffers_.end()) {
        return absl::InvalidArgumentError("pointer was not returned by Allocate");
      }
      buffer = std::move(it->second);
      buffers_.erase(it);
    }
    v1::ReleaseBufferRequest request;
    request.set_session_id(id_);
    request.set_buffer_id(buffer.id);
    v1::ReleaseBufferResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    return FromGrpc(stub_->ReleaseBuffer(&context, request, &response));
  }

  // The registered buffer holding [data, data + bytes), if any.
  std::optional<v1::BufferRef> Find(const void* data, size_t bytes) {
    const auto* begin = static_cast<const std::byte*>(data);
    absl::MutexLock lock(&mu_);
    auto it = buffers_.upper_bound(const_cast<std::byte*>(begin));
    if (it == buffers_.begin()) return std::nullopt;
    --it;
    const size_t offset = static_cast<size_t>(begin - it->first);
    if (offset > it->second.memory->size() || bytes > it->second.memory->size() - offset) {
      return std::nullopt;
    }
    v1::BufferRef ref;
    ref.set_buffer_id(it->second.id);
    ref.set_offset(offset);
    return ref;
  }

 private:
  struct Buffer {
    std::unique_ptr<SharedMemory> memory;
    uint64_t id = 0;
  };
  std::unique_ptr<v1::Client::Stub> stub_;
  const uint64_t id_;
  const std::string node_name_;
  std::atomic<bool> lost_{false};
  absl::Mutex mu_;
  std::map<std::byte*, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::core
