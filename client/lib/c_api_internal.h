#pragma once

// What the files of libbaton's C API (c_api.cc, c_api_ops.cc) share: the handles behind the
// opaque C types, how a call records its outcome (baton_last_error), and how the C enums and
// options become the core's. Internal to libbaton.

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "baton/baton.h"
#include "client/lib/client_core.h"
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

namespace baton::c_api {

constexpr int kDataTypes = BATON_FP8_E5M2 + 1;
constexpr int kReduceOps = BATON_AVG + 1;
constexpr int kCollectives = BATON_RECV + 1;
constexpr int kAlgorithms = BATON_ALGORITHM_HALVING_DOUBLING + 1;

// Records `status` as this thread's last outcome (baton_last_error) and returns its code.
baton_code_t Finish(const absl::Status& status);
inline baton_code_t Invalid(const std::string& message) {
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

std::optional<collective::DataType> DataTypeOf(const baton_dtype_t& type);
std::optional<collective::ReduceOp> ReduceOpOf(const baton_reduce_op_t& op);
// The core's call options for `options` (NULL: defaults), or why they are invalid.
absl::StatusOr<core::CallOptions> OptionsOf(const baton_call_options_t* options);

// A request that completed at submission with `status`.
class CompletedRequest final : public core::Request {
 public:
  explicit CompletedRequest(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(absl::Duration) override { return status_; }
  std::optional<absl::Status> Test() override { return status_; }

 private:
  const absl::Status status_;
};

}  // namespace baton::c_api
