// libbaton's implementation: a gRPC session with the local daemon, shared-memory buffers, and
// staging for memory the daemon cannot see.

#include "client/lib/client_core.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/shared_memory.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "common/submission_channel.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {
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

// The client's side of one rank's submission channel (common/submission_channel.h). Used by one
// thread at a time (the communicator runs its rank's operations one after another).
class ChannelClient {
 public:
  // Creates a channel for rank `rank` of communicator `comm_tag` and has the daemon attach it.
  // On failure the rank keeps using the gRPC path; the status says why.
  static absl::StatusOr<std::unique_ptr<ChannelClient>> Open(Session& session, uint64_t comm_tag,
                                                             int rank) {
    static std::atomic<uint64_t> counter{0};
    const std::string name =
        absl::StrCat("/baton.", getpid(), ".", session.id(), ".channel.", counter.fetch_add(1));
    absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
        SharedMemory::Create(name, channel::kChannelBytes);
    if (!memory.ok()) return memory.status();
    auto* page = new ((*memory)->data()) channel::Layout;
    page->magic = channel::kMagic;
    page->version = channel::kVersion;
    v1::OpenChannelRequest request;
    request.set_session_id(session.id());
    request.set_comm_tag(comm_tag);
    request.set_rank(rank);
    request.set_shm_name(name);
    v1::OpenChannelResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    absl::Status status = FromGrpc(session.stub()->OpenChannel(&context, request, &response));
    (*memory)->Unlink();
    if (!status.ok()) return status;
    return std::unique_ptr<ChannelClient>(new ChannelClient(std::move(*memory), page));
  }

  // Runs one operation; returns the algorithm the daemon ran. After a failure to hear back (the
  // daemon closed the channel or vanished, or did not answer by the deadline) every later call
  // fails the same way: the daemon aborts the communicator in those cases anyway.
  absl::StatusOr<std::string> Run(const channel::OpDescriptor& op, absl::Duration timeout,
                                  const Session& session) {
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

 private:
  ChannelClient(std::unique_ptr<SharedMemory> memory, channel::Layout* page)
      : memory_(std::move(memory)), page_(page) {}

  const std::unique_ptr<SharedMemory> memory_;
  channel::Layout* const page_;
  // How long a result may still come after the daemon's session stream ended.
  static constexpr absl::Duration kLostGrace = absl::Seconds(1);

  uint32_t submitted_ = 0;
  AdaptiveSpin spin_{channel::kDefaultSpin};
  absl::Status broken_;
};

absl::StatusOr<std::string> CreateCommIdVia(Session& session) {
  v1::CreateCommIdRequest request;
  v1::CreateCommIdResponse response;
  grpc::ClientContext context;
  SetDeadline(context, kControlTimeout);
  absl::Status status = FromGrpc(session.stub()->CreateCommId(&context, request, &response));
  if (!status.ok()) return status;
  return response.comm_id();
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinVia(const std::shared_ptr<Session>& session,
                                                      const std::string& comm_id, int world_size,
                                                      int rank, absl::Duration timeout);

class CommunicatorImpl final : public Communicator {
 public:
  CommunicatorImpl(std::shared_ptr<Session> session, uint64_t tag, int world_size, int rank,
                   int daemon_count, std::unique_ptr<ChannelClient> channel)
      : session_(std::move(session)),
        tag_(tag),
        world_size_(world_size),
        rank_(rank),
        daemon_count_(daemon_count),
        channel_(std::move(channel)) {}
  ~CommunicatorImpl() override { Destroy().IgnoreError(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int daemon_count() const override { return daemon_count_; }
  std::string last_algorithm() const override {
    absl::MutexLock lock(&mu_);
    return last_algorithm_;
  }

  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         const CallOptions& options) override {
    return Blocking(AllReduceCall(send, recv, count, type, op), options);
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, const CallOptions& options) override {
    return Blocking(ReduceScatterCall(send, recv, recv_count, type, op), options);
  }
  absl::Status AllGather(const void* send, void* recv, size_t send_count, DataType type,
                         const CallOptions& options) override {
    return Blocking(AllGatherCall(send, recv, send_count, type), options);
  }
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         const CallOptions& options) override {
    return Blocking(BroadcastCall(send, recv, count, type, root), options);
  }
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, const CallOptions& options) override {
    return Blocking(ReduceCall(send, recv, count, type, op, root), options);
  }
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        const CallOptions& options) override {
    return Blocking(AllToAllCall(send, recv, count, type), options);
  }
  absl::Status Barrier(const CallOptions& options) override {
    return Blocking(BarrierCall(), options);
  }

  std::shared_ptr<Request> AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options) override {
    return Enqueue(AllReduceCall(send, recv, count, type, op), options);
  }
  std::shared_ptr<Request> ReduceScatterAsync(const void* send, void* recv, size_t recv_count,
                                              DataType type, ReduceOp op,
                                              const CallOptions& options) override {
    return Enqueue(ReduceScatterCall(send, recv, recv_count, type, op), options);
  }
  std::shared_ptr<Request> AllGatherAsync(const void* send, void* recv, size_t send_count,
                                          DataType type, const CallOptions& options) override {
    return Enqueue(AllGatherCall(send, recv, send_count, type), options);
  }
  std::shared_ptr<Request> BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                          int root, const CallOptions& options) override {
    return Enqueue(BroadcastCall(send, recv, count, type, root), options);
  }
  std::shared_ptr<Request> ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op, int root, const CallOptions& options) override {
    return Enqueue(ReduceCall(send, recv, count, type, op, root), options);
  }
  std::shared_ptr<Request> AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options) override {
    return Enqueue(AllToAllCall(send, recv, count, type), options);
  }
  std::shared_ptr<Request> BarrierAsync(const CallOptions& options) override {
    return Enqueue(BarrierCall(), options);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key,
                                                      absl::Duration timeout) override;

  absl::StatusOr<std::vector<AlgorithmEstimate>> Explain(collective::Collective collective,
                                                         size_t count, DataType type) override {
    v1::ExplainRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_collective(std::string(collective::CollectiveName(collective)));
    request.set_data_type(std::string(collective::DataTypeName(type)));
    request.set_count(count);
    v1::ExplainResponse response;
    grpc::ClientContext context;
    SetDeadline(context, kControlTimeout);
    absl::Status status = FromGrpc(session_->stub()->Explain(&context, request, &response));
    if (!status.ok()) return status;
    std::vector<AlgorithmEstimate> estimates;
    for (const v1::AlgorithmEstimate& estimate : response.estimates()) {
      std::optional<Algorithm> algorithm = collective::ParseAlgorithm(estimate.algorithm());
      if (!algorithm) {
        return absl::InternalError(
            absl::StrCat("the daemon named an unknown algorithm '", estimate.algorithm(), "'"));
      }
      AlgorithmEstimate e;
      e.algorithm = *algorithm;
      e.predicted = absl::Seconds(estimate.predicted_seconds());
      if (estimate.measured_seconds() > 0) e.measured = absl::Seconds(estimate.measured_seconds());
      e.measured_samples = estimate.measured_samples();
      estimates.push_back(e);
    }
    return estimates;
  }

  absl::Status Destroy() override {
    DrainQueue();
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
  // One call as the daemon sees it: which buffers it reads and writes, and how many elements.
  struct Call {
    v1::CollectiveOp op;
    const void* send;
    void* recv;
    size_t count;       // the request's count (see the proto)
    size_t send_count;  // elements read from send
    size_t recv_count;  // elements written to recv
    DataType type;
    ReduceOp reduce_op;
    int root;
    bool reads_send;   // this rank's send is read
    bool writes_recv;  // this rank's recv is written
  };

  class RequestImpl final : public Request {
   public:
    absl::Status Wait(absl::Duration timeout) override {
      if (!done_.WaitForNotificationWithTimeout(timeout)) {
        return absl::DeadlineExceededError("the operation is still running");
      }
      return status_;
    }
    std::optional<absl::Status> Test() override {
      if (!done_.HasBeenNotified()) return std::nullopt;
      return status_;
    }
    void Complete(absl::Status status) {
      status_ = std::move(status);
      done_.Notify();
    }

   private:
    absl::Notification done_;
    absl::Status status_;  // written once, before done_ is notified
  };

  // Runs a call in submission order: inline when nothing is queued or running, else after the
  // queued calls.
  absl::Status Blocking(absl::StatusOr<Call> call, const CallOptions& options) {
    if (!call.ok()) return call.status();
    {
      absl::MutexLock lock(&queue_mu_);
      if (queue_.empty() && !running_) {
        running_ = true;
        queue_mu_.Unlock();
        absl::Status status = Run(*call, options);
        queue_mu_.Lock();
        running_ = false;
        return status;
      }
    }
    return Enqueue(std::move(call), options)->Wait();
  }

  std::shared_ptr<Request> Enqueue(absl::StatusOr<Call> call, const CallOptions& options) {
    auto request = std::make_shared<RequestImpl>();
    if (!call.ok()) {
      request->Complete(call.status());
      return request;
    }
    absl::MutexLock lock(&queue_mu_);
    if (closing_) {
      request->Complete(absl::FailedPreconditionError("communicator was destroyed"));
      return request;
    }
    queue_.push_back(Queued{*call, options, request});
    if (!worker_.joinable()) worker_ = std::thread([this] { RunQueue(); });
    return request;
  }

  // The worker behind the *Async calls: runs queued calls one at a time, in order.
  void RunQueue() {
    absl::MutexLock lock(&queue_mu_);
    while (true) {
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu_) {
        return (!queue_.empty() && !running_) || (closing_ && queue_.empty());
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // closing
      Queued next = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      queue_mu_.Unlock();
      next.request->Complete(Run(next.call, next.options));
      queue_mu_.Lock();
      running_ = false;
    }
  }

  // Stops taking calls and waits for the queued ones.
  void DrainQueue() {
    {
      absl::MutexLock lock(&queue_mu_);
      closing_ = true;
    }
    if (worker_.joinable()) worker_.join();
    absl::MutexLock lock(&queue_mu_);
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu_) { return !running_; };
    queue_mu_.Await(absl::Condition(&idle));
  }

  absl::StatusOr<Call> AllReduceCall(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp op) const {
    return Call{
        v1::COLLECTIVE_OP_ALL_REDUCE, send, recv, count, count, count, type, op, 0, true, true};
  }
  absl::StatusOr<Call> ReduceScatterCall(const void* send, void* recv, size_t recv_count,
                                         DataType type, ReduceOp op) const {
    size_t send_count = 0;
    BATON_ASSIGN_OR_RETURN(send_count, Times(recv_count, world_size_));
    return Call{v1::COLLECTIVE_OP_REDUCE_SCATTER,
                send,
                recv,
                recv_count,
                send_count,
                recv_count,
                type,
                op,
                0,
                true,
                true};
  }
  absl::StatusOr<Call> AllGatherCall(const void* send, void* recv, size_t send_count,
                                     DataType type) const {
    size_t recv_count = 0;
    BATON_ASSIGN_OR_RETURN(recv_count, Times(send_count, world_size_));
    return Call{v1::COLLECTIVE_OP_ALL_GATHER,
                send,
                recv,
                send_count,
                send_count,
                recv_count,
                type,
                ReduceOp::kSum,
                0,
                true,
                true};
  }
  absl::StatusOr<Call> BroadcastCall(const void* send, void* recv, size_t count, DataType type,
                                     int root) const {
    BATON_RETURN_IF_ERROR(CheckRoot(root));
    const bool is_root = root == rank_;
    return Call{v1::COLLECTIVE_OP_BROADCAST,
                is_root ? send : recv,
                recv,
                count,
                count,
                count,
                type,
                ReduceOp::kSum,
                root,
                is_root,
                true};
  }
  absl::StatusOr<Call> ReduceCall(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, int root) const {
    BATON_RETURN_IF_ERROR(CheckRoot(root));
    const bool is_root = root == rank_;
    return Call{v1::COLLECTIVE_OP_REDUCE,
                send,
                is_root ? recv : const_cast<void*>(send),
                count,
                count,
                count,
                type,
                op,
                root,
                true,
                is_root};
  }
  absl::StatusOr<Call> AllToAllCall(const void* send, void* recv, size_t count,
                                    DataType type) const {
    size_t total = 0;
    BATON_ASSIGN_OR_RETURN(total, Times(count, world_size_));
    return Call{v1::COLLECTIVE_OP_ALL_TO_ALL,
                send,
                recv,
                count,
                total,
                total,
                type,
                ReduceOp::kSum,
                0,
                true,
                true};
  }
  absl::StatusOr<Call> BarrierCall() const {
    return Call{v1::COLLECTIVE_OP_BARRIER, nullptr,        nullptr, 0,     0,    0,
                DataType::kUint8,          ReduceOp::kSum, 0,       false, false};
  }

  static collective::Collective KindOf(v1::CollectiveOp op) {
    switch (op) {
      case v1::COLLECTIVE_OP_REDUCE_SCATTER:
        return collective::Collective::kReduceScatter;
      case v1::COLLECTIVE_OP_ALL_GATHER:
        return collective::Collective::kAllGather;
      case v1::COLLECTIVE_OP_BROADCAST:
        return collective::Collective::kBroadcast;
      case v1::COLLECTIVE_OP_REDUCE:
        return collective::Collective::kReduce;
      case v1::COLLECTIVE_OP_ALL_TO_ALL:
        return collective::Collective::kAllToAll;
      case v1::COLLECTIVE_OP_BARRIER:
        return collective::Collective::kBarrier;
      default:
        return collective::Collective::kAllReduce;
    }
  }

  absl::StatusOr<size_t> Times(size_t count, int factor) const {
    if (count > SIZE_MAX / static_cast<size_t>(factor)) {
      return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
    }
    return count * static_cast<size_t>(factor);
  }

  absl::Status CheckRoot(int root) const {
    if (root < 0 || root >= world_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("root ", root, " is out of range for world size ", world_size_));
    }
    return absl::OkStatus();
  }

  absl::Status Run(const Call& call, const CallOptions& options) {
    const size_t element = collective::DataTypeSize(call.type);
    if (element == 0) return absl::InvalidArgumentError("unknown data type");
    if (std::max(call.send_count, call.recv_count) > SIZE_MAX / element) {
      return absl::InvalidArgumentError(absl::StrCat("count ", call.count, " overflows"));
    }
    const size_t send_bytes = call.reads_send ? call.send_count * element : 0;
    const size_t recv_bytes = call.writes_recv ? call.recv_count * element : 0;
    if ((send_bytes > 0 && call.send == nullptr) || (recv_bytes > 0 && call.recv == nullptr)) {
      return absl::InvalidArgumentError("send and recv must not be null");
    }
    // $BATON_ALGO overrides the daemon's choice for the collectives that algorithm implements
    // (like NCCL_ALGO); an explicit per-call choice must be implemented.
    std::optional<Algorithm> algorithm = options.algorithm;
    if (!algorithm) {
      if (const char* env = std::getenv("BATON_ALGO"); env != nullptr && *env != '\0') {
        std::optional<Algorithm> parsed = collective::ParseAlgorithm(env);
        if (!parsed) {
          return absl::InvalidArgumentError(
              absl::StrCat("BATON_ALGO='", env, "' is not one of ring, tree, direct"));
        }
        if (collective::IsSupported(KindOf(call.op), *parsed)) algorithm = parsed;
      }
    }
    absl::MutexLock lock(&mu_);  // one operation of this rank at a time; they run in order
    if (destroyed_) return absl::FailedPreconditionError("communicator was destroyed");

    // Registered memory is used in place; anything else goes through the staging buffer, which
    // holds the input at offset 0 and the output after it.
    std::optional<v1::BufferRef> send_ref =
        send_bytes > 0 ? session_->Find(call.send, send_bytes) : std::nullopt;
    std::optional<v1::BufferRef> recv_ref =
        recv_bytes > 0 ? session_->Find(call.recv, recv_bytes) : std::nullopt;
    const bool staged = (send_bytes > 0 && !send_ref) || (recv_bytes > 0 && !recv_ref);
    if (staged) {
      BATON_RETURN_IF_ERROR(EnsureStaging(send_bytes + recv_bytes));
      auto* staging = static_cast<std::byte*>(staging_);
      if (send_bytes > 0) std::memcpy(staging, call.send, send_bytes);
      send_ref = session_->Find(staging, send_bytes);
      recv_ref = session_->Find(staging + send_bytes, recv_bytes);
    }
    absl::StatusOr<std::string> ran =
        channel_ != nullptr ? RunOnChannel(call, algorithm, send_ref, recv_ref, options)
                            : RunOnGrpc(call, algorithm, send_ref, recv_ref, options);
    if (!ran.ok()) return ran.status();
    if (staged && recv_bytes > 0) {
      std::memcpy(call.recv, static_cast<std::byte*>(staging_) + send_bytes, recv_bytes);
    }
    last_algorithm_ = *std::move(ran);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> RunOnChannel(const Call& call, std::optional<Algorithm> algorithm,
                                           const std::optional<v1::BufferRef>& send,
                                           const std::optional<v1::BufferRef>& recv,
                                           const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    channel::OpDescriptor op;
    op.kind = static_cast<uint32_t>(KindOf(call.op));
    op.data_type = static_cast<uint32_t>(call.type);
    op.reduce_op = static_cast<uint32_t>(call.reduce_op);
    op.root = call.root;
    op.algorithm = algorithm ? 1 + static_cast<uint32_t>(*algorithm) : 0;
    op.count = call.count;
    if (send) {
      op.send_buffer = send->buffer_id();
      op.send_offset = send->offset();
    }
    if (recv) {
      op.recv_buffer = recv->buffer_id();
      op.recv_offset = recv->offset();
    }
    op.timeout_ms = absl::ToInt64Milliseconds(options.timeout);
    return channel_->Run(op, options.timeout, *session_);
  }

  absl::StatusOr<std::string> RunOnGrpc(const Call& call, std::optional<Algorithm> algorithm,
                                        const std::optional<v1::BufferRef>& send,
                                        const std::optional<v1::BufferRef>& recv,
                                        const CallOptions& options) {
    v1::CollectiveRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    request.set_op(call.op);
    request.set_data_type(std::string(collective::DataTypeName(call.type)));
    request.set_reduce_op(std::string(collective::ReduceOpName(call.reduce_op)));
    request.set_count(call.count);
    request.set_root(call.root);
    if (algorithm) request.set_algorithm(std::string(collective::AlgorithmName(*algorithm)));
    request.set_timeout_ms(absl::ToInt64Milliseconds(options.timeout));
    if (send) *request.mutable_send() = *send;
    if (recv) *request.mutable_recv() = *recv;
    v1::CollectiveResponse response;
    grpc::ClientContext context;
    // The daemon enforces the timeout; the RPC deadline only guards against a daemon that
    // vanished.
    SetDeadline(context, options.timeout + absl::Seconds(10));
    absl::Status status = FromGrpc(session_->stub()->Collective(&context, request, &response));
    if (!status.ok()) return status;
    return response.algorithm();
  }

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
  // Null when the rank submits over gRPC ($BATON_SUBMIT=grpc, or the daemon refused a channel).
  const std::unique_ptr<ChannelClient> channel_ ABSL_PT_GUARDED_BY(mu_);
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  void* staging_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t staging_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_algorithm_ ABSL_GUARDED_BY(mu_);

  struct Queued {
    Call call;
    CallOptions options;
    std::shared_ptr<RequestImpl> request;
  };
  absl::Mutex queue_mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool running_ ABSL_GUARDED_BY(queue_mu_) = false;  // a call is executing (inline or queued)
  bool closing_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread worker_;  // started by the first queued call
};

absl::StatusOr<std::unique_ptr<Communicator>> JoinVia(const std::shared_ptr<Session>& session,
                                                      const std::string& comm_id, int world_size,
                                                      int rank, absl::Duration timeout) {
  v1::JoinRequest request;
  request.set_session_id(session->id());
  request.set_comm_id(comm_id);
  request.set_world_size(world_size);
  request.set_rank(rank);
  request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  v1::JoinResponse response;
  grpc::ClientContext context;
  SetDeadline(context, timeout + absl::Seconds(10));
  absl::Status status = FromGrpc(session->stub()->Join(&context, request, &response));
  if (!status.ok()) return status;
  // Operations go through a shared-memory submission channel unless $BATON_SUBMIT=grpc; a daemon
  // that cannot attach one is served over gRPC instead.
  std::unique_ptr<ChannelClient> channel;
  const char* submit = std::getenv("BATON_SUBMIT");
  if (submit == nullptr || std::string_view(submit) != "grpc") {
    absl::StatusOr<std::unique_ptr<ChannelClient>> opened =
        ChannelClient::Open(*session, response.comm_tag(), rank);
    if (opened.ok()) channel = *std::move(opened);
  }
  return std::unique_ptr<Communicator>(new CommunicatorImpl(
      session, response.comm_tag(), world_size, rank, response.daemon_count(), std::move(channel)));
}

absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorImpl::Split(int color, int key,
                                                                      absl::Duration timeout) {
  // Built from this communicator's own collectives, like MPI implementations do:
  // 1. all-gather every rank's (color, key);
  // 2. the first rank of each colour, by (key, rank), creates the new communicator's id at its
  //    daemon, and every rank all-gathers the ids;
  // 3. each rank joins its colour's communicator with its place in (key, rank) order.
  const int world = world_size_;
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(world));
  CallOptions options(timeout);
  BATON_RETURN_IF_ERROR(AllGather(mine.data(), all.data(), 2, DataType::kInt64, options));
  std::vector<int> members;  // ranks of my colour, in (key, rank) order
  if (color >= 0) {
    for (int r = 0; r < world; ++r) {
      if (all[2 * r] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  }
  constexpr size_t kIdBytes = 256;
  std::vector<char> id(kIdBytes, '\0');
  if (!members.empty() && members.front() == rank_) {
    absl::StatusOr<std::string> created = CreateCommIdVia(*session_);
    // A failure here must not leave the others waiting: share an empty id and fail after.
    if (created.ok() && created->size() < kIdBytes) {
      std::copy(created->begin(), created->end(), id.begin());
    }
  }
  std::vector<char> ids(kIdBytes * static_cast<size_t>(world));
  BATON_RETURN_IF_ERROR(AllGather(id.data(), ids.data(), kIdBytes, DataType::kUint8, options));
  if (members.empty()) return std::unique_ptr<Communicator>();
  const std::string comm_id(&ids[kIdBytes * static_cast<size_t>(members.front())]);
  if (comm_id.empty()) {
    return absl::UnavailableError(
        absl::StrCat("rank ", members.front(), " could not create the new communicator's id"));
  }
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  return JoinVia(session_, comm_id, static_cast<int>(members.size()), new_rank, timeout);
}

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
      session_->MarkLost();
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

  absl::StatusOr<std::string> CreateCommId() override { return CreateCommIdVia(*session_); }

  absl::StatusOr<std::unique_ptr<Communicator>> Join(const std::string& comm_id, int world_size,
                                                     int rank, absl::Duration timeout) override {
    return JoinVia(session_, comm_id, world_size, rank, timeout);
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

}  // namespace baton::core
