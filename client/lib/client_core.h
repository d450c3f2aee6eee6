#pragma once

// libbaton's core: the client library's implementation behind the C API (client/lib/c_api.cc),
// as C++ classes over absl. Internal: not installed, and none of its symbols is exported; users
// see <baton/baton.h> and <baton/baton.hpp>. A session with the local daemon over gRPC,
// shared-memory buffers, a shared-memory submission channel per rank, and staging for memory
// the daemon cannot see.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "device/device.h"

namespace baton::core {

using collective::Algorithm;
using collective::DataType;
using collective::ReduceOp;

// Per-call options. A bare duration converts to options with that timeout.
struct CallOptions {
  CallOptions() = default;
  CallOptions(absl::Duration t) : timeout(t) {}  // NOLINT(google-explicit-constructor)

  absl::Duration timeout = absl::Minutes(10);
  // Forces an algorithm (InvalidArgument if it does not implement the collective). Otherwise
  // $BATON_ALGO ("ring", "tree", "direct", "doubling", "halving_doubling"), if set, applies to the
  // collectives it implements, and the daemon chooses for the rest. Every rank must make the same
  // choice.
  std::optional<Algorithm> algorithm;
  // Stream-ordered (device memory): the call runs after the work enqueued on `stream` before it
  // (a cudaStream_t; null is the default stream), work enqueued after it waits for it, and the
  // call returns at once. Its outcome: Communicator::AsyncError.
  bool on_stream = false;
  void* stream = nullptr;
};

// An operation submitted without waiting (the *Async calls). Thread-safe.
class Request {
 public:
  virtual ~Request() = default;  // does not cancel: the operation still runs

  // Waits up to `timeout` for the operation: its status once complete, else DeadlineExceeded
  // (the operation goes on; Wait again).
  virtual absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) = 0;
  // The operation's status if complete, nullopt while it is pending.
  virtual std::optional<absl::Status> Test() = 0;
};

// The tuner's prediction for one algorithm (Communicator::Explain).
struct AlgorithmEstimate {
  Algorithm algorithm = Algorithm::kRing;
  absl::Duration predicted;
  // all_reduce: the daemons' agreed mean time at this size (once there are 16 samples) and the
  // samples so far; the call runs the measured candidate with the lowest mean
  // (docs/collectives.md, "Measured times").
  std::optional<absl::Duration> measured;
  int64_t measured_samples = 0;
};

// One operation as a caller describes it, for Communicator::Submit (the C API's baton_op_t):
// the collective, this rank's buffers, and the fields that collective reads; the others are
// ignored. `count` is the count of the collective's call below (recv_count for reduce_scatter,
// send_count for all_gather; unused by barrier and all_to_all_v); send and recv use `send` and
// `recv`; the all_to_all_v vectors have world_size entries.
struct Operation {
  collective::Collective collective = collective::Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // all_reduce, reduce_scatter, reduce
  int root = 0;                  // broadcast, reduce, gather, scatter
  int peer = 0;                  // send, recv
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // all_to_all_v
};

class Communicator {
 public:
  virtual ~Communicator() = default;  // destroys the communicator if Destroy was not called

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Number of daemons the communicator spans.
  virtual int daemon_count() const = 0;

  // The one way an operation is submitted; the named calls below are this with an Operation.
  // With `request` null the call blocks until this rank's part is done and returns its status;
  // otherwise it returns OK at once with *request set, which completes with the status (an
  // argument error too). An operation runs after every operation submitted before it on this
  // communicator (blocking or not), in submission order; buffers must stay valid and unchanged
  // until it completes. Operations on different communicators run concurrently.
  // Errors: InvalidArgument for bad arguments (the communicator stays usable); Unavailable /
  // DeadlineExceeded naming the peer at fault when a rank or daemon is lost (the communicator is
  // then aborted on every rank); FailedPrecondition if ranks disagree on the call.
  virtual absl::Status Submit(const Operation& op, const CallOptions& options,
                              std::shared_ptr<Request>* request) = 0;

  // recv[i] = op over all ranks of send[i], for i < count, on every rank. send may equal recv
  // (in place).
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         const CallOptions& options = {}) {
    return Submit(Reducing(collective::Collective::kAllReduce, send, recv, count, type, op),
                  options, nullptr);
  }
  // recv (recv_count elements) = block `rank` of op over all ranks' send (recv_count * world_size
  // elements).
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, const CallOptions& options = {}) {
    return Submit(
        Reducing(collective::Collective::kReduceScatter, send, recv, recv_count, type, op), options,
        nullptr);
  }
  // recv (send_count * world_size elements) = every rank's send, in rank order.
  absl::Status AllGather(const void* send, void* recv, size_t send_count, DataType type,
                         const CallOptions& options = {}) {
    return Submit(Plain(collective::Collective::kAllGather, send, recv, send_count, type), options,
                  nullptr);
  }
  // recv = root's send (count elements) on every rank; send is read on the root only.
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         const CallOptions& options = {}) {
    return Submit(Rooted(collective::Collective::kBroadcast, send, recv, count, type, root),
                  options, nullptr);
  }
  // root's recv = op over all ranks' send (count elements); recv is written on the root only.
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      int root, const CallOptions& options = {}) {
    Operation reduce = Reducing(collective::Collective::kReduce, send, recv, count, type, op);
    reduce.root = root;
    return Submit(reduce, options, nullptr);
  }
  // Block j (count elements) of this rank's send goes to rank j; block i of recv comes from rank
  // i. Both buffers hold count * world_size elements.
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        const CallOptions& options = {}) {
    return Submit(Plain(collective::Collective::kAllToAll, send, recv, count, type), options,
                  nullptr);
  }
  // Returns once every rank has entered the barrier.
  absl::Status Barrier(const CallOptions& options = {}) {
    return Submit(Plain(collective::Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8),
                  options, nullptr);
  }
  // root's recv (count * world_size elements) = every rank's send (count elements), in rank
  // order; recv is neither read nor written off the root (it may be null there).
  absl::Status Gather(const void* send, void* recv, size_t count, DataType type, int root,
                      const CallOptions& options = {}) {
    return Submit(Rooted(collective::Collective::kGather, send, recv, count, type, root), options,
                  nullptr);
  }
  // recv (count elements) = block `rank` of root's send (count * world_size elements); send is
  // read on the root only (it may be null elsewhere).
  absl::Status Scatter(const void* send, void* recv, size_t count, DataType type, int root,
                       const CallOptions& options = {}) {
    return Submit(Rooted(collective::Collective::kScatter, send, recv, count, type, root), options,
                  nullptr);
  }
  // Like MPI_Alltoallv: send_counts[j] elements from send + send_displs[j] go to rank j;
  // recv_counts[i] elements from rank i land at recv + recv_displs[i]. Every vector has
  // world_size entries; counts may differ between peers and may be 0. InvalidArgument for
  // vectors of another length, counts whose sums overflow, or a null buffer with a block in it.
  absl::Status AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_displs, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_displs, DataType type,
                         const CallOptions& options = {}) {
    return Submit(Vector(send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
                  options, nullptr);
  }
  // Point to point: `count` elements of `send` to rank `peer`. Completes once the daemon has
  // taken the data (it never waits for the matching Recv). Matched in order per (sender,
  // receiver) pair; any count, 0 included.
  absl::Status Send(const void* send, size_t count, DataType type, int peer,
                    const CallOptions& options = {}) {
    return Submit(PointToPoint(collective::Collective::kSend, send, nullptr, count, type, peer),
                  options, nullptr);
  }
  // Receives rank `peer`'s next message to this rank into `recv` (`count` elements, which must
  // be the sender's count). Completes when the data is in `recv`.
  absl::Status Recv(void* recv, size_t count, DataType type, int peer,
                    const CallOptions& options = {}) {
    return Submit(PointToPoint(collective::Collective::kRecv, nullptr, recv, count, type, peer),
                  options, nullptr);
  }

  // Non-blocking forms of the calls above (Submit with a request).
  std::shared_ptr<Request> AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options = {}) {
    return Async(Reducing(collective::Collective::kAllReduce, send, recv, count, type, op),
                 options);
  }
  std::shared_ptr<Request> ReduceScatterAsync(const void* send, void* recv, size_t recv_count,
                                              DataType type, ReduceOp op,
                                              const CallOptions& options = {}) {
    return Async(Reducing(collective::Collective::kReduceScatter, send, recv, recv_count, type, op),
                 options);
  }
  std::shared_ptr<Request> AllGatherAsync(const void* send, void* recv, size_t send_count,
                                          DataType type, const CallOptions& options = {}) {
    return Async(Plain(collective::Collective::kAllGather, send, recv, send_count, type), options);
  }
  std::shared_ptr<Request> BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                          int root, const CallOptions& options = {}) {
    return Async(Rooted(collective::Collective::kBroadcast, send, recv, count, type, root),
                 options);
  }
  std::shared_ptr<Request> ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op, int root, const CallOptions& options = {}) {
    Operation reduce = Reducing(collective::Collective::kReduce, send, recv, count, type, op);
    reduce.root = root;
    return Async(reduce, options);
  }
  std::shared_ptr<Request> AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options = {}) {
    return Async(Plain(collective::Collective::kAllToAll, send, recv, count, type), options);
  }
  std::shared_ptr<Request> BarrierAsync(const CallOptions& options = {}) {
    return Async(Plain(collective::Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8),
                 options);
  }
  std::shared_ptr<Request> GatherAsync(const void* send, void* recv, size_t count, DataType type,
                                       int root, const CallOptions& options = {}) {
    return Async(Rooted(collective::Collective::kGather, send, recv, count, type, root), options);
  }
  std::shared_ptr<Request> ScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                        int root, const CallOptions& options = {}) {
    return Async(Rooted(collective::Collective::kScatter, send, recv, count, type, root), options);
  }
  std::shared_ptr<Request> AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                                          const std::vector<size_t>& send_displs, void* recv,
                                          const std::vector<size_t>& recv_counts,
                                          const std::vector<size_t>& recv_displs, DataType type,
                                          const CallOptions& options = {}) {
    return Async(Vector(send, send_counts, send_displs, recv, recv_counts, recv_displs, type),
                 options);
  }
  std::shared_ptr<Request> SendAsync(const void* send, size_t count, DataType type, int peer,
                                     const CallOptions& options = {}) {
    return Async(PointToPoint(collective::Collective::kSend, send, nullptr, count, type, peer),
                 options);
  }
  std::shared_ptr<Request> RecvAsync(void* recv, size_t count, DataType type, int peer,
                                     const CallOptions& options = {}) {
    return Async(PointToPoint(collective::Collective::kRecv, nullptr, recv, count, type, peer),
                 options);
  }

  // Aborts the communicator on every rank: asks the daemon to fail its pending and future
  // operations everywhere with Aborted and `reason`, and fails this rank's queued operations and
  // later calls at once with the same. The daemon call has a short deadline, so this returns
  // within seconds even without a daemon (its error then says so; this rank's side is aborted
  // anyway). Idempotent.
  virtual absl::Status Abort(absl::string_view reason) = 0;

  // Collective over this communicator, like MPI_Comm_split / ncclCommSplit: the ranks passing
  // the same `color` form a new communicator, ranked by (key, rank here). A negative color joins
  // none and gets nullptr. Fails like Join if some rank does not call it within `timeout`.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(
      int color, int key, absl::Duration timeout = absl::Minutes(1)) = 0;

  // The algorithm the daemon ran for the last successful operation ("ring", "tree", "direct",
  // "doubling", "halving_doubling", or "local" when every rank is on one daemon).
  virtual std::string last_algorithm() const = 0;

  // What the daemon's tuner predicts for `collective` with `count` elements of `type` (counted as
  // the collective's call counts them): every algorithm that implements it, cheapest first - the
  // one the daemon runs unless the call forces another. Empty when all ranks share one daemon.
  virtual absl::StatusOr<std::vector<AlgorithmEstimate>> Explain(collective::Collective collective,
                                                                 size_t count, DataType type) = 0;

  // Leaves the communicator once the operations already submitted have finished. Idempotent.
  virtual absl::Status Destroy() = 0;

  // The first failure of a stream-ordered call (CallOptions::on_stream) since the communicator
  // was made, like ncclCommGetAsyncError; OK while there is none. Once set, later stream-ordered
  // calls fail at once with it.
  virtual absl::Status AsyncError() const = 0;

 private:
  std::shared_ptr<Request> Async(const Operation& op, const CallOptions& options) {
    std::shared_ptr<Request> request;
    Submit(op, options, &request).IgnoreError();  // the request carries the outcome
    return request;
  }
  static Operation Plain(collective::Collective collective, const void* send, void* recv,
                         size_t count, DataType type) {
    Operation op;
    op.collective = collective;
    op.send = send;
    op.recv = recv;
    op.count = count;
    op.type = type;
    return op;
  }
  static Operation Reducing(collective::Collective collective, const void* send, void* recv,
                            size_t count, DataType type, ReduceOp reduce) {
    Operation op = Plain(collective, send, recv, count, type);
    op.op = reduce;
    return op;
  }
  static Operation Rooted(collective::Collective collective, const void* send, void* recv,
                          size_t count, DataType type, int root) {
    Operation op = Plain(collective, send, recv, count, type);
    op.root = root;
    return op;
  }
  static Operation PointToPoint(collective::Collective collective, const void* send, void* recv,
                                size_t count, DataType type, int peer) {
    Operation op = Plain(collective, send, recv, count, type);
    op.peer = peer;
    return op;
  }
  static Operation Vector(const void* send, const std::vector<size_t>& send_counts,
                          const std::vector<size_t>& send_displs, void* recv,
                          const std::vector<size_t>& recv_counts,
                          const std::vector<size_t>& recv_displs, DataType type) {
    Operation op = Plain(collective::Collective::kAllToAllV, send, recv, 0, type);
    op.send_counts = send_counts;
    op.send_displs = send_displs;
    op.recv_counts = recv_counts;
    op.recv_displs = recv_displs;
    return op;
  }
};

// Groups, like ncclGroupStart/End, per thread and nestable: between the outermost GroupStart and
// its GroupEnd, calls on any communicator are queued instead of run (blocking calls return OK at
// once; an argument error they can see at once is returned at once, and the call is not queued).
// GroupEnd submits the group's Sends first, in their order, then its other calls, in their
// order, and waits for all of them; it returns the first error (an argument error of a call in
// the group first). So a ring of Send+Recv pairs cannot deadlock, however it was queued.
// Split, Destroy and Abort are not queued: Split fails with FailedPrecondition in a group;
// Destroy fails the group's queued calls of that communicator; Abort runs at once.
absl::Status GroupStart();
// FailedPrecondition without a matching GroupStart.
absl::Status GroupEnd();

// The process's GPU device for libbaton, opened on first use from $BATON_DEVICE ("auto" when
// unset: CUDA when a driver and GPU are there; "cuda", "fake" for tests, "none").
// FailedPrecondition when there is none, saying why.
absl::StatusOr<device::Device*> ClientDevice();

class Client {
 public:
  // $BATON_SOCKET if set, else /run/baton/batond.sock.
  static std::string DefaultSocketPath();

  // Connects to the daemon listening on `socket_path`. Unavailable if none answers in `timeout`.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& socket_path, absl::Duration timeout = absl::Seconds(10));

  virtual ~Client() = default;  // frees buffers, leaves communicators, closes the session

  // A new communicator id rooted at this client's daemon, to share with every rank.
  virtual absl::StatusOr<std::string> CreateCommId() = 0;

  // Joins rank `rank` of `world_size`; waits up to `timeout` for every rank to join, then fails
  // with DeadlineExceeded naming the ranks that never arrived.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Join(const std::string& comm_id,
                                                             int world_size, int rank,
                                                             absl::Duration timeout) = 0;

  // Memory shared with the daemon: collectives on it copy nothing between rank and daemon.
  // Valid until Free or until the client is destroyed.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual absl::Status Free(void* data) = 0;

  // The name of the node whose daemon this client talks to.
  virtual const std::string& node_name() const = 0;

  // Device memory of GPU `ordinal` shared with the daemon (VMM, exportable). Valid until
  // FreeDevice or until the client is destroyed. FailedPrecondition without a GPU.
  virtual absl::StatusOr<void*> AllocateDevice(size_t bytes, int ordinal) = 0;
  virtual absl::Status FreeDevice(void* data) = 0;
  // Registers the device allocation holding [data, data + bytes) with the daemon now (calls on
  // device memory register it on first use anyway), like ncclCommRegister. Deregister it before
  // the memory is freed: the daemon keeps its mapping until then.
  virtual absl::Status RegisterDevice(const void* data, size_t bytes) = 0;
  virtual absl::Status DeregisterDevice(const void* data) = 0;
};

}  // namespace baton::core
