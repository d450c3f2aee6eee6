#include "client/lib/routes/daemon_route.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collective/data_type.h"
#include "common/status_macros.h"

namespace baton::core {
namespace {

// Whether element i of the output depends on element i of the inputs only, so that the daemon
// may write the output over this rank's input.
bool ElementwiseInPlace(const collective::OpSpec& spec) {
  return spec.collective == collective::Collective::kAllReduce ||
         spec.collective == collective::Collective::kBroadcast ||
         spec.collective == collective::Collective::kReduce;
}

// Copies a staged output to the user's buffer: all of it, or for all_to_all_v only the blocks
// (what lies between them is the user's and stays as it was).
void CopyOutStaged(const Call& call, const std::byte* staged) {
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

}  // namespace

absl::StatusOr<std::optional<v1::BufferRef>> DaemonRoute::InBuffer(const char* what,
                                                                   const void* data, size_t bytes,
                                                                   size_t element) const {
  Session::Found found = link_.session().Locate(data, bytes);
  if (found.overrun_of > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " needs ", bytes,
                     " bytes but its shared buffer (from Allocate or baton_client_alloc) of ",
                     found.overrun_of, " bytes ends before that"));
  }
  if (found.ref && found.ref->offset() % element != 0) return std::nullopt;
  return found.ref;
}

absl::StatusOr<DaemonRoute::Placed> DaemonRoute::Place(const Call& call, size_t send_bytes,
                                                       size_t recv_bytes) {
  // A pointer into an Allocate()d buffer must fit in it: the library knows its size, and
  // staging would write past its end.
  Placed placed;
  const size_t element = collective::DataTypeSize(call.spec.type);
  if (send_bytes > 0) {
    BATON_ASSIGN_OR_RETURN(placed.send, InBuffer("send", call.send, send_bytes, element));
  }
  if (recv_bytes > 0) {
    BATON_ASSIGN_OR_RETURN(placed.recv, InBuffer("recv", call.recv, recv_bytes, element));
  }
  const size_t send_staged = send_bytes > 0 && !placed.send ? send_bytes : 0;
  const bool recv_staged = recv_bytes > 0 && !placed.recv;
  if (send_staged == 0 && !recv_staged) return placed;
  // The staging buffer holds the staged input at offset 0 and the staged output after it. An
  // elementwise operation in place (torch's all_reduce) stages once: the daemon reads and
  // writes one staged region, as it would the caller's buffer, which halves the staging memory
  // the call touches.
  const bool stage_in_place = send_staged > 0 && recv_staged && call.send == call.recv &&
                              send_bytes == recv_bytes && ElementwiseInPlace(call.spec);
  const size_t recv_at = stage_in_place ? 0 : send_staged;
  if (recv_staged && recv_bytes > SIZE_MAX - recv_at) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot stage ", send_staged, " + ", recv_bytes, " bytes (more than memory holds)"));
  }
  BATON_RETURN_IF_ERROR(EnsureStaging(recv_staged ? recv_at + recv_bytes : send_staged));
  auto* staging = static_cast<std::byte*>(staging_);
  if (send_staged > 0) {
    std::memcpy(staging, call.send, send_bytes);
    placed.send = link_.session().Find(staging, send_bytes);
  }
  if (recv_staged) {
    placed.recv = link_.session().Find(staging + recv_at, recv_bytes);
    placed.staged_recv = staging + recv_at;
    // A node's part is in place: its buffer holds the input (a broadcast root's data).
    if (call.spec.node_part && !stage_in_place)
      std::memcpy(staging + recv_at, call.recv, recv_bytes);
  }
  return placed;
}

absl::StatusOr<std::string> DaemonRoute::Run(const Call& call, const Placed& placed,
                                             const CallOptions& options) {
  BATON_ASSIGN_OR_RETURN(std::string algorithm, link_.Run(call, placed.send, placed.recv, options));
  if (placed.staged_recv != nullptr) CopyOutStaged(call, placed.staged_recv);
  return algorithm;
}

absl::Status DaemonRoute::EnsureStaging(size_t bytes) {
  if (staging_ != nullptr && staging_bytes_ >= bytes) return absl::OkStatus();
  ReleaseStaging();
  // Grow geometrically so a sweep of sizes re-registers only a few times.
  const size_t size = std::max(bytes, staging_bytes_ * 2);
  BATON_ASSIGN_OR_RETURN(staging_, link_.session().Allocate(size));
  staging_bytes_ = size;
  return absl::OkStatus();
}

void DaemonRoute::ReleaseStaging() {
  if (staging_ != nullptr) link_.session().Free(staging_).IgnoreError();
  staging_ = nullptr;
}

}  // namespace baton::core
