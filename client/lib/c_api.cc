// The C API of <baton/baton.h> over libbaton's core (client/lib/client_core.h). Every call
// records its outcome for the calling thread (baton_last_error) and turns a null handle or an
// enum value outside its range into BATON_INVALID_ARGUMENT rather than undefined behaviour.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "baton/baton.h"
#include "client/lib/client_core.h"
#include "client/lib/daemon_status.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"

struct baton_client {
  std::unique_ptr<baton::core::Client> impl;
};

struct baton_comm {
  std::unique_ptr<baton::core::Communicator> impl;
};

struct baton_request {
  std::shared_ptr<baton::core::Request> impl;
};

namespace {

namespace core = baton::core;
namespace collective = baton::collective;

// The C enums are the core's, shifted by one for algorithms (0 is "auto").
static_assert(BATON_INT8 == static_cast<int>(collective::DataType::kInt8));
static_assert(BATON_FLOAT32 == static_cast<int>(collective::DataType::kFloat32));
static_assert(BATON_FP8_E5M2 == static_cast<int>(collective::DataType::kFp8E5M2));
static_assert(BATON_SUM == static_cast<int>(collective::ReduceOp::kSum));
static_assert(BATON_AVG == static_cast<int>(collective::ReduceOp::kAvg));
static_assert(BATON_ALL_REDUCE == static_cast<int>(collective::Collective::kAllReduce));
static_assert(BATON_BARRIER == static_cast<int>(collective::Collective::kBarrier));
static_assert(BATON_GATHER == static_cast<int>(collective::Collective::kGather));
static_assert(BATON_SCATTER == static_cast<int>(collective::Collective::kScatter));
static_assert(BATON_ALL_TO_ALL_V == static_cast<int>(collective::Collective::kAllToAllV));
static_assert(BATON_SEND == static_cast<int>(collective::Collective::kSend));
static_assert(BATON_RECV == static_cast<int>(collective::Collective::kRecv));
static_assert(BATON_ALGORITHM_RING == 1 + static_cast<int>(collective::Algorithm::kRing));
static_assert(BATON_ALGORITHM_HALVING_DOUBLING ==
              1 + static_cast<int>(collective::Algorithm::kHalvingDoubling));
static_assert(BATON_UNAUTHENTICATED == static_cast<int>(absl::StatusCode::kUnauthenticated));

constexpr int kDataTypes = BATON_FP8_E5M2 + 1;
constexpr int kReduceOps = BATON_AVG + 1;
constexpr int kCollectives = BATON_RECV + 1;
constexpr int kAlgorithms = BATON_ALGORITHM_HALVING_DOUBLING + 1;

constexpr absl::Duration kDefaultConnectTimeout = absl::Seconds(10);
constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(60);
constexpr absl::Duration kDefaultCallTimeout = absl::Minutes(10);
constexpr absl::Duration kDefaultStatusTimeout = absl::Seconds(5);

thread_local std::string last_error;
thread_local std::string socket_path;

// Records `status` as this thread's last outcome and returns its code.
baton_code_t Finish(const absl::Status& status) {
  if (status.ok()) {
    last_error.clear();
    return BATON_OK;
  }
  last_error = std::string{status.message()};
  return static_cast<baton_code_t>(status.code());
}

baton_code_t Invalid(const std::string& message) {
  return Finish(absl::InvalidArgumentError(message));
}

// An enum's value as the caller stored it. A C caller may store any int in an enum field, and in
// C++ loading an enum object whose value lies outside the enumerators' range is undefined (UBSan
// reports it): copy the bytes instead of loading the enum.
template <typename Enum>
int Raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "the C enums are int-sized");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof(raw));
  return raw;
}

absl::Duration Millis(int64_t ms, absl::Duration fallback) {
  return ms > 0 ? absl::Milliseconds(ms) : fallback;
}

std::optional<collective::DataType> DataTypeOf(const baton_dtype_t& type) {
  const int raw = Raw(type);
  if (raw < 0 || raw >= kDataTypes) return std::nullopt;
  return static_cast<collective::DataType>(raw);
}

std::optional<collective::ReduceOp> ReduceOpOf(const baton_reduce_op_t& op) {
  const int raw = Raw(op);
  if (raw < 0 || raw >= kReduceOps) return std::nullopt;
  return static_cast<collective::ReduceOp>(raw);
}

// Copies `text` with its NUL into `out` (`size` bytes), or fails with OUT_OF_RANGE.
baton_code_t CopyOut(const std::string& text, char* out, size_t size, const char* what) {
  if (out == nullptr) return Invalid(absl::StrCat(what, " buffer is null"));
  if (text.size() + 1 > size) {
    return Finish(absl::OutOfRangeError(
        absl::StrCat(what, " needs ", text.size() + 1, " bytes; the buffer has ", size)));
  }
  std::memcpy(out, text.c_str(), text.size() + 1);
  return Finish(absl::OkStatus());
}

// The core's call options for `options` (NULL: defaults), or why they are invalid.
absl::StatusOr<core::CallOptions> OptionsOf(const baton_call_options_t* options) {
  core::CallOptions result(kDefaultCallTimeout);
  if (options == nullptr) return result;
  // A caller built against a header with fewer fields passes a smaller struct_size: read only
  // the fields it has.
  if (options->struct_size <
      offsetof(baton_call_options_t, algorithm) + sizeof(options->algorithm)) {
    return absl::InvalidArgumentError(
        "baton_call_options_t.struct_size is too small: initialise the options with "
        "baton_call_options_init");
  }
  result.timeout = Millis(options->timeout_ms, kDefaultCallTimeout);
  const int algorithm = Raw(options->algorithm);
  if (algorithm < 0 || algorithm >= kAlgorithms) {
    return absl::InvalidArgumentError(absl::StrCat("unknown algorithm ", algorithm));
  }
  if (algorithm != BATON_ALGORITHM_AUTO) {
    result.algorithm = static_cast<collective::Algorithm>(algorithm - 1);
  }
  if (options->struct_size >= offsetof(baton_call_options_t, stream) + sizeof(options->stream)) {
    result.on_stream = options->on_stream != 0;
    result.stream = options->stream;
  }
  return result;
}

// One collective call's checked arguments.
struct Checked {
  core::CallOptions options;
  collective::DataType type = collective::DataType::kUint8;
  collective::ReduceOp op = collective::ReduceOp::kSum;
};

absl::StatusOr<Checked> Check(const baton_comm_t* comm, baton_dtype_t type, baton_reduce_op_t op,
                              const baton_call_options_t* options) {
  if (comm == nullptr) return absl::InvalidArgumentError("communicator is null");
  Checked checked;
  std::optional<collective::DataType> t = DataTypeOf(type);
  if (!t) return absl::InvalidArgumentError(absl::StrCat("unknown data type ", Raw(type)));
  std::optional<collective::ReduceOp> o = ReduceOpOf(op);
  if (!o) return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", Raw(op)));
  checked.type = *t;
  checked.op = *o;
  absl::StatusOr<core::CallOptions> parsed = OptionsOf(options);
  if (!parsed.ok()) return parsed.status();
  checked.options = *parsed;
  return checked;
}

// Runs a blocking collective: `run(comm, checked)` returns its status.
template <typename Run>
baton_code_t Blocking(baton_comm_t* comm, baton_dtype_t type, baton_reduce_op_t op,
                      const baton_call_options_t* options, Run run) {
  absl::StatusOr<Checked> checked = Check(comm, type, op, options);
  if (!checked.ok()) return Finish(checked.status());
  return Finish(run(*comm->impl, *checked));
}

// A request that completed at submission with `status`.
class CompletedRequest final : public core::Request {
 public:
  explicit CompletedRequest(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(absl::Duration) override { return status_; }
  std::optional<absl::Status> Test() override { return status_; }

 private:
  const absl::Status status_;
};

// Submits a non-blocking collective: `submit(comm, checked)` returns its core request.
template <typename Submit>
baton_code_t Async(baton_comm_t* comm, baton_dtype_t type, baton_reduce_op_t op,
                   const baton_call_options_t* options, baton_request_t** request, Submit submit) {
  if (request == nullptr) return Invalid("request is null");
  *request = nullptr;
  if (comm == nullptr) return Invalid("communicator is null");
  absl::StatusOr<Checked> checked = Check(comm, type, op, options);
  auto handle = std::make_unique<baton_request>();
  handle->impl = checked.ok() ? submit(*comm->impl, *checked)
                              : std::make_shared<CompletedRequest>(checked.status());
  *request = handle.release();
  return Finish(absl::OkStatus());
}

// all_to_all_v's four arrays of `entries` counts, as the core's vectors.
struct VectorCounts {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};

absl::StatusOr<VectorCounts> CountsOf(const size_t* send_counts, const size_t* send_displs,
                                      const size_t* recv_counts, const size_t* recv_displs,
                                      size_t entries, int world_size) {
  if (entries > 0 && (send_counts == nullptr || send_displs == nullptr || recv_counts == nullptr ||
                      recv_displs == nullptr)) {
    return absl::InvalidArgumentError(
        "send_counts, send_displs, recv_counts and recv_displs must not be null");
  }
  // The arrays are read only once their length is known to be the world size: a longer claim
  // would read past the caller's arrays.
  if (entries != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all_v got ", entries,
                     " entries per array; they need one per rank (world size ", world_size, ")"));
  }
  auto copy = [entries](const size_t* values) {
    return entries == 0 ? std::vector<size_t>() : std::vector<size_t>(values, values + entries);
  };
  return VectorCounts{copy(send_counts), copy(send_displs), copy(recv_counts), copy(recv_displs)};
}

const char* AlgorithmNameOf(baton_algorithm_t algorithm) {
  const int raw = Raw(algorithm);
  if (raw == BATON_ALGORITHM_AUTO) return "auto";
  if (raw < 0 || raw >= kAlgorithms) return "unknown";
  return collective::AlgorithmName(static_cast<collective::Algorithm>(raw - 1)).data();
}

}  // namespace

extern "C" {

const char* baton_last_error(void) { return last_error.c_str(); }

const char* baton_code_name(baton_code_t code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int index = Raw(code);
  if (index < 0 || index >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "UNKNOWN_CODE";
  }
  return kNames[index];
}

const char* baton_version(void) { return BATON_VERSION_STRING; }

// The core's names are string literals, so their data() is NUL terminated.
const char* baton_dtype_name(baton_dtype_t type) {
  std::optional<collective::DataType> t = DataTypeOf(type);
  return t ? collective::DataTypeName(*t).data() : "unknown";
}

baton_code_t baton_dtype_parse(const char* name, baton_dtype_t* out) {
  if (name == nullptr || out == nullptr) return Invalid("name and out must not be null");
  std::optional<collective::DataType> type = collective::ParseDataType(name);
  if (!type)
    return Invalid(absl::StrCat("unknown data type '", absl::string_view(name).substr(0, 64), "'"));
  *out = static_cast<baton_dtype_t>(*type);
  return Finish(absl::OkStatus());
}

size_t baton_dtype_size(baton_dtype_t type) {
  std::optional<collective::DataType> t = DataTypeOf(type);
  return t ? collective::DataTypeSize(*t) : 0;
}

const char* baton_reduce_op_name(baton_reduce_op_t op) {
  std::optional<collective::ReduceOp> o = ReduceOpOf(op);
  return o ? collective::ReduceOpName(*o).data() : "unknown";
}

baton_code_t baton_reduce_op_parse(const char* name, baton_reduce_op_t* out) {
  if (name == nullptr || out == nullptr) return Invalid("name and out must not be null");
  std::optional<collective::ReduceOp> op = collective::ParseReduceOp(name);
  if (!op)
    return Invalid(absl::StrCat("unknown reduce op '", absl::string_view(name).substr(0, 64), "'"));
  *out = static_cast<baton_reduce_op_t>(*op);
  return Finish(absl::OkStatus());
}

const char* baton_collective_name(baton_collective_t c) {
  const int raw = Raw(c);
  if (raw < 0 || raw >= kCollectives) return "unknown";
  return collective::CollectiveName(static_cast<collective::Collective>(raw)).data();
}

baton_code_t baton_collective_parse(const char* name, baton_collective_t* out) {
  if (name == nullptr || out == nullptr) return Invalid("name and out must not be null");
  std::optional<collective::Collective> c = collective::ParseCollective(name);
  if (!c)
    return Invalid(
        absl::StrCat("unknown collective '", absl::string_view(name).substr(0, 64), "'"));
  *out = static_cast<baton_collective_t>(*c);
  return Finish(absl::OkStatus());
}

const char* baton_algorithm_name(baton_algorithm_t algorithm) { return AlgorithmNameOf(algorithm); }

baton_code_t baton_algorithm_parse(const char* name, baton_algorithm_t* out) {
  if (name == nullptr || out == nullptr) return Invalid("name and out must not be null");
  if (std::strcmp(name, "auto") == 0) {
    *out = BATON_ALGORITHM_AUTO;
    return Finish(absl::OkStatus());
  }
  std::optional<collective::Algorithm> a = collective::ParseAlgorithm(name);
  if (!a)
    return Invalid(absl::StrCat("unknown algorithm '", absl::string_view(name).substr(0, 64), "'"));
  *out = static_cast<baton_algorithm_t>(1 + static_cast<int>(*a));
  return Finish(absl::OkStatus());
}

int baton_algorithm_supports(baton_algorithm_t algorithm, baton_collective_t c) {
  const int a = Raw(algorithm);
  const int k = Raw(c);
  if (k < 0 || k >= kCollectives || a < 0 || a >= kAlgorithms) return 0;
  if (a == BATON_ALGORITHM_AUTO) return 1;
  return collective::IsSupported(static_cast<collective::Collective>(k),
                                 static_cast<collective::Algorithm>(a - 1))
             ? 1
             : 0;
}

const char* baton_default_socket_path(void) {
  socket_path = core::Client::DefaultSocketPath();
  return socket_path.c_str();
}

baton_code_t baton_client_connect(const char* path, int64_t timeout_ms, baton_client_t** client) {
  if (client == nullptr) return Invalid("client is null");
  *client = nullptr;
  const std::string target =
      path != nullptr && *path != '\0' ? std::string(path) : core::Client::DefaultSocketPath();
  absl::StatusOr<std::unique_ptr<core::Client>> connected =
      core::Client::Connect(target, Millis(timeout_ms, kDefaultConnectTimeout));
  if (!connected.ok()) return Finish(connected.status());
  *client = new baton_client{*std::move(connected)};
  return Finish(absl::OkStatus());
}

void baton_client_close(baton_client_t* client) {
  delete client;
  Finish(absl::OkStatus());
}

const char* baton_client_node_name(const baton_client_t* client) {
  return client != nullptr ? client->impl->node_name().c_str() : "";
}

baton_code_t baton_client_create_comm_id(baton_client_t* client, char* id, size_t id_size) {
  if (client == nullptr) return Invalid("client is null");
  absl::StatusOr<std::string> created = client->impl->CreateCommId();
  if (!created.ok()) return Finish(created.status());
  return CopyOut(*created, id, id_size, "the communicator id");
}

baton_code_t baton_client_join(baton_client_t* client, const char* comm_id, int world_size,
                               int rank, int64_t timeout_ms, baton_comm_t** comm) {
  if (comm == nullptr) return Invalid("comm is null");
  *comm = nullptr;
  if (client == nullptr) return Invalid("client is null");
  if (comm_id == nullptr) return Invalid("comm_id is null");
  absl::StatusOr<std::unique_ptr<core::Communicator>> joined =
      client->impl->Join(comm_id, world_size, rank, Millis(timeout_ms, kDefaultJoinTimeout));
  if (!joined.ok()) return Finish(joined.status());
  *comm = new baton_comm{*std::move(joined)};
  return Finish(absl::OkStatus());
}

baton_code_t baton_client_alloc(baton_client_t* client, size_t bytes, void** data) {
  if (data == nullptr) return Invalid("data is null");
  *data = nullptr;
  if (client == nullptr) return Invalid("client is null");
  if (bytes == 0) return Invalid("cannot allocate 0 bytes");
  absl::StatusOr<void*> allocated = client->impl->Allocate(bytes);
  if (!allocated.ok()) return Finish(allocated.status());
  *data = *allocated;
  return Finish(absl::OkStatus());
}

baton_code_t baton_client_free(baton_client_t* client, void* data) {
  if (client == nullptr) return Invalid("client is null");
  return Finish(client->impl->Free(data));
}

baton_code_t baton_client_alloc_device(baton_client_t* client, size_t bytes, int device,
                                       void** data) {
  if (data == nullptr) return Invalid("data is null");
  *data = nullptr;
  if (client == nullptr) return Invalid("client is null");
  if (bytes == 0) return Invalid("cannot allocate 0 bytes");
  absl::StatusOr<void*> allocated = client->impl->AllocateDevice(bytes, device);
  if (!allocated.ok()) return Finish(allocated.status());
  *data = *allocated;
  return Finish(absl::OkStatus());
}

baton_code_t baton_client_free_device(baton_client_t* client, void* data) {
  if (client == nullptr) return Invalid("client is null");
  return Finish(client->impl->FreeDevice(data));
}

baton_code_t baton_client_register_device(baton_client_t* client, const void* data, size_t bytes) {
  if (client == nullptr) return Invalid("client is null");
  if (data == nullptr || bytes == 0) return Invalid("register a non-empty range");
  return Finish(client->impl->RegisterDevice(data, bytes));
}

baton_code_t baton_client_deregister_device(baton_client_t* client, const void* data) {
  if (client == nullptr) return Invalid("client is null");
  return Finish(client->impl->DeregisterDevice(data));
}

baton_code_t baton_comm_get_async_error(const baton_comm_t* comm) {
  if (comm == nullptr) return Invalid("communicator is null");
  return Finish(comm->impl->AsyncError());
}

baton_code_t baton_daemon_status_json(const char* socket_path, int64_t timeout_ms, char* json,
                                      size_t json_size, size_t* needed) {
  if (json == nullptr && json_size > 0) return Invalid("json is null but json_size is not 0");
  const std::string target = socket_path != nullptr && *socket_path != '\0'
                                 ? std::string(socket_path)
                                 : core::Client::DefaultSocketPath();
  absl::StatusOr<baton::v1::DaemonStatus> status = core::FetchDaemonStatus(
      target, /*probe_links=*/false, Millis(timeout_ms, kDefaultStatusTimeout));
  if (!status.ok()) return Finish(status.status());
  absl::StatusOr<std::string> text = core::ToJson(*status);
  if (!text.ok()) return Finish(text.status());
  if (needed != nullptr) *needed = text->size() + 1;
  if (json == nullptr) {
    return Finish(absl::OutOfRangeError(
        absl::StrCat("the status JSON needs ", text->size() + 1, " bytes; the buffer has 0")));
  }
  return CopyOut(*text, json, json_size, "the status JSON");
}

int baton_comm_rank(const baton_comm_t* comm) { return comm != nullptr ? comm->impl->rank() : -1; }

int baton_comm_world_size(const baton_comm_t* comm) {
  return comm != nullptr ? comm->impl->world_size() : 0;
}

int baton_comm_daemon_count(const baton_comm_t* comm) {
  return comm != nullptr ? comm->impl->daemon_count() : 0;
}

baton_code_t baton_comm_leave(baton_comm_t* comm) {
  if (comm == nullptr) return Invalid("communicator is null");
  return Finish(comm->impl->Destroy());
}

baton_code_t baton_comm_destroy(baton_comm_t* comm) {
  if (comm == nullptr) return Finish(absl::OkStatus());
  const absl::Status left = comm->impl->Destroy();
  delete comm;
  return Finish(left);
}

baton_code_t baton_comm_split(baton_comm_t* comm, int color, int key, int64_t timeout_ms,
                              baton_comm_t** out) {
  if (out == nullptr) return Invalid("out is null");
  *out = nullptr;
  if (comm == nullptr) return Invalid("communicator is null");
  absl::StatusOr<std::unique_ptr<core::Communicator>> split =
      comm->impl->Split(color, key, Millis(timeout_ms, kDefaultJoinTimeout));
  if (!split.ok()) return Finish(split.status());
  if (*split != nullptr) *out = new baton_comm{*std::move(split)};
  return Finish(absl::OkStatus());
}

baton_code_t baton_comm_last_algorithm(const baton_comm_t* comm, char* name, size_t name_size) {
  if (comm == nullptr) return Invalid("communicator is null");
  return CopyOut(comm->impl->last_algorithm(), name, name_size, "the algorithm name");
}

baton_code_t baton_comm_explain(baton_comm_t* comm, baton_collective_t c, size_t count,
                                baton_dtype_t type, baton_algorithm_estimate_t* estimates,
                                size_t capacity, size_t* written) {
  if (written == nullptr) return Invalid("written is null");
  *written = 0;
  if (comm == nullptr) return Invalid("communicator is null");
  if (Raw(c) < 0 || Raw(c) >= kCollectives) {
    return Invalid(absl::StrCat("unknown collective ", Raw(c)));
  }
  std::optional<collective::DataType> t = DataTypeOf(type);
  if (!t) return Invalid(absl::StrCat("unknown data type ", Raw(type)));
  if (estimates == nullptr && capacity > 0) return Invalid("estimates is null");
  absl::StatusOr<std::vector<core::AlgorithmEstimate>> explained =
      comm->impl->Explain(static_cast<collective::Collective>(Raw(c)), count, *t);
  if (!explained.ok()) return Finish(explained.status());
  const size_t n = std::min(capacity, explained->size());
  for (size_t i = 0; i < n; ++i) {
    const core::AlgorithmEstimate& e = (*explained)[i];
    estimates[i].algorithm = static_cast<baton_algorithm_t>(1 + static_cast<int>(e.algorithm));
    estimates[i].predicted_seconds = absl::ToDoubleSeconds(e.predicted);
    estimates[i].measured_seconds = e.measured ? absl::ToDoubleSeconds(*e.measured) : -1.0;
    estimates[i].measured_samples = e.measured_samples;
  }
  *written = n;
  return Finish(absl::OkStatus());
}

void baton_call_options_init(baton_call_options_t* options) {
  if (options == nullptr) return;
  *options = baton_call_options_t{};
  options->struct_size = sizeof(baton_call_options_t);
  options->timeout_ms = 0;
  options->algorithm = BATON_ALGORITHM_AUTO;
  options->on_stream = 0;
  options->stream = nullptr;
}

baton_code_t baton_all_reduce(baton_comm_t* comm, const void* send, void* recv, size_t count,
                              baton_dtype_t type, baton_reduce_op_t op,
                              const baton_call_options_t* options) {
  return Blocking(comm, type, op, options, [&](core::Communicator& c, const Checked& k) {
    return c.AllReduce(send, recv, count, k.type, k.op, k.options);
  });
}

baton_code_t baton_reduce_scatter(baton_comm_t* comm, const void* send, void* recv,
                                  size_t recv_count, baton_dtype_t type, baton_reduce_op_t op,
                                  const baton_call_options_t* options) {
  return Blocking(comm, type, op, options, [&](core::Communicator& c, const Checked& k) {
    return c.ReduceScatter(send, recv, recv_count, k.type, k.op, k.options);
  });
}

baton_code_t baton_all_gather(baton_comm_t* comm, const void* send, void* recv, size_t send_count,
                              baton_dtype_t type, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.AllGather(send, recv, send_count, k.type, k.options);
  });
}

baton_code_t baton_broadcast(baton_comm_t* comm, const void* send, void* recv, size_t count,
                             baton_dtype_t type, int root, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.Broadcast(send, recv, count, k.type, root, k.options);
  });
}

baton_code_t baton_reduce(baton_comm_t* comm, const void* send, void* recv, size_t count,
                          baton_dtype_t type, baton_reduce_op_t op, int root,
                          const baton_call_options_t* options) {
  return Blocking(comm, type, op, options, [&](core::Communicator& c, const Checked& k) {
    return c.Reduce(send, recv, count, k.type, k.op, root, k.options);
  });
}

baton_code_t baton_all_to_all(baton_comm_t* comm, const void* send, void* recv, size_t count,
                              baton_dtype_t type, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.AllToAll(send, recv, count, k.type, k.options);
  });
}

baton_code_t baton_barrier(baton_comm_t* comm, const baton_call_options_t* options) {
  return Blocking(comm, BATON_UINT8, BATON_SUM, options,
                  [&](core::Communicator& c, const Checked& k) { return c.Barrier(k.options); });
}

baton_code_t baton_all_reduce_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, baton_reduce_op_t op,
                                    const baton_call_options_t* options,
                                    baton_request_t** request) {
  return Async(comm, type, op, options, request, [&](core::Communicator& c, const Checked& k) {
    return c.AllReduceAsync(send, recv, count, k.type, k.op, k.options);
  });
}

baton_code_t baton_reduce_scatter_async(baton_comm_t* comm, const void* send, void* recv,
                                        size_t recv_count, baton_dtype_t type, baton_reduce_op_t op,
                                        const baton_call_options_t* options,
                                        baton_request_t** request) {
  return Async(comm, type, op, options, request, [&](core::Communicator& c, const Checked& k) {
    return c.ReduceScatterAsync(send, recv, recv_count, k.type, k.op, k.options);
  });
}

baton_code_t baton_all_gather_async(baton_comm_t* comm, const void* send, void* recv,
                                    size_t send_count, baton_dtype_t type,
                                    const baton_call_options_t* options,
                                    baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.AllGatherAsync(send, recv, send_count, k.type, k.options);
               });
}

baton_code_t baton_broadcast_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                   baton_dtype_t type, int root,
                                   const baton_call_options_t* options, baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.BroadcastAsync(send, recv, count, k.type, root, k.options);
               });
}

baton_code_t baton_reduce_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                baton_dtype_t type, baton_reduce_op_t op, int root,
                                const baton_call_options_t* options, baton_request_t** request) {
  return Async(comm, type, op, options, request, [&](core::Communicator& c, const Checked& k) {
    return c.ReduceAsync(send, recv, count, k.type, k.op, root, k.options);
  });
}

baton_code_t baton_all_to_all_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, const baton_call_options_t* options,
                                    baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.AllToAllAsync(send, recv, count, k.type, k.options);
               });
}

baton_code_t baton_barrier_async(baton_comm_t* comm, const baton_call_options_t* options,
                                 baton_request_t** request) {
  return Async(comm, BATON_UINT8, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) { return c.BarrierAsync(k.options); });
}

baton_code_t baton_gather(baton_comm_t* comm, const void* send, void* recv, size_t count,
                          baton_dtype_t type, int root, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.Gather(send, recv, count, k.type, root, k.options);
  });
}

baton_code_t baton_scatter(baton_comm_t* comm, const void* send, void* recv, size_t count,
                           baton_dtype_t type, int root, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.Scatter(send, recv, count, k.type, root, k.options);
  });
}

baton_code_t baton_all_to_all_v(baton_comm_t* comm, const void* send, const size_t* send_counts,
                                const size_t* send_displs, void* recv, const size_t* recv_counts,
                                const size_t* recv_displs, size_t entries, baton_dtype_t type,
                                const baton_call_options_t* options) {
  return Blocking(
      comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) -> absl::Status {
        absl::StatusOr<VectorCounts> v =
            CountsOf(send_counts, send_displs, recv_counts, recv_displs, entries, c.world_size());
        if (!v.ok()) return v.status();
        return c.AllToAllV(send, v->send_counts, v->send_displs, recv, v->recv_counts,
                           v->recv_displs, k.type, k.options);
      });
}

baton_code_t baton_send(baton_comm_t* comm, const void* buf, size_t count, baton_dtype_t type,
                        int peer, const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.Send(buf, count, k.type, peer, k.options);
  });
}

baton_code_t baton_recv(baton_comm_t* comm, void* buf, size_t count, baton_dtype_t type, int peer,
                        const baton_call_options_t* options) {
  return Blocking(comm, type, BATON_SUM, options, [&](core::Communicator& c, const Checked& k) {
    return c.Recv(buf, count, k.type, peer, k.options);
  });
}

baton_code_t baton_gather_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                baton_dtype_t type, int root, const baton_call_options_t* options,
                                baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.GatherAsync(send, recv, count, k.type, root, k.options);
               });
}

baton_code_t baton_scatter_async(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                 baton_dtype_t type, int root, const baton_call_options_t* options,
                                 baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.ScatterAsync(send, recv, count, k.type, root, k.options);
               });
}

baton_code_t baton_all_to_all_v_async(baton_comm_t* comm, const void* send,
                                      const size_t* send_counts, const size_t* send_displs,
                                      void* recv, const size_t* recv_counts,
                                      const size_t* recv_displs, size_t entries, baton_dtype_t type,
                                      const baton_call_options_t* options,
                                      baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) -> std::shared_ptr<core::Request> {
                 absl::StatusOr<VectorCounts> v = CountsOf(send_counts, send_displs, recv_counts,
                                                           recv_displs, entries, c.world_size());
                 if (!v.ok()) return std::make_shared<CompletedRequest>(v.status());
                 return c.AllToAllVAsync(send, v->send_counts, v->send_displs, recv, v->recv_counts,
                                         v->recv_displs, k.type, k.options);
               });
}

baton_code_t baton_send_async(baton_comm_t* comm, const void* buf, size_t count, baton_dtype_t type,
                              int peer, const baton_call_options_t* options,
                              baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.SendAsync(buf, count, k.type, peer, k.options);
               });
}

baton_code_t baton_recv_async(baton_comm_t* comm, void* buf, size_t count, baton_dtype_t type,
                              int peer, const baton_call_options_t* options,
                              baton_request_t** request) {
  return Async(comm, type, BATON_SUM, options, request,
               [&](core::Communicator& c, const Checked& k) {
                 return c.RecvAsync(buf, count, k.type, peer, k.options);
               });
}

baton_code_t baton_group_start(void) { return Finish(core::GroupStart()); }

baton_code_t baton_group_end(void) { return Finish(core::GroupEnd()); }

baton_code_t baton_comm_abort(baton_comm_t* comm, const char* reason) {
  if (comm == nullptr) return Invalid("communicator is null");
  return Finish(comm->impl->Abort(reason != nullptr ? absl::string_view(reason) : ""));
}

baton_code_t baton_request_wait(baton_request_t* request, int64_t timeout_ms, int* done) {
  if (done != nullptr) *done = 0;
  if (request == nullptr) return Invalid("request is null");
  std::optional<absl::Status> status;
  if (timeout_ms == 0) {
    status = request->impl->Test();
    if (!status) {
      absl::Status waited = request->impl->Wait(absl::ZeroDuration());
      if (absl::IsFailedPrecondition(waited)) return Finish(waited);
    }
  } else {
    const absl::Duration timeout =
        timeout_ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);
    // The core's Wait answers DeadlineExceeded both for "still running" and for an operation
    // that failed at its deadline; Test tells them apart.
    absl::Status waited = request->impl->Wait(timeout);
    status = request->impl->Test();
    if (!status && waited.ok()) status = waited;
    // Queued in a group that has not ended: say so rather than "still running".
    if (!status && absl::IsFailedPrecondition(waited)) return Finish(waited);
  }
  if (!status) {
    return Finish(absl::DeadlineExceededError("the operation is still running"));
  }
  if (done != nullptr) *done = 1;
  return Finish(*status);
}

void baton_request_free(baton_request_t* request) {
  delete request;
  Finish(absl::OkStatus());
}

}  // extern "C"
