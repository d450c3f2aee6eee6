// libbaton's core: the client (a session with the local daemon) and the communicator, which keeps
// membership, the order of its rank's operations (op_queue.h), abort and destroy, and hands each
// call to the one route Router::Choose picks (routes/router.h).

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
#include "client/lib/abort_state.h"
#include "client/lib/call.h"
#include "client/lib/channel_client.h"
#include "client/lib/daemon_link.h"
#include "client/lib/group.h"
#include "client/lib/op_queue.h"
#include "client/lib/routes/arena_route.h"
#include "client/lib/routes/daemon_route.h"
#include "client/lib/routes/device_route.h"
#include "client/lib/routes/router.h"
#include "client/lib/session.h"
#include "common/comm_id.h"
#include "common/lock_checks.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace baton::core {
namespace {

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
  CommunicatorImpl(std::shared_ptr<Session> session, uint64_t tag, const CommShape& shape,
                   RouteSettings settings, std::unique_ptr<ChannelClient> channel)
      : session_(session),
        tag_(tag),
        world_size_(shape.world_size),
        rank_(shape.rank),
        daemon_count_(shape.daemon_count),
        calls_(shape.world_size, shape.rank),
        link_(std::move(session), tag, shape.rank, std::move(channel), &abort_),
        router_(shape, std::move(settings)),
        daemon_route_(link_),
        device_route_(link_, tag, shape.rank, &mu_),
        arena_route_(link_, router_),
        queue_([this](Call& call, const CallOptions& options) { return Run(call, options); }) {}
  ~CommunicatorImpl() override { Destroy().IgnoreError(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int daemon_count() const override { return daemon_count_; }
  std::string last_algorithm() const override {
    absl::MutexLock lock(&mu_);
    return last_algorithm_;
  }

  absl::Status Submit(const Operation& op, const CallOptions& options,
                      std::shared_ptr<Request>* request) override {
    absl::StatusOr<Call> call = calls_.Build(op);
    if (request == nullptr) return Blocking(op.collective, std::move(call), options);
    *request = Enqueue(op.collective, std::move(call), options);
    return absl::OkStatus();
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
    abort_.Abort(absl::AbortedError(absl::StrCat("communicator aborted by rank ", rank_, ": ",
                                                 reason.empty()
                                                     ? absl::string_view("no reason given")
                                                     : reason.substr(0, DaemonLink::kMaxReason))));
    queue_.Fail(abort_.status());
    // Then every rank's, through the daemon (which tells the others).
    absl::Status status = link_.AbortOnDaemon(reason);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("aborted this rank's side; the daemon did not take the "
                                       "abort to the other ranks: ",
                                       status.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Destroy() override {
    if (InGroup()) {
      DropDeferred(this, absl::FailedPreconditionError(
                             "the communicator was destroyed before its group ended"));
    }
    queue_.Close();
    device_route_.Close();
    absl::MutexLock lock(&mu_);
    if (destroyed_) return absl::OkStatus();
    destroyed_ = true;
    daemon_route_.ReleaseStaging();
    v1::DestroyRequest request;
    request.set_session_id(session_->id());
    request.set_comm_tag(tag_);
    request.set_rank(rank_);
    v1::DestroyResponse response;
    grpc::ClientContext context;
    session_->Prepare(context, kControlTimeout);
    return FromGrpc(session_->stub()->Destroy(&context, request, &response));
  }

  absl::Status AsyncError() const override { return device_route_.AsyncError(); }

  // A call deferred by a group, handed back at its end.
  void SubmitDeferred(Call call, const CallOptions& options,
                      std::shared_ptr<PendingRequest> request) override {
    queue_.Enqueue(std::move(call), options, std::move(request));
  }

 private:
  // Runs a call in submission order: inline when nothing is queued or running, else after the
  // queued calls. In a group: deferred, and OK at once.
  // A call its builder refused outside a group runs all the same, in its place, to report the
  // refusal in order (RefuseLocked).
  absl::Status Blocking(collective::Collective kind, absl::StatusOr<Call> call,
                        const CallOptions& options) {
    if (options.on_stream) return QueueOnStream(kind, std::move(call), options);
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
    return queue_.RunInTurn(*std::move(call), options);
  }

  std::shared_ptr<Request> Enqueue(collective::Collective kind, absl::StatusOr<Call> call,
                                   const CallOptions& options) {
    if (options.on_stream) {
      // Stream-ordered calls return at once anyway; the request says whether it was enqueued.
      auto enqueued = std::make_shared<PendingRequest>();
      enqueued->Complete(QueueOnStream(kind, std::move(call), options));
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
      queue_.Enqueue(RefusedCall(kind, call.status()), options, failed, /*now_when_idle=*/true);
      return failed;
    }
    if (InGroup()) return Defer(this, *std::move(call), options);
    auto request = std::make_shared<PendingRequest>();
    queue_.Enqueue(*std::move(call), options, request);
    return request;
  }

  // Queues a stream-ordered call (CallOptions::on_stream) once its stream is readied
  // (DeviceRoute::Prepare); it then runs in its turn like any other.
  absl::Status QueueOnStream(collective::Collective kind, absl::StatusOr<Call> call,
                             const CallOptions& options) {
    if (!call.ok()) {
      absl::MutexLock lock(&mu_);
      return RefuseLocked(RefusedCall(kind, call.status()), /*numbered=*/false, call.status());
    }
    BATON_ASSIGN_OR_RETURN(std::shared_ptr<PendingRequest> request,
                           device_route_.Prepare(*call, options));
    queue_.Enqueue(*std::move(call), options, std::move(request));
    return absl::OkStatus();
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
  // `numbered`: the call has taken its place in the node arena already.
  absl::Status RefuseLocked(const Call& call, bool numbered, absl::Status error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error.ok() || call.spec.PointToPoint() || world_size_ == 1 || destroyed_ ||
        abort_.aborted()) {
      return error;
    }
    if (!refused_) {
      refused_ = true;
      // Before anything else of this rank reaches the daemon: the failure starts at this call's
      // place in the rank's sequence.
      link_
          .AbortOnDaemon(absl::StrCat("its ", collective::CollectiveName(call.spec.collective),
                                      " was refused: ", error.ToString()),
                         absl::StatusCode::kAborted, /*from_next_operation=*/true)
          .IgnoreError();  // the daemon is gone, or the communicator: nobody waits
    }
    if (!numbered && !call.spec.node_part) {
      arena_route_.RecordElsewhere(call, absl::Now() + CallOptions().timeout).IgnoreError();
    }
    return error;
  }

  // Runs `call` in its turn: checks it, chooses its route (Router::Choose) and hands it over.
  absl::Status Run(Call& call, const CallOptions& options) {
    absl::MutexLock lock(&mu_);  // one operation of this rank at a time; they run in order
    if (!call.refused.ok()) return RefuseLocked(call, /*numbered=*/false, call.refused);
    absl::StatusOr<CallBytes> bytes = CheckBuffers(call);
    if (!bytes.ok()) return RefuseLocked(call, /*numbered=*/false, bytes.status());
    absl::StatusOr<std::optional<Algorithm>> algorithm =
        router_.Algorithm(call.spec.collective, options.algorithm);
    if (!algorithm.ok()) return RefuseLocked(call, /*numbered=*/false, algorithm.status());
    call.spec.algorithm = *algorithm;
    if (options.algorithm) {
      // An explicit choice must implement the collective.
      if (absl::Status s = call.spec.Validate(world_size_, rank_); !s.ok()) {
        return RefuseLocked(call, /*numbered=*/false, s);
      }
    }
    if (destroyed_) return absl::FailedPreconditionError("communicator was destroyed");
    if (abort_.aborted()) return abort_.status();
    // Device memory is the daemon's to reach (registered, never copied by the host); the caller
    // has finished writing it unless the call is stream-ordered (a call without a stream does
    // not order itself with one).
    CallFacts facts;
    facts.send_bytes = bytes->send;
    facts.device_memory = call.stream_value != 0 || IsDeviceMemory(call.send, bytes->send) ||
                          IsDeviceMemory(call.recv, bytes->recv);
    if (!facts.device_memory) {
      // A range that starts in a shared buffer must end in it, wherever the call runs.
      for (auto [what, data, length] :
           {std::tuple{"send", call.send, bytes->send},
            std::tuple{"recv", static_cast<const void*>(call.recv), bytes->recv}}) {
        if (length == 0) continue;
        BATON_RETURN_IF_ERROR(RefuseLocked(call, /*numbered=*/false,
                                           daemon_route_.InBuffer(what, data, length, 1).status()));
      }
    }
    BATON_RETURN_IF_ERROR(arena_route_.Describe(call, facts));
    const RouteChoice choice = router_.Choose(call.spec, facts);
    auto through_daemon = [this, &options](Call& c, size_t send, size_t recv)
                              ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                return ThroughDaemonLocked(c, send, recv, options);
                              };
    absl::StatusOr<std::string> ran;
    switch (choice.kind) {
      case RouteKind::kArena:
        ran = arena_route_.Run(call, options, through_daemon);
        break;
      case RouteKind::kArenaOrDaemon:
        ran = arena_route_.RunWhereChosen(call, choice, bytes->send, bytes->recv, options,
                                          through_daemon);
        break;
      case RouteKind::kDaemon:
      case RouteKind::kDevice:
        // With an arena the call takes its place there first.
        if (facts.arena_slot_bytes) {
          BATON_RETURN_IF_ERROR(arena_route_.RecordElsewhere(call, absl::Now() + options.timeout));
        }
        ran = choice.kind == RouteKind::kDevice
                  ? device_route_.Run(call, bytes->send, bytes->recv, options)
                  : ThroughDaemonLocked(call, bytes->send, bytes->recv, options);
        break;
    }
    if (!ran.ok()) return ran.status();
    last_algorithm_ = *std::move(ran);
    return absl::OkStatus();
  }

  // The daemon route, with the refusal of a call whose buffers it cannot place.
  absl::StatusOr<std::string> ThroughDaemonLocked(Call& call, size_t send_bytes, size_t recv_bytes,
                                                  const CallOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<DaemonRoute::Placed> placed = daemon_route_.Place(call, send_bytes, recv_bytes);
    if (!placed.ok()) return RefuseLocked(call, /*numbered=*/true, placed.status());
    return daemon_route_.Run(call, *placed, options);
  }

  // Whether [data, data + bytes) is device memory of this process (false without a device).
  static bool IsDeviceMemory(const void* data, size_t bytes) {
    if (bytes == 0 || data == nullptr) return false;
    absl::StatusOr<device::Device*> device = ClientDevice();
    return device.ok() && (*device)->IsDeviceMemory(data, bytes);
  }

  const std::shared_ptr<Session> session_;
  const uint64_t tag_;
  const int world_size_;
  const int rank_;
  const int daemon_count_;
  const CallBuilder calls_;
  AbortState abort_;
  // Held by the operation running (Run), which the routes serve one at a time.
  mutable absl::Mutex mu_;
  DaemonLink link_;
  Router router_ ABSL_GUARDED_BY(mu_);
  DaemonRoute daemon_route_ ABSL_GUARDED_BY(mu_);
  DeviceRoute device_route_;  // its stream-ordered side takes its own lock
  ArenaRoute arena_route_ ABSL_GUARDED_BY(mu_);
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  // A collective of this rank was refused (RefuseLocked): the daemon has been told.
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_algorithm_ ABSL_GUARDED_BY(mu_);
  OpQueue queue_;  // last: its worker runs calls on everything above
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
  RouteSettings settings = RouteSettings::FromEnvironment();
  std::unique_ptr<ChannelClient> channel;
  if (settings.channel) {
    absl::StatusOr<std::unique_ptr<ChannelClient>> opened =
        ChannelClient::Open(session, response.comm_tag(), rank);
    if (opened.ok()) channel = *std::move(opened);
  }
  const CommShape shape{world_size, rank, response.daemon_count(), response.local_ranks()};
  return std::unique_ptr<Communicator>(new CommunicatorImpl(
      session, response.comm_tag(), shape, std::move(settings), std::move(channel)));
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
