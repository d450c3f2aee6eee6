// libbaton's implementation: a gRPC session with the local daemon, shared-memory buffers, and
// staging for memory the daemon cannot see.

#include "client/lib/client_core.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "baton/v1/baton.grpc.pb.h"
#include "client/lib/call.h"
#include "client/lib/channel_client.h"
#include "client/lib/group.h"
#include "client/lib/session.h"
#include "collective/node_arena.h"
#include "collective/route_tuner.h"
#include "collective/schedule.h"
#include "common/comm_id.h"
#include "common/lock_checks.h"
#include "common/shared_memory.h"
#include "common/spin.h"
#include "common/status_macros.h"
#include "common/submission_channel.h"
#include "grpcpp/grpcpp.h"
#include "wire/op_codec.h"

namespace baton::core {
namespace {

// Which rank of which communicator has stream-ordered calls pending on each stream of this
// process. Two ranks of one communicator cannot share a stream: the first one's call makes the
// stream wait for the daemon, the daemon waits for every rank's event, and the second one's
// event is recorded behind that wait, so neither ever moves (NCCL has the same rule; it asks
// for a group). Such a call is refused instead of hanging until its deadline.
class StreamClaims {
 public:
  static StreamClaims& Get() {
    static StreamClaims* const claims = new StreamClaims;  // used until the process ends
    return *claims;
  }
  // Claims `stream` for one more call of `rank` of communicator `comm`; InvalidArgument while
  // another rank of `comm` has calls pending on it.
  absl::Status Claim(void* stream, uint64_t comm, int rank) {
    absl::MutexLock lock(&mu_);
    Entry& entry = claims_[{stream, comm}];
    if (entry.pending > 0 && entry.rank != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " made a stream-ordered call on the stream that rank ", entry.rank,
          " of the same communicator has calls pending on; each rank needs its own stream"));
    }
    entry.rank = rank;
    ++entry.pending;
    return absl::OkStatus();
  }
  void Release(void* stream, uint64_t comm) {
    absl::MutexLock lock(&mu_);
    auto it = claims_.find({stream, comm});
    if (it != claims_.end() && --it->second.pending <= 0) claims_.erase(it);
  }

 private:
  struct Entry {
    int rank = -1;
    int pending = 0;
  };
  absl::Mutex mu_;
  std::map<std::pair<void*, uint64_t>, Entry> claims_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::string> CreateCommIdVia(Session& session) {
  v1::CreateCommIdRequest request;
  request.set_session_id(session.id());
  v1::CreateCommIdResponse response;
  grpc::ClientContext context;
  session.Prepare(context, kControlTimeout);
  absl::Status status = FromGrpc(session.stub()->CreateCommId(&context, request, &response));
  if (!status.ok()) return status;
  return response.comm_id();
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinVia(const std::shared_ptr<Session>& session,
                                                      const std::string& comm_id, int world_size,
                                                      int rank, absl::Duration timeout);

class CommunicatorImpl final : public Communicator, public GroupMember {
 public:
  CommunicatorImpl(std::shared_ptr<Session> session, uint64_t tag, int world_size, int rank,
                   int daemon_count, int local_ranks, std::unique_ptr<ChannelClient> channel)
      : session_(std::move(session)),
        tag_(tag),
        world_size_(world_size),
        rank_(rank),
        daemon_count_(daemon_count),
        local_ranks_(local_ranks),
        calls_(world_size, rank),
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
    return Blocking(collective::Collective::kAllReduce,
                    calls_.AllReduce(send, recv, count, type, op), options);
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, const CallOptions& options) override {
    return Blocking(collective::Collective::kReduceScatter,
                    calls_.ReduceScatter(send, recv, recv_count, type, op), options);
  }
  absl::Status AllGather(const void* send, void* recv, size_t send_count, DataType type,
                         const CallOptions& options) override {
    return Blocking(collective::Collective::kAllGather,
                    calls_.AllGather(send, recv, send_count, type), options);
  }
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         const CallOptions& options) override {
    return Blocking(collective::Collective::kBroadcast,
                    calls_.Broadcast(send, recv, count, type, root), options);
  }
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, const CallOptions& options) override {
    return Blocking(collective::Collective::kReduce,
                    calls_.Reduce(send, recv, count, type, op, root), options);
  }
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        const CallOptions& options) override {
    return Blocking(collective::Collective::kAllToAll, calls_.AllToAll(send, recv, count, type),
                    options);
  }
  absl::Status Barrier(const CallOptions& options) override {
    return Blocking(collective::Collective::kBarrier, calls_.Barrier(), options);
  }
  absl::Status Gather(const void* send, void* recv, size_t count, DataType type, int root,
                      const CallOptions& options) override {
    return Blocking(collective::Collective::kGather, calls_.Gather(send, recv, count, type, root),
                    options);
  }
  absl::Status Scatter(const void* send, void* recv, size_t count, DataType type, int root,
                       const CallOptions& options) override {
    return Blocking(collective::Collective::kScatter, calls_.Scatter(send, recv, count, type, root),
                    options);
  }
  absl::Status AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_displs, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_displs, DataType type,
                         const CallOptions& options) override {
    return Blocking(
        collective::Collective::kAllToAllV,
        calls_.AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
        options);
  }
  absl::Status Send(const void* send, size_t count, DataType type, int peer,
                    const CallOptions& options) override {
    return Blocking(collective::Collective::kSend, calls_.Send(send, count, type, peer), options);
  }
  absl::Status Recv(void* recv, size_t count, DataType type, int peer,
                    const CallOptions& options) override {
    return Blocking(collective::Collective::kRecv, calls_.Recv(recv, count, type, peer), options);
  }

  std::shared_ptr<Request> AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options) override {
    return Enqueue(collective::Collective::kAllReduce,
                   calls_.AllReduce(send, recv, count, type, op), options);
  }
  std::shared_ptr<Request> ReduceScatterAsync(const void* send, void* recv, size_t recv_count,
                                              DataType type, ReduceOp op,
                                              const CallOptions& options) override {
    return Enqueue(collective::Collective::kReduceScatter,
                   calls_.ReduceScatter(send, recv, recv_count, type, op), options);
  }
  std::shared_ptr<Request> AllGatherAsync(const void* send, void* recv, size_t send_count,
                                          DataType type, const CallOptions& options) override {
    return Enqueue(collective::Collective::kAllGather,
                   calls_.AllGather(send, recv, send_count, type), options);
  }
  std::shared_ptr<Request> BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                          int root, const CallOptions& options) override {
    return Enqueue(collective::Collective::kBroadcast,
                   calls_.Broadcast(send, recv, count, type, root), options);
  }
  std::shared_ptr<Request> ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op, int root, const CallOptions& options) override {
    return Enqueue(collective::Collective::kReduce,
                   calls_.Reduce(send, recv, count, type, op, root), options);
  }
  std::shared_ptr<Request> AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options) override {
    return Enqueue(collective::Collective::kAllToAll, calls_.AllToAll(send, recv, count, type),
                   options);
  }
  std::shared_ptr<Request> BarrierAsync(const CallOptions& options) override {
    return Enqueue(collective::Collective::kBarrier, calls_.Barrier(), options);
  }
  std::shared_ptr<Request> GatherAsync(const void* send, void* recv, size_t count, DataType type,
                                       int root, const CallOptions& options) override {
    return Enqueue(collective::Collective::kGather, calls_.Gather(send, recv, count, type, root),
                   options);
  }
  std::shared_ptr<Request> ScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                        int root, const CallOptions& options) override {
    return Enqueue(collective::Collective::kScatter, calls_.Scatter(send, recv, count, type, root),
                   options);
  }
  std::shared_ptr<Request> AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                                          const std::vector<size_t>& send_displs, void* recv,
                                          const std::vector<size_t>& recv_counts,
                                          const std::vector<size_t>& recv_displs, DataType type,
                                          const CallOptions& options) override {
    return Enqueue(
        collective::Collective::kAllToAllV,
        calls_.AllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
        options);
  }
  std::shared_ptr<Request> SendAsync(const void* send, size_t count, DataType type, int peer,
                                     const CallOptions& options) override {
    return Enqueue(collective::Collective::kSend, calls_.Send(send, count, type, peer), options);
  }
  std::shared_ptr<Request> RecvAsync(void* recv, size_t count, DataType type, int peer,
                                     const CallOptions& options) override {
    return Enqueue(collective::Collective::kRecv, calls_.Recv(recv, count, type, peer), options);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key,
                                                      absl::Duration timeout) override;

  absl::StatusOr<std::vector<AlgorithmEstimate>> Explain(collective::Collective collective,
                                                         size_t count, DataType type) override {
    v1::ExplainRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_collective(std::string{collective::CollectiveName(collective)});
    request.set_data_type(std::string{collective::DataTypeName(type)});
    request.set_count(count);
    v1::ExplainResponse response;
    grpc::ClientContext context;
    session_->Prepare(context, kControlTimeout);
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

  absl::Status Abort(absl::string_view reason) override {
    // This rank's side first, at once: the queued calls and every later one fail, and the call
    // in flight stops waiting (channel) or is cancelled (gRPC).
    const absl::Status aborted = absl::AbortedError(absl::StrCat(
        "communicator aborted by rank ", rank_, ": ",
        reason.empty() ? absl::string_view("no reason given") : reason.substr(0, kMaxReason)));
    std::deque<Queued> dropped;
    {
      absl::MutexLock lock(&queue_mu_);
      if (abort_status_.ok()) abort_status_ = aborted;
      dropped.swap(queue_);
      if (running_context_ != nullptr) running_context_->TryCancel();
    }
    aborted_.store(true);
    for (Queued& q : dropped) q.request->Complete(aborted);
    // Then every rank's, through the daemon (which tells the others).
    absl::Status status = AbortOnDaemon(reason);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("aborted this rank's side; the daemon did not take the "
                                       "abort to the other ranks: ",
                                       status.message()));
    }
    return absl::OkStatus();
  }

  // Asks the daemon to abort the communicator with `reason` (it tells the other daemons); the
  // communicator's operations then fail with `code` (with `from_next_operation`: only this rank's
  // next collective and the later ones, Node::AbortCommunicator).
  absl::Status AbortOnDaemon(absl::string_view reason,
                             absl::StatusCode code = absl::StatusCode::kAborted,
                             bool from_next_operation = false) {
    v1::AbortCommunicatorRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    request.set_reason(std::string{reason.substr(0, kMaxReason)});
    request.set_code(static_cast<int32_t>(code));
    request.set_from_next_operation(from_next_operation);
    v1::AbortCommunicatorResponse response;
    grpc::ClientContext context;
    session_->Prepare(context, kAbortTimeout);
    return FromGrpc(session_->stub()->AbortCommunicator(&context, request, &response));
  }

  absl::Status Destroy() override {
    if (InGroup()) {
      DropDeferred(this, absl::FailedPreconditionError(
                             "the communicator was destroyed before its group ended"));
    }
    DrainQueue();
    {
      absl::MutexLock lock(&stream_mu_);
      streams_closed_ = true;
    }
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
    session_->Prepare(context, kControlTimeout);
    return FromGrpc(session_->stub()->Destroy(&context, request, &response));
  }

  void Submit(Call call, const CallOptions& options,
              std::shared_ptr<PendingRequest> request) override {
    absl::MutexLock lock(&queue_mu_);
    if (!abort_status_.ok()) {
      request->Complete(abort_status_);
      return;
    }
    if (closing_) {
      request->Complete(absl::FailedPreconditionError("communicator was destroyed"));
      return;
    }
    queue_.push_back(Queued{std::move(call), options, std::move(request)});
    if (!worker_.joinable()) worker_ = std::thread([this] { RunQueue(); });
  }

 private:
  // The reason's bound (the daemon keeps as much).
  static constexpr size_t kMaxReason = 512;
  // Abort must return even when the daemon is gone.
  static constexpr absl::Duration kAbortTimeout = absl::Seconds(2);

  // Runs a call in submission order: inline when nothing is queued or running, else after the
  // queued calls. In a group: deferred, and OK at once.
  // A call its builder refused outside a group runs all the same, in its place, to report the
  // refusal in order (RefuseLocked).
  absl::Status Blocking(collective::Collective kind, absl::StatusOr<Call> call,
                        const CallOptions& options) {
    if (options.on_stream) return OnStream(kind, std::move(call), options);
    if (!call.ok()) {
      if (InGroup()) {
        NoteGroupError(call.status());
        return call.status();
      }
      call = RefusedCall(kind, call.status());
    }
    if (InGroup()) {
      Defer(this, *std::move(call), options);
      return absl::OkStatus();
    }
    {
      absl::MutexLock lock(&queue_mu_);
      if (!abort_status_.ok()) return abort_status_;
      if (queue_.empty() && !running_) {
        running_ = true;
        queue_mu_.Unlock();
        absl::Status status = Run(*call, options);
        queue_mu_.Lock();
        running_ = false;
        return status;
      }
    }
    return Enqueue(kind, std::move(call), options)->Wait();
  }

  std::shared_ptr<Request> Enqueue(collective::Collective kind, absl::StatusOr<Call> call,
                                   const CallOptions& options) {
    if (options.on_stream) {
      // Stream-ordered calls return at once anyway; the request says whether it was enqueued.
      auto enqueued = std::make_shared<PendingRequest>();
      enqueued->Complete(OnStream(kind, std::move(call), options));
      return enqueued;
    }
    if (!call.ok()) {
      auto failed = std::make_shared<PendingRequest>();
      if (InGroup() || kind == collective::Collective::kSend ||
          kind == collective::Collective::kRecv) {
        // A send or recv is outside the sequence: it fails alone, at once.
        if (InGroup()) NoteGroupError(call.status());
        failed->Complete(call.status());
        return failed;
      }
      // A collective's refusal takes its place in the sequence: at once when nothing is queued.
      Call refused = RefusedCall(kind, call.status());
      {
        absl::MutexLock lock(&queue_mu_);
        if (queue_.empty() && !running_) {
          running_ = true;
          queue_mu_.Unlock();
          failed->Complete(Run(refused, options));
          queue_mu_.Lock();
          running_ = false;
          return failed;
        }
      }
      Submit(std::move(refused), options, failed);
      return failed;
    }
    if (InGroup()) return Defer(this, *std::move(call), options);
    auto request = std::make_shared<PendingRequest>();
    Submit(*std::move(call), options, request);
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

  absl::Status AbortStatus() {
    absl::MutexLock lock(&queue_mu_);
    return abort_status_;
  }

  // A call of `kind` that its builder refused with `error`.
  static Call RefusedCall(collective::Collective kind, absl::Status error) {
    Call call;
    call.spec.collective = kind;
    call.refused = std::move(error);
    return call;
  }

  // A collective this library refused (`error`) before it reached the daemon: its arguments, its
  // buffers. The other ranks would wait for this rank's part until their timeout, so this
  // collective and every later one fail on every rank with Aborted naming this rank and `error`
  // (through the daemon: daemon/communicator.h, FailFrom); the ones before it go on, and this
  // rank's later collectives fail there too. In the node arena the call takes its place as one
  // that went to the daemon, so that the local ranks that run it there find a call that differs
  // and fail at once. Only this call gets `error` itself. Sends and receives are outside the
  // sequence: a refused one fails alone, and so does any call of a rank alone in its
  // communicator.
  // `numbered`: the call has taken its place in the node arena already (TryArena).
  absl::Status RefuseLocked(const Call& call, bool numbered, absl::Status error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error.ok() || call.spec.PointToPoint() || world_size_ == 1 || destroyed_ ||
        aborted_.load()) {
      return error;
    }
    if (!refused_) {
      refused_ = true;
      // Before anything else of this rank reaches the daemon: the failure starts at this call's
      // place in the rank's sequence.
      AbortOnDaemon(absl::StrCat("its ", collective::CollectiveName(call.spec.collective),
                                 " was refused: ", error.ToString()),
                    absl::StatusCode::kAborted, /*from_next_operation=*/true)
          .IgnoreError();  // the daemon is gone, or the communicator: nobody waits
    }
    if (!numbered && !call.node_part) RecordInArena(call);
    return error;
  }

  // Takes `call`'s place in the node arena, if the communicator has one, as a call that went to
  // the daemon (NodeArena::RecordDaemonCall).
  void RecordInArena(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<collective::NodeArena*> arena = ArenaOf(call);
    if (arena.ok() && *arena != nullptr) (*arena)->RecordDaemonCall(call.spec).IgnoreError();
  }

  // Runs `call` with the algorithm chosen (written into its spec).
  absl::Status Run(Call& call, const CallOptions& options) {
    absl::MutexLock lock(&mu_);  // one operation of this rank at a time; they run in order
    if (!call.refused.ok()) return RefuseLocked(call, /*numbered=*/false, call.refused);
    absl::StatusOr<CallBytes> bytes = CheckBuffers(call);
    if (!bytes.ok()) return RefuseLocked(call, /*numbered=*/false, bytes.status());
    const size_t send_bytes = bytes->send;
    const size_t recv_bytes = bytes->recv;
    // $BATON_ALGO overrides the daemon's choice for the collectives that algorithm implements
    // (like NCCL_ALGO); an explicit per-call choice must be implemented.
    std::optional<Algorithm> algorithm = options.algorithm;
    if (!algorithm) {
      if (const char* env = std::getenv("BATON_ALGO"); env != nullptr && *env != '\0') {
        std::optional<Algorithm> parsed = collective::ParseAlgorithm(env);
        if (!parsed) {
          return RefuseLocked(call, /*numbered=*/false,
                              absl::InvalidArgumentError(absl::StrCat(
                                  "BATON_ALGO='", env, "' is not one of ring, tree, direct")));
        }
        if (collective::IsSupported(call.spec.collective, *parsed)) algorithm = parsed;
      }
    }
    call.spec.algorithm = algorithm;
    if (options.algorithm) {
      // An explicit choice must implement the collective.
      if (absl::Status s = call.spec.Validate(world_size_, rank_); !s.ok()) {
        return RefuseLocked(call, /*numbered=*/false, s);
      }
    }
    if (destroyed_) return absl::FailedPreconditionError("communicator was destroyed");
    if (aborted_.load()) return AbortStatus();
    // Device memory is the daemon's to reach (registered, never copied by the host); the caller
    // has finished writing it unless the call is stream-ordered (a call without a stream does
    // not order itself with one).
    const bool device_memory = call.stream_value != 0 || IsDeviceMemory(call.send, send_bytes) ||
                               IsDeviceMemory(call.recv, recv_bytes);
    if (!device_memory) {
      // A range that starts in a shared buffer must end in it, wherever the call runs.
      if (send_bytes > 0) {
        BATON_RETURN_IF_ERROR(RefuseLocked(call, /*numbered=*/false,
                                           InBuffer("send", call.send, send_bytes, 1).status()));
      }
      if (recv_bytes > 0) {
        BATON_RETURN_IF_ERROR(RefuseLocked(call, /*numbered=*/false,
                                           InBuffer("recv", call.recv, recv_bytes, 1).status()));
      }
    }
    if (std::optional<absl::Status> in_arena =
            TryArena(call, send_bytes, recv_bytes, options, device_memory)) {
      return *in_arena;
    }
    if (device_memory) return RunOnStream(call, send_bytes, recv_bytes, options);
    return RunOnHost(call, send_bytes, recv_bytes, options);
  }

  // Runs a call on host memory through the daemon.
  absl::Status RunOnHost(Call& call, size_t send_bytes, size_t recv_bytes,
                         const CallOptions& options) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Registered memory is used in place; anything else goes through the staging buffer, which
    // holds the staged input at offset 0 and the staged output after it.
    // A pointer into an Allocate()d buffer must fit in it: the library knows its size, and
    // staging would write past its end.
    std::optional<v1::BufferRef> send_ref, recv_ref;
    const size_t element = collective::DataTypeSize(call.spec.type);
    if (send_bytes > 0) {
      absl::StatusOr<std::optional<v1::BufferRef>> in =
          InBuffer("send", call.send, send_bytes, element);
      if (!in.ok()) return RefuseLocked(call, /*numbered=*/true, in.status());
      send_ref = *std::move(in);
    }
    if (recv_bytes > 0) {
      absl::StatusOr<std::optional<v1::BufferRef>> in =
          InBuffer("recv", call.recv, recv_bytes, element);
      if (!in.ok()) return RefuseLocked(call, /*numbered=*/true, in.status());
      recv_ref = *std::move(in);
    }
    const size_t send_staged = send_bytes > 0 && !send_ref ? send_bytes : 0;
    const bool recv_staged = recv_bytes > 0 && !recv_ref;
    // An elementwise operation in place (torch's all_reduce) stages once: the daemon reads and
    // writes one staged region, as it would the caller's buffer, which halves the staging
    // memory the call touches.
    const bool stage_in_place = send_staged > 0 && recv_staged && call.send == call.recv &&
                                send_bytes == recv_bytes && ElementwiseInPlace(call.spec);
    const size_t recv_at = stage_in_place ? 0 : send_staged;
    if (send_staged > 0 || recv_staged) {
      if (recv_staged && recv_bytes > SIZE_MAX - recv_at) {
        return RefuseLocked(call, /*numbered=*/true,
                            absl::ResourceExhaustedError(
                                absl::StrCat("cannot stage ", send_staged, " + ", recv_bytes,
                                             " bytes (more than memory holds)")));
      }
      BATON_RETURN_IF_ERROR(
          RefuseLocked(call, /*numbered=*/true,
                       EnsureStaging(recv_staged ? recv_at + recv_bytes : send_staged)));
      auto* staging = static_cast<std::byte*>(staging_);
      if (send_staged > 0) {
        std::memcpy(staging, call.send, send_bytes);
        send_ref = session_->Find(staging, send_bytes);
      }
      if (recv_staged) {
        recv_ref = session_->Find(staging + recv_at, recv_bytes);
        // A node's part is in place: its buffer holds the input (a broadcast root's data).
        if (call.node_part && !stage_in_place) {
          std::memcpy(staging + recv_at, call.recv, recv_bytes);
        }
      }
    }
    // The channel's page holds the counts of all_to_all_v for worlds up to kMaxVectorRanks;
    // larger ones go through gRPC (in order: this rank has one operation in flight at a time).
    const bool on_channel = channel_ != nullptr && wire::FitsChannel(call.spec);
    absl::StatusOr<std::string> ran = on_channel ? RunOnChannel(call, send_ref, recv_ref, options)
                                                 : RunOnGrpc(call, send_ref, recv_ref, options);
    if (!ran.ok()) {
      // An abort cut the wait short or cancelled the call: say why.
      if (aborted_.load() && (absl::IsCancelled(ran.status()) || absl::IsAborted(ran.status()))) {
        return AbortStatus();
      }
      return ran.status();
    }
    if (recv_staged) CopyOutStaged(call, static_cast<std::byte*>(staging_) + recv_at);
    last_algorithm_ = *std::move(ran);
    return absl::OkStatus();
  }

  // Queues a stream-ordered call (CallOptions::on_stream): its slot's event is recorded on the
  // stream and the stream waits for the call's value in the channel page; the call itself runs
  // on the queue's worker. Every way the call ends releases the stream.
  absl::Status OnStream(collective::Collective kind, absl::StatusOr<Call> call,
                        const CallOptions& options) {
    if (!call.ok()) {
      absl::MutexLock lock(&mu_);
      return RefuseLocked(RefusedCall(kind, call.status()), /*numbered=*/false, call.status());
    }
    if (InGroup()) {
      return absl::UnimplementedError("stream-ordered calls cannot be queued in a group yet");
    }
    if (channel_ == nullptr) {
      return absl::FailedPreconditionError(
          "stream-ordered calls need the submission channel (BATON_SUBMIT=grpc turns it off)");
    }
    if (!wire::FitsChannel(call->spec)) {
      return absl::UnimplementedError(absl::StrCat("stream-ordered all_to_all_v takes at most ",
                                                   channel::kMaxVectorRanks, " ranks"));
    }
    BATON_ASSIGN_OR_RETURN(const CallBytes bytes, CheckBuffers(*call));
    BATON_ASSIGN_OR_RETURN(device::Device * device, ClientDevice());
    if ((bytes.send > 0 && !device->IsDeviceMemory(call->send, bytes.send)) ||
        (bytes.recv > 0 && !device->IsDeviceMemory(call->recv, bytes.recv))) {
      return absl::InvalidArgumentError(
          "a stream-ordered call takes device memory: send or recv is host memory (or runs "
          "past its allocation)");
    }
    uint32_t value = 0;
    {
      absl::MutexLock lock(&stream_mu_);
      if (streams_closed_) return absl::FailedPreconditionError("communicator was destroyed");
      if (!async_error_.ok()) return async_error_;
      if (streams_ == nullptr) {
        // The first stream-ordered call only. Later ones never take mu_: an operation holds it
        // until it finishes, and a stream-ordered one finishes only when its stream reaches it,
        // which may need this call to return first.
        absl::MutexLock channel_lock(&mu_);
        if (destroyed_) return absl::FailedPreconditionError("communicator was destroyed");
        BATON_ASSIGN_OR_RETURN(streams_, channel_->EnableStreams(device));
        stream_done_ = &channel_->stream_done();
        event_set_ = streams_->event_set;
      }
      ChannelClient::Streams* streams = streams_;
      value = ++stream_issued_;
      if (value == 0) value = ++stream_issued_;  // 0 means "not stream-ordered"
      const uint32_t slot = value % ChannelClient::kEvents;
      // The slot's event is recorded again only after the daemon has waited for its last use:
      // the call kEvents before this one has finished.
      const uint32_t reusable = value - ChannelClient::kEvents;
      auto slot_free = [this, reusable]() ABSL_SHARED_LOCKS_REQUIRED(stream_mu_) {
        return static_cast<int32_t>(stream_finished_ - reusable) >= 0;
      };
      if (!stream_mu_.AwaitWithTimeout(absl::Condition(&slot_free), options.timeout)) {
        --stream_issued_;
        return absl::DeadlineExceededError(
            absl::StrCat(ChannelClient::kEvents,
                         " stream-ordered calls are in flight and the oldest did not "
                         "finish before the deadline"));
      }
      absl::Status recorded = StreamClaims::Get().Claim(options.stream, tag_, rank_);
      if (!recorded.ok()) {
        --stream_issued_;
        return recorded;
      }
      recorded = streams->events[slot]->Record(options.stream);
      if (recorded.ok()) {
        recorded = device->WaitValue(options.stream, stream_done_, value);
      }
      if (!recorded.ok()) {
        // Nothing waits for this value: the next call may use it.
        StreamClaims::Get().Release(options.stream, tag_);
        --stream_issued_;
        return recorded;
      }
      call->stream_value = value;
      call->event_slot = slot;
    }
    auto request = std::make_shared<PendingRequest>();
    request->OnComplete([this, value, stream = options.stream](const absl::Status& status) {
      {
        absl::MutexLock lock(&stream_mu_);
        if (!status.ok() && async_error_.ok()) async_error_ = status;
      }
      // After the error is recorded: a stream synchronised past this call sees it.
      channel::ReleaseStream(*stream_done_, value);
      StreamClaims::Get().Release(stream, tag_);
      absl::MutexLock lock(&stream_mu_);
      stream_finished_ = value;
    });
    Submit(*std::move(call), options, std::move(request));
    return absl::OkStatus();
  }

  // The node arena of this communicator (collective/node_arena.h), for a collective: one exists
  // when two or more of its ranks are on this rank's daemon. Opened on the first collective; null
  // without one, or for a send or recv (outside the collective sequence); an error when opening
  // it failed otherwise (the call fails rather than go to the daemon while its peers wait in the
  // arena). Every local rank gets the same answer from the daemon, so every one uses it or none
  // does.
  absl::StatusOr<collective::NodeArena*> ArenaOf(const Call& call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    using collective::Collective;
    if (local_ranks_ < 2 || call.spec.collective == Collective::kSend ||
        call.spec.collective == Collective::kRecv) {
      return nullptr;
    }
    if (arena_state_ == ArenaState::kUnknown) BATON_RETURN_IF_ERROR(OpenArena());
    return arena_state_ == ArenaState::kOpen ? &*arena_ : nullptr;
  }

  // Where `call` runs when its communicator has `arena`: in it (a collective the arena has, on
  // host memory, no algorithm asked for, a size that fits its slots, and $BATON_ARENA not 0),
  // through the daemon, or where local rank 0's tuner says (an all_reduce within the node too
  // large for a slot, or a reduce_scatter, which the arena runs a slot at a time: kChosen). Ranks
  // whose calls match decide alike; a rank whose call differs records it in the arena
  // (RecordDaemonCall), so that its peers there fail naming both calls.
  enum class ArenaRoute { kArena, kDaemon, kChosen };
  ArenaRoute RouteIn(const collective::NodeArena& arena, const Call& call,
                     bool device_memory) const {
    using collective::Collective;
    static const bool enabled = [] {
      const char* env = std::getenv("BATON_ARENA");
      return env == nullptr || std::string_view(env) != "0";
    }();
    const collective::OpSpec& spec = call.spec;
    if (!enabled || device_memory || spec.algorithm) return ArenaRoute::kDaemon;
    // How many blocks of the call's count one slot must hold.
    size_t blocks = 1;
    switch (spec.collective) {
      case Collective::kBarrier:
        return ArenaRoute::kArena;
      case Collective::kAllReduce:
      case Collective::kBroadcast:
      case Collective::kReduce:
        break;
      case Collective::kAllGather:
        // Across nodes local rank 0's slot holds the world's blocks (NodeArena::AllGatherAcross).
        if (daemon_count_ > 1) blocks = static_cast<size_t>(world_size_);
        break;
      case Collective::kReduceScatter:
        blocks = static_cast<size_t>(world_size_);
        break;
      case Collective::kAllToAll:
        // No local phase across nodes.
        if (daemon_count_ > 1) return ArenaRoute::kDaemon;
        blocks = static_cast<size_t>(world_size_);
        break;
      default:
        return ArenaRoute::kDaemon;
    }
    const size_t element = collective::DataTypeSize(spec.type);
    if (element > 0 && spec.count <= arena.slot_bytes() / element / blocks) {
      return ArenaRoute::kArena;
    }
    const bool slot_at_a_time =
        spec.collective == Collective::kAllReduce || spec.collective == Collective::kReduceScatter;
    return slot_at_a_time && daemon_count_ == 1 ? ArenaRoute::kChosen : ArenaRoute::kDaemon;
  }

  // Looks for the node arena once. The daemon answers FailedPrecondition when it has none for
  // this communicator; other errors are returned and looked for again on the next call.
  absl::Status OpenArena() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<Session::Arena> opened = session_->OpenArena(tag_, rank_);
    if (absl::IsFailedPrecondition(opened.status())) {
      arena_state_ = ArenaState::kNone;
      return absl::OkStatus();
    }
    if (!opened.ok()) return opened.status();
    BATON_ASSIGN_OR_RETURN(collective::NodeArena attached,
                           collective::NodeArena::Attach(opened->memory->data(),
                                                         opened->memory->size(), opened->rank));
    arena_memory_ = std::move(opened->memory);
    arena_.emplace(attached);
    arena_state_ = ArenaState::kOpen;
    return absl::OkStatus();
  }

  // Runs `call` in the node arena, or records it there before it goes through the daemon
  // (RecordDaemonCall). Null when it is to run through the daemon.
  std::optional<absl::Status> TryArena(Call& call, size_t send_bytes, size_t recv_bytes,
                                       const CallOptions& options, bool device_memory)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<collective::NodeArena*> arena = ArenaOf(call);
    if (!arena.ok()) return arena.status();
    if (*arena == nullptr) return std::nullopt;
    switch (RouteIn(**arena, call, device_memory)) {
      case ArenaRoute::kArena:
        return RunInArena(**arena, call, options);
      case ArenaRoute::kChosen:
        return RunWhereChosen(**arena, call, send_bytes, recv_bytes, options);
      case ArenaRoute::kDaemon:
        break;
    }
    absl::Status recorded = (*arena)->RecordDaemonCall(call.spec);
    if (!recorded.ok()) return recorded;
    return std::nullopt;
  }

  // A call that runs in the arena or through the daemon as local rank 0 says: its tuner's choice
  // (collective/route_tuner.h) unless $BATON_ARENA_LARGE says "arena" or "daemon". The tuner
  // learns each call's time, from the agreement until its slowest rank finished, at the next.
  absl::Status RunWhereChosen(collective::NodeArena& arena, Call& call, size_t send_bytes,
                              size_t recv_bytes, const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static const absl::StatusOr<std::optional<Route>> forced =
        []() -> absl::StatusOr<std::optional<Route>> {
      const char* env = std::getenv("BATON_ARENA_LARGE");
      const std::string_view value = env == nullptr ? "auto" : env;
      if (value == "auto" || value.empty()) return std::nullopt;
      if (value == "arena") return Route::kArena;
      if (value == "daemon") return Route::kDaemon;
      return absl::InvalidArgumentError(absl::StrCat("BATON_ARENA_LARGE='", std::string(value),
                                                     "' is not one of auto, arena, daemon"));
    }();
    const collective::Collective collective = call.spec.collective;
    const size_t bytes = send_bytes;  // each rank's input: what the arena copies in
    Route proposed = Route::kArena;   // only rank 0's counts
    if (arena.rank() == 0) {
      if (!forced.ok()) {
        // Every local rank fails with the reason, at once.
        arena.Abort(forced.status());
        AbortOnDaemon(forced.status().message(), forced.status().code(),
                      /*from_next_operation=*/true)
            .IgnoreError();
        return forced.status();
      }
      proposed = forced->has_value() ? **forced : route_tuners_[collective].Choose(bytes);
    }
    absl::StatusOr<collective::NodeArena::RouteAgreement> agreed =
        arena.AgreeOnRoute(call.spec, proposed == Route::kArena, absl::Now() + options.timeout);
    if (!agreed.ok()) {
      AbortOnDaemon(agreed.status().message(), agreed.status().code(),
                    /*from_next_operation=*/true)
          .IgnoreError();
      return agreed.status();
    }
    // The previous such call, timed to its slowest rank (rank 0 alone would see the daemon's
    // route finish early: the daemon wakes the ranks one after the other).
    if (agreed->last_took && last_routed_) {
      route_tuners_[last_routed_->collective].Add(last_routed_->bytes, last_routed_->route,
                                                  *agreed->last_took);
    }
    const Route route = agreed->in_arena ? Route::kArena : Route::kDaemon;
    absl::Status status = route == Route::kArena ? RunInArena(arena, call, options)
                                                 : RunOnHost(call, send_bytes, recv_bytes, options);
    last_routed_.reset();
    if (status.ok()) {
      arena.FinishedRoute();
      last_routed_ = Routed{collective, bytes, route};
    }
    return status;
  }

  absl::Status RunInArena(collective::NodeArena& arena, Call& call, const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time deadline = absl::Now() + options.timeout;
    absl::Status status;
    std::string algorithm = "arena";
    if (daemon_count_ > 1) {
      absl::StatusOr<std::string> across = RunAcrossNodes(arena, call, options, deadline);
      status = across.status();
      if (across.ok()) algorithm = *std::move(across);
    } else {
      status = RunOnNode(arena, call, deadline);
    }
    if (status.ok()) {
      last_algorithm_ = std::move(algorithm);
    } else if (!absl::IsInvalidArgument(status)) {
      // The arena was aborted (a mismatch, a deadline, the daemon): the communicator fails from
      // this call on, as after a refused call. A peer waiting in the daemon because its call
      // differed fails at once with the reason instead of at its deadline; what the daemons
      // still run of earlier calls (another node may still finish the previous one) goes on,
      // which an abort of the whole communicator would cut short.
      AbortOnDaemon(status.message(), status.code(), /*from_next_operation=*/true).IgnoreError();
    }
    return status;
  }

  // A collective of a communicator whose ranks are all on this node, in the arena.
  static absl::Status RunOnNode(collective::NodeArena& arena, const Call& call,
                                absl::Time deadline) {
    const collective::OpSpec& spec = call.spec;
    using collective::Collective;
    absl::Status status;
    switch (spec.collective) {
      case Collective::kAllReduce:
        status = arena.AllReduce(call.send, call.recv, spec.count, spec.type, spec.op, deadline);
        break;
      case Collective::kBroadcast:
        status = arena.Broadcast(call.send, call.recv, spec.count, spec.type, spec.root, deadline);
        break;
      case Collective::kAllGather:
        status = arena.AllGather(call.send, call.recv, spec.count, spec.type, deadline);
        break;
      case Collective::kReduce:
        status =
            arena.Reduce(call.send, call.recv, spec.count, spec.type, spec.op, spec.root, deadline);
        break;
      case Collective::kReduceScatter:
        status =
            arena.ReduceScatter(call.send, call.recv, spec.count, spec.type, spec.op, deadline);
        break;
      case Collective::kAllToAll:
        status = arena.AllToAll(call.send, call.recv, spec.count, spec.type, deadline);
        break;
      default:
        status = arena.Barrier(deadline);
        break;
    }
    return status;
  }

  // A collective across nodes whose local phase runs in the arena: local rank 0 runs the
  // inter-node step through the daemon for the node (Call::node_part), on a buffer in the arena
  // that holds the node's part (collective/schedule.h, NodePartElements). Returns the algorithm
  // the daemons ran between nodes.
  absl::StatusOr<std::string> RunAcrossNodes(collective::NodeArena& arena, const Call& call,
                                             const CallOptions& options, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    using collective::Collective;
    const collective::OpSpec& spec = call.spec;
    const uint64_t node_elements = collective::NodePartElements(spec, world_size_);
    const size_t node_bytes = node_elements * collective::DataTypeSize(spec.type);
    auto across = [&](void* buffer)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<std::string> {
      Call node = call;
      node.node_part = true;
      node.send = nullptr;  // the daemon reads and writes the one buffer
      node.recv = buffer;
      node.recv_elements = node_elements;
      BATON_RETURN_IF_ERROR(RunOnHost(node, 0, node_bytes, options));
      return last_algorithm_;
    };
    switch (spec.collective) {
      case Collective::kAllReduce:
        return arena.AllReduceAcross(call.send, call.recv, spec.count, spec.type, spec.op, deadline,
                                     across);
      case Collective::kBroadcast:
        return arena.BroadcastAcross(call.send, call.recv, spec.count, spec.type, spec.root,
                                     rank_ == spec.root, deadline, across);
      case Collective::kReduce:
        return arena.ReduceAcross(call.send, call.recv, spec.count, spec.type, spec.op, spec.root,
                                  rank_ == spec.root, deadline, across);
      case Collective::kAllGather:
        return arena.AllGatherAcross(call.send, call.recv, spec.count, spec.type, rank_,
                                     world_size_, deadline, across);
      case Collective::kReduceScatter:
        return arena.ReduceScatterAcross(call.send, call.recv, spec.count, spec.type, spec.op,
                                         rank_, world_size_, deadline, across);
      default:
        return arena.BarrierAcross(deadline, across);
    }
  }

  // Whether [data, data + bytes) is device memory of this process (false without a device).
  static bool IsDeviceMemory(const void* data, size_t bytes) {
    if (bytes == 0 || data == nullptr) return false;
    absl::StatusOr<device::Device*> device = ClientDevice();
    return device.ok() && (*device)->IsDeviceMemory(data, bytes);
  }

  // Runs a call on device memory (stream-ordered or not) on the channel, or without one over
  // gRPC: its buffers are registered device memory.
  absl::Status RunOnStream(Call& call, size_t send_bytes, size_t recv_bytes,
                           const CallOptions& options) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::optional<v1::BufferRef> send_ref, recv_ref;
    if (send_bytes > 0) {
      BATON_ASSIGN_OR_RETURN(send_ref, session_->FindDevice(call.send, send_bytes));
    }
    if (recv_bytes > 0) {
      BATON_ASSIGN_OR_RETURN(recv_ref, session_->FindDevice(call.recv, recv_bytes));
    }
    if (channel_ == nullptr || !wire::FitsChannel(call.spec)) {
      // Not stream-ordered here (OnStream requires the channel).
      absl::StatusOr<std::string> ran = RunOnGrpc(call, send_ref, recv_ref, options);
      if (!ran.ok()) return ran.status();
      last_algorithm_ = *std::move(ran);
      return absl::OkStatus();
    }
    channel::OpDescriptor op;
    BATON_RETURN_IF_ERROR(wire::ToChannel(call.spec, &op, &channel_->vectors()));
    if (send_ref) {
      op.send_buffer = send_ref->buffer_id();
      op.send_offset = send_ref->offset();
    }
    if (recv_ref) {
      op.recv_buffer = recv_ref->buffer_id();
      op.recv_offset = recv_ref->offset();
    }
    op.timeout_ms = absl::ToInt64Milliseconds(options.timeout);
    op.event_set = call.stream_value != 0 ? event_set_ : 0;
    op.event_slot = call.event_slot;
    op.stream_value = call.stream_value;
    op.node_part = call.node_part ? 1 : 0;
    absl::StatusOr<std::string> ran = channel_->Run(op, options.timeout, *session_, aborted_);
    if (!ran.ok()) {
      if (aborted_.load() && (absl::IsCancelled(ran.status()) || absl::IsAborted(ran.status()))) {
        return AbortStatus();
      }
      return ran.status();
    }
    last_algorithm_ = *std::move(ran);
    return absl::OkStatus();
  }

 public:
  absl::Status AsyncError() const override {
    absl::MutexLock lock(&stream_mu_);
    return async_error_;
  }

 private:
  // Whether element i of the output depends on element i of the inputs only, so that the daemon
  // may write the output over this rank's input.
  static bool ElementwiseInPlace(const collective::OpSpec& spec) {
    return spec.collective == collective::Collective::kAllReduce ||
           spec.collective == collective::Collective::kBroadcast ||
           spec.collective == collective::Collective::kReduce;
  }

  // Copies a staged output to the user's buffer: all of it, or for all_to_all_v only the blocks
  // (what lies between them is the user's and stays as it was).
  static void CopyOutStaged(const Call& call, const std::byte* staged) {
    const collective::OpSpec& spec = call.spec;
    const size_t element = collective::DataTypeSize(spec.type);
    auto* out = static_cast<std::byte*>(call.recv);
    if (spec.collective != collective::Collective::kAllToAllV) {
      std::memcpy(out, staged, call.recv_elements * element);
      return;
    }
    for (size_t i = 0; i < spec.recv_counts.size(); ++i) {
      const size_t at = spec.recv_displs[i] * element;
      if (spec.recv_counts[i] > 0) {
        std::memcpy(out + at, staged + at, spec.recv_counts[i] * element);
      }
    }
  }

  absl::StatusOr<std::string> RunOnChannel(const Call& call,
                                           const std::optional<v1::BufferRef>& send,
                                           const std::optional<v1::BufferRef>& recv,
                                           const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    channel::OpDescriptor op;
    BATON_RETURN_IF_ERROR(wire::ToChannel(call.spec, &op, &channel_->vectors()));
    op.node_part = call.node_part ? 1 : 0;
    if (send) {
      op.send_buffer = send->buffer_id();
      op.send_offset = send->offset();
    }
    if (recv) {
      op.recv_buffer = recv->buffer_id();
      op.recv_offset = recv->offset();
    }
    op.timeout_ms = absl::ToInt64Milliseconds(options.timeout);
    return channel_->Run(op, options.timeout, *session_, aborted_);
  }

  absl::StatusOr<std::string> RunOnGrpc(const Call& call, const std::optional<v1::BufferRef>& send,
                                        const std::optional<v1::BufferRef>& recv,
                                        const CallOptions& options) {
    v1::CollectiveRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    wire::ToProto(call.spec, &request);
    request.set_node_part(call.node_part);
    request.set_timeout_ms(absl::ToInt64Milliseconds(options.timeout));
    if (send) *request.mutable_send() = *send;
    if (recv) *request.mutable_recv() = *recv;
    v1::CollectiveResponse response;
    grpc::ClientContext context;
    // The daemon enforces the timeout; the RPC deadline only guards against a daemon that
    // vanished.
    session_->Prepare(context, options.timeout + absl::Seconds(10));
    {
      absl::MutexLock lock(&queue_mu_);
      if (!abort_status_.ok()) return abort_status_;
      running_context_ = &context;  // so that Abort can cancel it
    }
    absl::Status status = FromGrpc(session_->stub()->Collective(&context, request, &response));
    {
      absl::MutexLock lock(&queue_mu_);
      running_context_ = nullptr;
    }
    if (!status.ok()) return status;
    return response.algorithm();
  }

  // The registered buffer that holds all of [data, data + bytes); nullopt for memory outside
  // every Allocate()d buffer (it is staged); InvalidArgument for a range that starts in one and
  // runs past its end.
  // Where in the shared buffers [data, data + bytes) lies, for use in place; nullopt to stage
  // it: memory that is not shared, and a region that does not start on a whole element of
  // `element` bytes, which the daemon refuses (its kernels access elements as their type).
  absl::StatusOr<std::optional<v1::BufferRef>> InBuffer(const char* what, const void* data,
                                                        size_t bytes, size_t element) {
    Session::Found found = session_->Locate(data, bytes);
    if (found.overrun_of > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " needs ", bytes,
                       " bytes but its shared buffer (from Allocate or baton_client_alloc) of ",
                       found.overrun_of, " bytes ends before that"));
    }
    if (found.ref && found.ref->offset() % element != 0) return std::nullopt;
    return found.ref;
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
  const int local_ranks_;  // this communicator's ranks on this rank's daemon
  const CallBuilder calls_;
  mutable absl::Mutex mu_;
  // Null when the rank submits over gRPC ($BATON_SUBMIT=grpc, or the daemon refused a channel).
  const std::unique_ptr<ChannelClient> channel_ ABSL_PT_GUARDED_BY(mu_);
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  // A collective of this rank was refused (RefuseLocked): the daemon has been told.
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  void* staging_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t staging_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_algorithm_ ABSL_GUARDED_BY(mu_);
  // The node arena: not looked for yet, open, or none (ArenaFor).
  enum class ArenaState { kUnknown, kOpen, kNone };
  ArenaState arena_state_ ABSL_GUARDED_BY(mu_) = ArenaState::kUnknown;
  std::shared_ptr<SharedMemory> arena_memory_ ABSL_GUARDED_BY(mu_);
  std::optional<collective::NodeArena> arena_ ABSL_GUARDED_BY(mu_);
  // Local rank 0's: where the calls that may run either in the arena or through the daemon run,
  // by collective, and the last such call until its time is known.
  using Route = collective::RouteTuner::Route;
  std::map<collective::Collective, collective::RouteTuner> route_tuners_ ABSL_GUARDED_BY(mu_);
  struct Routed {
    collective::Collective collective;
    size_t bytes;
    Route route;
  };
  std::optional<Routed> last_routed_ ABSL_GUARDED_BY(mu_);

  struct Queued {
    Call call;
    CallOptions options;
    std::shared_ptr<PendingRequest> request;
  };
  absl::Mutex queue_mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool running_ ABSL_GUARDED_BY(queue_mu_) = false;  // a call is executing (inline or queued)
  bool closing_ ABSL_GUARDED_BY(queue_mu_) = false;
  // Set by Abort; the channel's wait looks at aborted_ without a lock.
  absl::Status abort_status_ ABSL_GUARDED_BY(queue_mu_);
  std::atomic<bool> aborted_{false};
  grpc::ClientContext* running_context_ ABSL_GUARDED_BY(queue_mu_) = nullptr;
  std::thread worker_;  // started by the first queued call

  // Stream-ordered calls: values issued and finished (common/submission_channel.h), the first
  // failure, and the channel's word and event set (set on the first call).
  mutable absl::Mutex stream_mu_;
  uint32_t stream_issued_ ABSL_GUARDED_BY(stream_mu_) = 0;
  uint32_t stream_finished_ ABSL_GUARDED_BY(stream_mu_) = 0;
  absl::Status async_error_ ABSL_GUARDED_BY(stream_mu_);
  ChannelClient::Streams* streams_ ABSL_GUARDED_BY(stream_mu_) = nullptr;  // once enabled
  bool streams_closed_ ABSL_GUARDED_BY(stream_mu_) = false;                // destroyed
  std::atomic<uint32_t>* stream_done_ = nullptr;  // written once, before the first call queues
  uint64_t event_set_ = 0;                        // likewise
};

absl::StatusOr<std::unique_ptr<Communicator>> JoinVia(const std::shared_ptr<Session>& session,
                                                      const std::string& comm_id, int world_size,
                                                      int rank, absl::Duration timeout) {
  // Before it goes out: gRPC cannot carry text that is not UTF-8, and would fail the call without
  // saying why.
  BATON_RETURN_IF_ERROR(CheckCommIdText(comm_id));
  v1::JoinRequest request;
  request.set_session_id(session->id());
  request.set_comm_id(comm_id);
  request.set_world_size(world_size);
  request.set_rank(rank);
  request.set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  v1::JoinResponse response;
  grpc::ClientContext context;
  session->Prepare(context, timeout + absl::Seconds(10));
  absl::Status status = FromGrpc(session->stub()->Join(&context, request, &response));
  if (!status.ok()) return status;
  // Operations go through a shared-memory submission channel unless $BATON_SUBMIT=grpc; a daemon
  // that cannot attach one is served over gRPC instead.
  std::unique_ptr<ChannelClient> channel;
  const char* submit = std::getenv("BATON_SUBMIT");
  if (submit == nullptr || std::string_view(submit) != "grpc") {
    absl::StatusOr<std::unique_ptr<ChannelClient>> opened =
        ChannelClient::Open(session, response.comm_tag(), rank);
    if (opened.ok()) channel = *std::move(opened);
  }
  return std::unique_ptr<Communicator>(
      new CommunicatorImpl(session, response.comm_tag(), world_size, rank, response.daemon_count(),
                           response.local_ranks(), std::move(channel)));
}

absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorImpl::Split(int color, int key,
                                                                      absl::Duration timeout) {
  if (InGroup()) {
    return absl::FailedPreconditionError("baton_comm_split cannot be called inside a group");
  }
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
      if (all[2 * static_cast<size_t>(r)] == color) members.push_back(r);
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
  explicit ClientImpl(std::shared_ptr<Session> session)
      : session_(std::move(session)), stop_(eventfd(0, EFD_CLOEXEC)) {
    // The session lasts as long as its socket: if this process dies, the daemon sees it close and
    // tears down what the session owned. The daemon hanging up means it went away.
    watch_ = std::thread([this] {
      pollfd polled[2] = {{session_->socket_fd(), POLLRDHUP, 0}, {stop_, POLLIN, 0}};
      while (true) {
        const int ready = poll(polled, 2, -1);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0 || (polled[1].revents & POLLIN) != 0) return;
        if (polled[0].revents != 0) break;
      }
      session_->MarkLost();
    });
  }

  ~ClientImpl() override {
    const uint64_t one = 1;
    if (write(stop_, &one, sizeof(one)) != sizeof(one)) session_->Close();  // wakes it too
    watch_.join();
    close(stop_);
    session_->Close();
  }

  absl::StatusOr<std::string> CreateCommId() override { return CreateCommIdVia(*session_); }

  absl::StatusOr<std::unique_ptr<Communicator>> Join(const std::string& comm_id, int world_size,
                                                     int rank, absl::Duration timeout) override {
    return JoinVia(session_, comm_id, world_size, rank, timeout);
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override { return session_->Allocate(bytes); }
  absl::Status Free(void* data) override { return session_->Free(data); }
  absl::StatusOr<void*> AllocateDevice(size_t bytes, int ordinal) override {
    return session_->AllocateDevice(bytes, ordinal);
  }
  absl::Status FreeDevice(void* data) override { return session_->FreeDevice(data); }
  absl::Status RegisterDevice(const void* data, size_t bytes) override {
    return session_->FindDevice(data, bytes).status();
  }
  absl::Status DeregisterDevice(const void* data) override { return session_->Deregister(data); }
  const std::string& node_name() const override { return session_->node_name(); }

 private:
  std::shared_ptr<Session> session_;
  const int stop_;  // eventfd: stops the watch
  std::thread watch_;
};

}  // namespace

std::string Client::DefaultSocketPath() {
  const char* env = std::getenv("BATON_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/run/baton/batond.sock";
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                        absl::Duration timeout) {
  ConfigureLockChecks();
  auto channel = grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach batond at ", socket_path, ": is the daemon running?"));
  }
  absl::StatusOr<std::shared_ptr<Session>> session =
      Session::Open(socket_path, v1::Client::NewStub(channel), timeout);
  if (!session.ok()) return session.status();
  return std::unique_ptr<Client>(new ClientImpl(*std::move(session)));
}

}  // namespace baton::core
