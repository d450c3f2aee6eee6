#pragma once

// The wire forms of one operation (collective::OpSpec), both ways, for the two ways a rank
// submits it: the gRPC CollectiveRequest and the submission channel's descriptor (plus the page's
// tail of per-peer counts for all_to_all_v). libbaton encodes with these and batond decodes with
// them, so a field is added in one place. The signature the daemons exchange has its codec next
// to the spec (collective::Signature).
//
// Decoding checks what the wire can get wrong (unknown names or enumeration values, more
// all_to_all_v counts than the channel's page holds) and fails with InvalidArgument saying
// which; whether the operation makes sense for a rank is OpSpec::Validate's. Buffers (ids and
// offsets), the rank and the timeout are the caller's: they are not part of the operation. The
// buffers' memory kinds are host on both wires until device buffers are added to them.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/v1/baton.pb.h"
#include "collective/op_spec.h"
#include "common/submission_channel.h"

namespace baton::wire {

// The proto's name of a collective, and back (nullopt for UNSPECIFIED and unknown values).
v1::CollectiveOp ProtoOp(collective::Collective collective);
std::optional<collective::Collective> FromProtoOp(v1::CollectiveOp op);

// Sets the operation's fields of `request` (op, data_type, reduce_op, count, root, peer, the
// all_to_all_v arrays, algorithm); leaves the others as they are.
void ToProto(const collective::OpSpec& spec, v1::CollectiveRequest* request);
absl::StatusOr<collective::OpSpec> FromProto(const v1::CollectiveRequest& request);

// Whether the channel can carry `spec` (all_to_all_v with at most channel::kMaxVectorRanks
// entries per array); the gRPC request carries anything.
bool FitsChannel(const collective::OpSpec& spec);

// Sets the operation's fields of `op` and, for all_to_all_v, `tail`; InvalidArgument when the
// spec does not fit the channel.
absl::Status ToChannel(const collective::OpSpec& spec, channel::OpDescriptor* op,
                       channel::VectorTail* tail);
// `tail` is read for all_to_all_v only, and its entry count once (the client may write the page
// while the daemon reads it).
absl::StatusOr<collective::OpSpec> FromChannel(const channel::OpDescriptor& op,
                                               const channel::VectorTail& tail);

}  // namespace baton::wire
