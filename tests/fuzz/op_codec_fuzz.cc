// libFuzzer target: an operation as a rank submits it, over gRPC (a CollectiveRequest) and over
// the submission channel (an OpDescriptor and its vector tail, which the rank may rewrite at any
// time). Decoding and OpSpec::Validate (against a world the input picks) must never crash, and
// what decodes must survive a round trip through the same wire unchanged.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "baton/v1/baton.pb.h"
#include "common/submission_channel.h"
#include "google/protobuf/stubs/logging.h"
#include "wire/op_codec.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Channel(const uint8_t* data, size_t size, int world, int rank) {
  baton::channel::OpDescriptor op;
  baton::channel::VectorTail tail;
  const size_t op_bytes = std::min(size, sizeof(op));
  std::memcpy(&op, data, op_bytes);
  if (size > op_bytes) std::memcpy(&tail, data + op_bytes, std::min(size - op_bytes, sizeof(tail)));
  absl::StatusOr<baton::collective::OpSpec> spec = baton::wire::FromChannel(op, tail);
  if (!spec.ok()) return;
  (void)spec->Validate(world, rank);
  if (!baton::wire::FitsChannel(*spec)) return;
  baton::channel::OpDescriptor op_again;
  baton::channel::VectorTail tail_again;
  Check(baton::wire::ToChannel(*spec, &op_again, &tail_again).ok());
  absl::StatusOr<baton::collective::OpSpec> again = baton::wire::FromChannel(op_again, tail_again);
  Check(again.ok() && *again == *spec);
}

void Proto(const uint8_t* data, size_t size, int world, int rank) {
  baton::v1::CollectiveRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<baton::collective::OpSpec> spec = baton::wire::FromProto(request);
  if (!spec.ok()) return;
  (void)spec->Validate(world, rank);
  baton::v1::CollectiveRequest again_request;
  baton::wire::ToProto(*spec, &again_request);
  absl::StatusOr<baton::collective::OpSpec> again = baton::wire::FromProto(again_request);
  Check(again.ok() && *again == *spec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf would complain on stderr about every string field that is not UTF-8.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks the wire (so one corpus serves both), the second the world and rank.
  const int world = 1 + data[1] % 16;
  const int rank = (data[1] >> 4) % world;
  if (data[0] % 2 == 0) {
    Channel(data + 2, size - 2, world, rank);
  } else {
    Proto(data + 2, size - 2, world, rank);
  }
  return 0;
}
