#pragma once

// One call of libbaton's API: the operation as every layer describes it (collective::OpSpec,
// which the wire codecs encode) and this rank's buffers with the elements the operation reads
// from send and writes to recv. The builders fill the spec from the API's arguments and validate
// it before anything is submitted (roots and peers in range, counts that overflow, all_to_all_v
// arrays of the wrong length or with overlapping blocks), failing with InvalidArgument and a
// message saying what is wrong. Internal to libbaton.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lib/client_core.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "collective/op_spec.h"

namespace baton::core {

struct Call {
  collective::OpSpec spec;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t send_elements = 0;  // read from send (spec.SendElements for this rank)
  uint64_t recv_elements = 0;  // written to recv (spec.RecvElements for this rank)
  // Stream-ordered calls (CallOptions::on_stream): the value the stream waits for, and the
  // event slot recorded on it; 0 and 0 otherwise.
  uint32_t stream_value = 0;
  uint32_t event_slot = 0;
  // Not OK: the builder refused the call with this error; only `spec.collective` is set. It still
  // runs in its place among the rank's calls, to report the refusal in order.
  absl::Status refused;
};

// Builds the calls of one rank (`rank` of `world_size`) from operations (client_core.h): the
// fields the collective reads go into its spec, the others are left at their defaults, and the
// spec is validated for this rank.
class CallBuilder {
 public:
  CallBuilder(int world_size, int rank) : world_size_(world_size), rank_(rank) {}

  absl::StatusOr<Call> Build(const Operation& op) const;

 private:
  const int world_size_;
  const int rank_;
};

// Checks what every call needs, whatever its collective: an element type with a size, byte
// counts that fit a size_t, and buffers where bytes are read or written. Returns the bytes read
// from send and written to recv.
struct CallBytes {
  size_t send = 0;
  size_t recv = 0;
};
absl::StatusOr<CallBytes> CheckBuffers(const Call& call);

}  // namespace baton::core
