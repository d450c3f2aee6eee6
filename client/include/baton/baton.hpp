#pragma once

// libbaton's C++ API: a header-only layer over the C API (<baton/baton.h>), so it needs only the
// C++ standard library and keeps no C++ type in the library's ABI.
//
//   auto client = baton::Client::Connect();  // $BATON_SOCKET or /run/baton/batond.sock
//   std::string id = ...;  // rank 0: (*client)->CreateCommId(), shared out of band
//   auto comm = (*client)->Join(id, world_size, rank, std::chrono::seconds(60));
//   auto data = static_cast<float*>(*(*client)->Allocate(n * sizeof(float)));  // zero-copy
//   baton::Status s = (*comm)->AllReduce(data, data, n, baton::DataType::kFloat32,
//                                        baton::ReduceOp::kSum);
//
// Errors are values: Status (a code and a message) and StatusOr<T>; nothing here throws except
// std::bad_alloc. The contracts (threads, ownership, what each error means) are those of the C
// API, stated in <baton/baton.h>.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/baton.h"

namespace baton {

// ---- Status ---------------------------------------------------------------------------------

// The canonical codes (gRPC's and absl's numbers).
enum class StatusCode : int {
  kOk = BATON_OK,
  kCancelled = BATON_CANCELLED,
  kUnknown = BATON_UNKNOWN,
  kInvalidArgument = BATON_INVALID_ARGUMENT,
  kDeadlineExceeded = BATON_DEADLINE_EXCEEDED,
  kNotFound = BATON_NOT_FOUND,
  kAlreadyExists = BATON_ALREADY_EXISTS,
  kPermissionDenied = BATON_PERMISSION_DENIED,
  kResourceExhausted = BATON_RESOURCE_EXHAUSTED,
  kFailedPrecondition = BATON_FAILED_PRECONDITION,
  kAborted = BATON_ABORTED,
  kOutOfRange = BATON_OUT_OF_RANGE,
  kUnimplemented = BATON_UNIMPLEMENTED,
  kInternal = BATON_INTERNAL,
  kUnavailable = BATON_UNAVAILABLE,
  kDataLoss = BATON_DATA_LOSS,
  kUnauthenticated = BATON_UNAUTHENTICATED,
};

// "OK", "INVALID_ARGUMENT", ...
inline std::string_view StatusCodeName(StatusCode code) {
  return baton_code_name(static_cast<baton_code_t>(code));
}

inline std::ostream& operator<<(std::ostream& out, StatusCode code) {
  return out << StatusCodeName(code);
}

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(code == StatusCode::kOk ? std::string() : std::move(message)) {}

  // The result of the C call that just returned `code` on this thread (its message is read from
  // baton_last_error()).
  static Status FromC(baton_code_t code) {
    if (code == BATON_OK) return Status();
    return Status(static_cast<StatusCode>(code), baton_last_error());
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK", or "<CODE>: <message>".
  std::string ToString() const {
    if (ok()) return "OK";
    return std::string(StatusCodeName(code_)) + ": " + message_;
  }

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& out, const Status& status) {
  return out << status.ToString();
}

// A value, or the Status saying why there is none.
template <typename T>
class StatusOr {
 public:
  // `status` must not be OK (an OK status without a value becomes kInternal).
  StatusOr(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? Status(StatusCode::kInternal, "StatusOr made from an OK status")
                            : std::move(status)) {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // The value; must be ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return *std::move(value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return *std::move(value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// ---- Element types, reduce operators, collectives, algorithms -------------------------------

enum class DataType : int {
  kInt8 = BATON_INT8,
  kUint8 = BATON_UINT8,
  kInt32 = BATON_INT32,
  kUint32 = BATON_UINT32,
  kInt64 = BATON_INT64,
  kUint64 = BATON_UINT64,
  kFloat16 = BATON_FLOAT16,
  kBfloat16 = BATON_BFLOAT16,
  kFloat32 = BATON_FLOAT32,
  kFloat64 = BATON_FLOAT64,
  kFp8E4M3 = BATON_FP8_E4M3,
  kFp8E5M2 = BATON_FP8_E5M2,
};

enum class ReduceOp : int {
  kSum = BATON_SUM,
  kProd = BATON_PROD,
  kMin = BATON_MIN,
  kMax = BATON_MAX,
  kAvg = BATON_AVG,  // the sum, divided by the number of ranks once at the end
};

enum class Collective : int {
  kAllReduce = BATON_ALL_REDUCE,
  kReduceScatter = BATON_REDUCE_SCATTER,
  kAllGather = BATON_ALL_GATHER,
  kBroadcast = BATON_BROADCAST,
  kReduce = BATON_REDUCE,
  kAllToAll = BATON_ALL_TO_ALL,
  kBarrier = BATON_BARRIER,
  kGather = BATON_GATHER,
  kScatter = BATON_SCATTER,
  kAllToAllV = BATON_ALL_TO_ALL_V,
  kSend = BATON_SEND,
  kRecv = BATON_RECV,
};

// The algorithm families; "the daemon chooses" is an empty std::optional<Algorithm>.
enum class Algorithm : int {
  kRing = BATON_ALGORITHM_RING,
  kTree = BATON_ALGORITHM_TREE,
  kDirect = BATON_ALGORITHM_DIRECT,
  kDoubling = BATON_ALGORITHM_DOUBLING,
  kHalvingDoubling = BATON_ALGORITHM_HALVING_DOUBLING,
};

inline size_t DataTypeSize(DataType type) {
  return baton_dtype_size(static_cast<baton_dtype_t>(type));
}
// Names as the CLI, metrics and errors write them ("float32", "sum", "all_reduce", "ring").
inline std::string_view DataTypeName(DataType type) {
  return baton_dtype_name(static_cast<baton_dtype_t>(type));
}
inline std::string_view ReduceOpName(ReduceOp op) {
  return baton_reduce_op_name(static_cast<baton_reduce_op_t>(op));
}
inline std::string_view CollectiveName(Collective collective) {
  return baton_collective_name(static_cast<baton_collective_t>(collective));
}
inline std::string_view AlgorithmName(Algorithm algorithm) {
  return baton_algorithm_name(static_cast<baton_algorithm_t>(algorithm));
}
inline bool IsSupported(Collective collective, Algorithm algorithm) {
  return baton_algorithm_supports(static_cast<baton_algorithm_t>(algorithm),
                                  static_cast<baton_collective_t>(collective)) != 0;
}

inline std::optional<DataType> ParseDataType(std::string_view name) {
  baton_dtype_t out;
  if (baton_dtype_parse(std::string(name).c_str(), &out) != BATON_OK) return std::nullopt;
  return static_cast<DataType>(out);
}
inline std::optional<ReduceOp> ParseReduceOp(std::string_view name) {
  baton_reduce_op_t out;
  if (baton_reduce_op_parse(std::string(name).c_str(), &out) != BATON_OK) return std::nullopt;
  return static_cast<ReduceOp>(out);
}
inline std::optional<Collective> ParseCollective(std::string_view name) {
  baton_collective_t out;
  if (baton_collective_parse(std::string(name).c_str(), &out) != BATON_OK) return std::nullopt;
  return static_cast<Collective>(out);
}
// "auto" is not an algorithm here: it parses to nullopt, like an unknown name.
inline std::optional<Algorithm> ParseAlgorithm(std::string_view name) {
  baton_algorithm_t out;
  if (baton_algorithm_parse(std::string(name).c_str(), &out) != BATON_OK) return std::nullopt;
  if (out == BATON_ALGORITHM_AUTO) return std::nullopt;
  return static_cast<Algorithm>(out);
}

// ---- Calls ----------------------------------------------------------------------------------

// Per-call options. A bare duration converts to options with that timeout (rounded up to
// whole milliseconds).
struct CallOptions {
  CallOptions() = default;
  template <typename Rep, typename Period>
  CallOptions(std::chrono::duration<Rep, Period> t)  // NOLINT(google-explicit-constructor)
      : timeout(std::chrono::ceil<std::chrono::milliseconds>(t)) {}

  // The operation fails at this deadline (values below 1 ms mean the default).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Forces an algorithm (kInvalidArgument if it does not implement the collective). Otherwise
  // $BATON_ALGO, if set, applies to the collectives it implements, and the daemon chooses for
  // the rest. Every rank must make the same choice.
  std::optional<Algorithm> algorithm;
  // Stream order (device memory only): the call runs after the work enqueued on `stream` (a
  // cudaStream_t; nullptr is the default stream) before it, later work on the stream waits for
  // it, and the call returns at once; its outcome is Communicator::AsyncError(). See baton.h,
  // "Device memory".
  bool on_stream = false;
  void* stream = nullptr;

  // Options for a stream-ordered call on `stream`.
  static CallOptions OnStream(void* stream) {
    CallOptions options;
    options.on_stream = true;
    options.stream = stream;
    return options;
  }

  baton_call_options_t ToC() const {
    baton_call_options_t options;
    baton_call_options_init(&options);
    options.timeout_ms = static_cast<int64_t>(timeout.count());
    options.algorithm =
        algorithm ? static_cast<baton_algorithm_t>(*algorithm) : BATON_ALGORITHM_AUTO;
    options.on_stream = on_stream ? 1 : 0;
    options.stream = stream;
    return options;
  }
};

// An operation submitted without waiting (the *Async calls). Thread-safe.
class Request {
 public:
  explicit Request(baton_request_t* handle) : handle_(handle) {}
  // A request that failed before it could be made: it has completed with `failed`.
  explicit Request(Status failed) : handle_(nullptr), failed_(std::move(failed)) {}
  ~Request() { baton_request_free(handle_); }  // does not cancel: the operation still runs
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Waits up to `timeout` for the operation: its status once complete, else kDeadlineExceeded
  // (the operation goes on; Wait again, or use Test).
  Status Wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) {
    if (handle_ == nullptr) return failed_;
    const int64_t ms =
        timeout == std::chrono::milliseconds::max() ? -1 : static_cast<int64_t>(timeout.count());
    return Status::FromC(baton_request_wait(handle_, ms, nullptr));
  }
  // The operation's status if complete, nullopt while it is pending.
  std::optional<Status> Test() {
    if (handle_ == nullptr) return failed_;
    int done = 0;
    const baton_code_t code = baton_request_wait(handle_, 0, &done);
    if (!done) return std::nullopt;
    return Status::FromC(code);
  }

 private:
  baton_request_t* const handle_;
  const Status failed_;
};

// The tuner's prediction for one algorithm (Communicator::Explain).
struct AlgorithmEstimate {
  Algorithm algorithm = Algorithm::kRing;
  std::chrono::nanoseconds predicted{0};
  // all_reduce: the daemons' agreed mean time at this size (once there are enough samples), and
  // the samples so far; the call runs the measured candidate with the lowest mean.
  std::optional<std::chrono::nanoseconds> measured;
  int64_t measured_samples = 0;
};

// One rank's membership of a communicator. Thread-safe; operations run in submission order.
class Communicator {
 public:
  explicit Communicator(baton_comm_t* handle) : handle_(handle) {}
  ~Communicator() { baton_comm_destroy(handle_); }  // leaves it if Destroy was not called
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return baton_comm_rank(handle_); }
  int world_size() const { return baton_comm_world_size(handle_); }
  // Number of daemons the communicator spans.
  int daemon_count() const { return baton_comm_daemon_count(handle_); }

  // The collectives of <baton/baton.h>, with the same arguments and errors.
  Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_all_reduce(handle_, send, recv, count, C(type), C(op), &o));
  }
  Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                       const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_reduce_scatter(handle_, send, recv, recv_count, C(type), C(op), &o));
  }
  Status AllGather(const void* send, void* recv, size_t send_count, DataType type,
                   const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_all_gather(handle_, send, recv, send_count, C(type), &o));
  }
  Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                   const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_broadcast(handle_, send, recv, count, C(type), root, &o));
  }
  Status Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_reduce(handle_, send, recv, count, C(type), C(op), root, &o));
  }
  Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                  const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_all_to_all(handle_, send, recv, count, C(type), &o));
  }
  Status Barrier(const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_barrier(handle_, &o));
  }
  Status Gather(const void* send, void* recv, size_t count, DataType type, int root,
                const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_gather(handle_, send, recv, count, C(type), root, &o));
  }
  Status Scatter(const void* send, void* recv, size_t count, DataType type, int root,
                 const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_scatter(handle_, send, recv, count, C(type), root, &o));
  }
  // Every vector must have world_size() entries (kInvalidArgument otherwise).
  Status AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                   const std::vector<size_t>& send_displs, void* recv,
                   const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                   DataType type, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    size_t entries = 0;
    if (Status s = Entries(send_counts, send_displs, recv_counts, recv_displs, &entries); !s.ok()) {
      return s;
    }
    return Status::FromC(baton_all_to_all_v(handle_, send, send_counts.data(), send_displs.data(),
                                            recv, recv_counts.data(), recv_displs.data(), entries,
                                            C(type), &o));
  }
  // Point to point (baton_send, baton_recv): matched in order per pair of ranks.
  Status Send(const void* buf, size_t count, DataType type, int peer,
              const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_send(handle_, buf, count, C(type), peer, &o));
  }
  Status Recv(void* buf, size_t count, DataType type, int peer, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    return Status::FromC(baton_recv(handle_, buf, count, C(type), peer, &o));
  }

  // Fails the communicator's pending and future operations on every rank with kAborted and
  // `reason` (baton_comm_abort). Returns within seconds even without a daemon.
  Status Abort(std::string_view reason) {
    const std::string text(reason);
    return Status::FromC(baton_comm_abort(handle_, text.c_str()));
  }

  // Non-blocking forms: see <baton/baton.h>. An argument error completes the request at once.
  std::shared_ptr<Request> AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                          ReduceOp op, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_all_reduce_async(handle_, send, recv, count, C(type), C(op), &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> ReduceScatterAsync(const void* send, void* recv, size_t recv_count,
                                              DataType type, ReduceOp op,
                                              const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_reduce_scatter_async(handle_, send, recv, recv_count, C(type), C(op), &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> AllGatherAsync(const void* send, void* recv, size_t send_count,
                                          DataType type, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_all_gather_async(handle_, send, recv, send_count, C(type), &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                          int root, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_broadcast_async(handle_, send, recv, count, C(type), root, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> ReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op, int root, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_reduce_async(handle_, send, recv, count, C(type), C(op), root, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                         const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code = baton_all_to_all_async(handle_, send, recv, count, C(type), &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> BarrierAsync(const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code = baton_barrier_async(handle_, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> GatherAsync(const void* send, void* recv, size_t count, DataType type,
                                       int root, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code = baton_gather_async(handle_, send, recv, count, C(type), root, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> ScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                        int root, const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_scatter_async(handle_, send, recv, count, C(type), root, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> AllToAllVAsync(const void* send, const std::vector<size_t>& send_counts,
                                          const std::vector<size_t>& send_displs, void* recv,
                                          const std::vector<size_t>& recv_counts,
                                          const std::vector<size_t>& recv_displs, DataType type,
                                          const CallOptions& options = {}) {
    size_t entries = 0;
    if (Status s = Entries(send_counts, send_displs, recv_counts, recv_displs, &entries); !s.ok()) {
      return std::make_shared<Request>(std::move(s));
    }
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code =
        baton_all_to_all_v_async(handle_, send, send_counts.data(), send_displs.data(), recv,
                                 recv_counts.data(), recv_displs.data(), entries, C(type), &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> SendAsync(const void* buf, size_t count, DataType type, int peer,
                                     const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code = baton_send_async(handle_, buf, count, C(type), peer, &o, &r);
    return Wrap(code, r);
  }
  std::shared_ptr<Request> RecvAsync(void* buf, size_t count, DataType type, int peer,
                                     const CallOptions& options = {}) {
    const baton_call_options_t o = options.ToC();
    baton_request_t* r = nullptr;
    const baton_code_t code = baton_recv_async(handle_, buf, count, C(type), peer, &o, &r);
    return Wrap(code, r);
  }

  // Like MPI_Comm_split: see baton_comm_split. nullptr for a negative color.
  StatusOr<std::unique_ptr<Communicator>> Split(
      int color, int key, std::chrono::milliseconds timeout = std::chrono::minutes(1)) {
    baton_comm_t* out = nullptr;
    const baton_code_t code =
        baton_comm_split(handle_, color, key, static_cast<int64_t>(timeout.count()), &out);
    if (code != BATON_OK) return Status::FromC(code);
    if (out == nullptr) return std::unique_ptr<Communicator>();
    return std::make_unique<Communicator>(out);
  }

  // The algorithm that ran the last successful operation ("ring", ..., "local", "arena").
  std::string last_algorithm() const {
    char name[64] = {};
    if (baton_comm_last_algorithm(handle_, name, sizeof(name)) != BATON_OK) return "";
    return name;
  }

  // The tuner's view of `collective` with `count` elements of `type`: see baton_comm_explain.
  StatusOr<std::vector<AlgorithmEstimate>> Explain(Collective collective, size_t count,
                                                   DataType type) {
    baton_algorithm_estimate_t c[16];
    size_t written = 0;
    const baton_code_t code =
        baton_comm_explain(handle_, static_cast<baton_collective_t>(collective), count, C(type), c,
                           sizeof(c) / sizeof(c[0]), &written);
    if (code != BATON_OK) return Status::FromC(code);
    std::vector<AlgorithmEstimate> estimates;
    for (size_t i = 0; i < written; ++i) {
      AlgorithmEstimate e;
      e.algorithm = static_cast<Algorithm>(c[i].algorithm);
      e.predicted = Nanoseconds(c[i].predicted_seconds);
      if (c[i].measured_seconds >= 0) e.measured = Nanoseconds(c[i].measured_seconds);
      e.measured_samples = c[i].measured_samples;
      estimates.push_back(e);
    }
    return estimates;
  }

  // OK, or the first failure of a stream-ordered call (CallOptions::on_stream), like
  // ncclCommGetAsyncError; after one, later stream-ordered calls fail at once.
  Status AsyncError() const { return Status::FromC(baton_comm_get_async_error(handle_)); }

  // Leaves the communicator once the operations already submitted have finished. Idempotent;
  // the object stays valid, and later operations fail with kFailedPrecondition.
  Status Destroy() { return Status::FromC(baton_comm_leave(handle_)); }

  baton_comm_t* handle() const { return handle_; }

 private:
  static baton_dtype_t C(DataType type) { return static_cast<baton_dtype_t>(type); }
  static baton_reduce_op_t C(ReduceOp op) { return static_cast<baton_reduce_op_t>(op); }
  // The common length of all_to_all_v's vectors, or kInvalidArgument if they differ.
  static Status Entries(const std::vector<size_t>& a, const std::vector<size_t>& b,
                        const std::vector<size_t>& c, const std::vector<size_t>& d,
                        size_t* entries) {
    if (a.size() != b.size() || a.size() != c.size() || a.size() != d.size()) {
      return Status(StatusCode::kInvalidArgument,
                    "send_counts, send_displs, recv_counts and recv_displs have " +
                        std::to_string(a.size()) + ", " + std::to_string(b.size()) + ", " +
                        std::to_string(c.size()) + " and " + std::to_string(d.size()) +
                        " entries; each needs one per rank");
    }
    *entries = a.size();
    return Status();
  }
  static std::chrono::nanoseconds Nanoseconds(double seconds) {
    return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
  }
  // The C call cannot fail with a valid handle (argument errors go into the request); should it
  // fail anyway, the request completes with its error at once.
  static std::shared_ptr<Request> Wrap(baton_code_t code, baton_request_t* request) {
    if (code == BATON_OK) return std::make_shared<Request>(request);
    return std::make_shared<Request>(Status::FromC(code));
  }
  baton_comm_t* const handle_;
};

// ---- Groups ---------------------------------------------------------------------------------

// Like ncclGroupStart/End (baton_group_start/end: what may be called inside a group is stated
// there). Per thread, nestable.
inline Status GroupStart() { return Status::FromC(baton_group_start()); }
// Submits the group's operations (sends first) and waits for them; the first error.
inline Status GroupEnd() { return Status::FromC(baton_group_end()); }

// A group for a scope: starts one, and ends it in End() or, if End was not called, in the
// destructor (whose result is then lost: call End to see it).
//
//   baton::Group group;
//   comm->Send(out, n, baton::DataType::kFloat32, (rank + 1) % world);
//   comm->Recv(in, n, baton::DataType::kFloat32, (rank + world - 1) % world);
//   baton::Status status = group.End();
class Group {
 public:
  Group() : started_(GroupStart()) {}
  ~Group() {
    if (!ended_) End();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Ends the group once (later calls return the same status).
  Status End() {
    if (!ended_) {
      ended_ = true;
      result_ = started_.ok() ? GroupEnd() : started_;
    }
    return result_;
  }

 private:
  Status started_;
  Status result_;
  bool ended_ = false;
};

// A session with the node's daemon. Thread-safe.
class Client {
 public:
  // $BATON_SOCKET if set, else /run/baton/batond.sock.
  static std::string DefaultSocketPath() { return baton_default_socket_path(); }

  // Connects to the daemon listening on `socket_path`. kUnavailable if none answers in
  // `timeout`.
  static StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& socket_path = DefaultSocketPath(),
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    baton_client_t* handle = nullptr;
    const baton_code_t code =
        baton_client_connect(socket_path.c_str(), static_cast<int64_t>(timeout.count()), &handle);
    if (code != BATON_OK) return Status::FromC(code);
    return std::unique_ptr<Client>(new Client(handle));
  }

  ~Client() { baton_client_close(handle_); }  // frees buffers, closes the session
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A new communicator id rooted at this client's daemon, to share with every rank.
  StatusOr<std::string> CreateCommId() {
    char id[BATON_COMM_ID_MAX];
    const baton_code_t code = baton_client_create_comm_id(handle_, id, sizeof(id));
    if (code != BATON_OK) return Status::FromC(code);
    return std::string(id);
  }

  // Joins rank `rank` of `world_size`; waits up to `timeout` for every rank to join, then fails
  // with kDeadlineExceeded naming the ranks that never arrived.
  StatusOr<std::unique_ptr<Communicator>> Join(const std::string& comm_id, int world_size, int rank,
                                               std::chrono::milliseconds timeout) {
    baton_comm_t* comm = nullptr;
    const baton_code_t code = baton_client_join(handle_, comm_id.c_str(), world_size, rank,
                                                static_cast<int64_t>(timeout.count()), &comm);
    if (code != BATON_OK) return Status::FromC(code);
    return std::make_unique<Communicator>(comm);
  }

  // Memory shared with the daemon: collectives on it copy nothing between rank and daemon.
  // Valid until Free or until the client is destroyed.
  StatusOr<void*> Allocate(size_t bytes) {
    void* data = nullptr;
    const baton_code_t code = baton_client_alloc(handle_, bytes, &data);
    if (code != BATON_OK) return Status::FromC(code);
    return data;
  }
  Status Free(void* data) { return Status::FromC(baton_client_free(handle_, data)); }

  // Device memory of GPU `device` (the CUDA ordinal) shared with the daemon (CUDA VMM memory):
  // valid until FreeDevice or until the client is destroyed. kFailedPrecondition without a GPU.
  StatusOr<void*> AllocateDevice(size_t bytes, int device) {
    void* data = nullptr;
    const baton_code_t code = baton_client_alloc_device(handle_, bytes, device, &data);
    if (code != BATON_OK) return Status::FromC(code);
    return data;
  }
  Status FreeDevice(void* data) { return Status::FromC(baton_client_free_device(handle_, data)); }
  // Registers the device allocation holding [data, data + bytes) now (collectives register
  // device memory on first use anyway) / forgets it: deregister memory from other allocators
  // before freeing it.
  Status RegisterDevice(const void* data, size_t bytes) {
    return Status::FromC(baton_client_register_device(handle_, data, bytes));
  }
  Status DeregisterDevice(const void* data) {
    return Status::FromC(baton_client_deregister_device(handle_, data));
  }

  // The name of the node whose daemon this client talks to.
  const std::string& node_name() const { return node_name_; }

  baton_client_t* handle() const { return handle_; }

 private:
  explicit Client(baton_client_t* handle)
      : handle_(handle), node_name_(baton_client_node_name(handle)) {}

  baton_client_t* const handle_;
  const std::string node_name_;
};

}  // namespace baton
