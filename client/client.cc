// libbaton's implementation: a gRPC session with the local daemon, shared-memory buffers, and
// staging for memory the daemon cannot see.

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/baton.grpc.pb.h"
#include "client/baton.h"
#include "common/shared_memory.h"
#include "grpcpp/grpcpp.h"

namespace baton {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

constexpr absl::Duration kControlTimeout = absl::Seconds(30);

// What a communicator needs of its client: the session, and pointer -> buffer resolution.
class Session {
 public:
  Session(std::unique_ptr<v1::Client::Stub> stub, uint64_t id, std::string node_name)
      : stub_(std::move(stub)), id_(id), node_name_(std::move(node_name)) {}

  v1::Client::Stub* stub() { return stub_.get(); }
  uint64_t id() const { return id_; }
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
  absl::Mutex mu_;
  std::map<std::byte*, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
};

class CommunicatorImpl final : public Communicator {
 public:
  CommunicatorImpl(std::shared_ptr<Session> session, uint64_t tag, int world_size, int rank,
                   int daemon_count)
      : session_(std::move(session)),
        tag_(tag),
        world_size_(world_size),
        rank_(rank),
        daemon_count_(daemon_count) {}
  ~CommunicatorImpl() override { Destroy().IgnoreError(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int daemon_count() const override { return daemon_count_; }
  std::string last_algorithm() const override {
    absl::MutexLock lock(&mu_);
    return last_algorithm_;
  }

  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         absl::Duration timeout) override {
    const size_t element = collective::DataTypeSize(type);
    if (count > SIZE_MAX / element) {
      return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
    }
    const size_t bytes = count * element;
    if (bytes > 0 && (send == nullptr || recv == nullptr)) {
      return absl::InvalidArgumentError("send and recv must not be null");
    }
    absl::MutexLock lock(&mu_);  // one operation of this rank at a time; they run in order
    if (destroyed_) return absl::FailedPreconditionError("communicator was destroyed");
    v1::CollectiveRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    request.set_op(v1::COLLECTIVE_OP_ALL_REDUCE);
    request.set_data_type(std::string(collective::DataTypeName(type)));
    request.set_reduce_op(std::string(collective::ReduceOpName(op)));
    request.set_count(count);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));

    std::optional<v1::BufferRef> send_ref = session_->Find(send, bytes);
    std::optional<v1::BufferRef> recv_ref = session_->Find(recv, bytes);
    const bool staged = !send_ref || !recv_ref;
    if (staged) {
      // One staging buffer holds the input at offset 0 and the output after it.
      const bool in_place = send == recv;
      absl::Status status = EnsureStaging(in_place ? bytes : 2 * bytes);
      if (!status.ok()) return status;
      if (bytes > 0) std::memcpy(staging_, send, bytes);
      send_ref = session_->Find(staging_, bytes);
      recv_ref = session_->Find(static_cast<std::byte*>(staging_) + (in_place ? 0 : bytes), bytes);
    }
    *request.mutable_send() = *send_ref;
    *request.mutable_recv() = *recv_ref;
    v1::CollectiveResponse response;
    grpc::ClientContext context;
    // The daemon enforces `timeout`; the RPC deadline only guards against a daemon that vanished.
    SetDeadline(context, timeout + absl::Seconds(10));
    absl::Status status = FromGrpc(session_->stub()->Collective(&context, request, &response));
    if (!status.ok()) return status;
    if (staged && bytes > 0) {
      std::memcpy(recv, static_cast<std::byte*>(staging_) + (send == recv ? 0 : bytes), bytes);
    }
    last_algorithm_ = response.algorithm();
    return absl::OkStatus();
  }

  absl::Status Destroy() override {
    absl::MutexLock lock(&mu_);
    if (destroyed_) return absl::OkStatus();
    destroyed_ = true;
    if (staging_ != nullptr) session_->Free(staging_).IgnoreError();
    staging_ = nullptr;
    v1::DestroyRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    v1::DestroyResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    return FromGrpc(session_->stub()->Destroy(&context, request, &response));
  }

 private:
  absl::Status EnsureStaging(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (staging_ != nullptr && staging_bytes_ >= bytes) return absl::OkStatus();
    if (staging_ != nullptr) session_->Free(staging_).IgnoreError();
    staging_ = nullptr;
    // Grow geometrically so a sweep of sizes re-registers only a few times.
    const size_t size = std::max(bytes, staging_bytes_ * 2);
    absl::StatusOr<void*> data = session_->Allocate(size);
    if (!data.ok()) return data.status();
    staging_ = *data;
    staging_bytes_ = size;
    return absl::OkStatus();
  }

  const std::shared_ptr<Session> session_;
  const uint64_t tag_;
  const int world_size_;
  const int rank_;
  const int daemon_count_;
  mutable absl::Mutex mu_;
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  void* staging_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t staging_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_algorithm_ ABSL_GUARDED_BY(mu_);
};

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(std::shared_ptr<Session> session) : session_(std::move(session)) {
    // Held open for the session's lifetime: if this process dies, the daemon sees the stream end
    // and tears down what the session owned.
    watch_ = std::thread([this] {
      v1::WatchSessionRequest request;
      request.set_session_id(session_->id());
      auto reader = session_->stub()->WatchSession(&watch_context_, request);
      v1::SessionEvent event;
      while (reader->Read(&event)) {
      }
      reader->Finish().IgnoreError();
    });
  }

  ~ClientImpl() override {
    v1::CloseSessionRequest request;
    request.set_session_id(session_->id());
    v1::CloseSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(5));
    session_->stub()->CloseSession(&context, request, &response).IgnoreError();
    watch_context_.TryCancel();
    watch_.join();
  }

  absl::StatusOr<std::string> CreateCommId() override {
    v1::CreateCommIdRequest request;
    v1::CreateCommIdResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    absl::Status status = FromGrpc(session_->stub()->CreateCommId(&context, request, &response));
    if (!status.ok()) return status;
    return response.comm_id();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Join(const std::string& comm_id, int world_size,
                                                     int rank, absl::Duration timeout) override {
    v1::JoinRequest request;
    request.set_session_id(session_->id());
    request.set_comm_id(comm_id);
    request.set_world_size(world_size);
    request.set_rank(rank);
    request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
    v1::JoinResponse response;
    grpc::ClientContext context;
    SetDeadline(context, timeout + absl::Seconds(10));
    absl::Status status = FromGrpc(session_->stub()->Join(&context, request, &response));
    if (!status.ok()) return status;
    return std::unique_ptr<Communicator>(new CommunicatorImpl(
        session_, response.comm_tag(), world_size, rank, response.daemon_count()));
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override { return session_->Allocate(bytes); }
  absl::Status Free(void* data) override { return session_->Free(data); }
  const std::string& node_name() const override { return session_->node_name(); }

 private:
  std::shared_ptr<Session> session_;
  grpc::ClientContext watch_context_;
  std::thread watch_;
};

}  // namespace

std::string Client::DefaultSocketPath() {
  const char* env = std::getenv("BATON_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/run/baton/batond.sock";
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        absl::Duration timeout) {
  auto channel = grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach batond at ", socket_path, ": is the daemon running?"));
  }
  auto stub = v1::Client::NewStub(channel);
  v1::OpenSessionRequest request;
  request.set_pid(getpid());
  request.set_client_name("libbaton");
  v1::OpenSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  absl::Status status = FromGrpc(stub->OpenSession(&context, request, &response));
  if (!status.ok()) return status;
  auto session =
      std::make_shared<Session>(std::move(stub), response.session_id(), response.node_name());
  return std::unique_ptr<Client>(new ClientImpl(std::move(session)));
}

}  // namespace baton
