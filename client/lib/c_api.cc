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
#include "client/lib/c_api_internal.h"
#include "client/lib/client_core.h"
#include "client/lib/daemon_status.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "common/status_macros.h"

namespace {

namespace core = baton::core;
namespace collective = baton::collective;
using baton::c_api::DataTypeOf;
using baton::c_api::Finish;
using baton::c_api::Invalid;
using baton::c_api::kAlgorithms;
using baton::c_api::kCollectives;
using baton::c_api::kDataTypes;
using baton::c_api::kReduceOps;
using baton::c_api::OptionsOf;
using baton::c_api::Raw;
using baton::c_api::ReduceOpOf;

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

constexpr absl::Duration kDefaultConnectTimeout = absl::Seconds(10);
constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(60);
constexpr absl::Duration kDefaultCallTimeout = absl::Minutes(10);
constexpr absl::Duration kDefaultStatusTimeout = absl::Seconds(5);

thread_local std::string last_error;
thread_local std::string socket_path;

absl::Duration Millis(int64_t ms, absl::Duration fallback) {
  return ms > 0 ? absl::Milliseconds(ms) : fallback;
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

const char* AlgorithmNameOf(baton_algorithm_t algorithm) {
  const int raw = Raw(algorithm);
  if (raw == BATON_ALGORITHM_AUTO) return "auto";
  if (raw < 0 || raw >= kAlgorithms) return "unknown";
  return collective::AlgorithmName(static_cast<collective::Algorithm>(raw - 1)).data();
}

}  // namespace

namespace baton::c_api {

// Records `status` as this thread's last outcome and returns its code.
baton_code_t Finish(const absl::Status& status) {
  if (status.ok()) {
    last_error.clear();
    return BATON_OK;
  }
  last_error = std::string{status.message()};
  return static_cast<baton_code_t>(status.code());
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

}  // namespace baton::c_api

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
