#pragma once

// One call of libbaton's API as the daemon will see it: which collective, which of this rank's
// buffers it reads and writes and how many elements of each, and the per-peer counts of
// all_to_all_v. The builders check what the client can check before anything is submitted
// (roots and peers in range, counts that overflow, vectors of the wrong length) and fail with
// InvalidArgument and a message saying what is wrong. Internal to libbaton.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"

namespace baton::core {

struct Call {
  collective::Collective kind = collective::Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;       // the request's count (see CollectiveRequest.count in the proto)
  size_t send_count = 0;  // elements read from send (the span, for all_to_all_v)
  size_t recv_count = 0;  // elements written to recv (the span, for all_to_all_v)
  collective::DataType type = collective::DataType::kUint8;
  collective::ReduceOp reduce_op = collective::ReduceOp::kSum;
  int root = 0;
  int peer = 0;
  bool reads_send = false;   // this rank's send is read
  bool writes_recv = false;  // this rank's recv is written
  // all_to_all_v only: world_size entries each, in elements.
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> send_displs;
  std::vector<uint64_t> recv_counts;
  std::vector<uint64_t> recv_displs;
};

// Builds the calls of one rank (`rank` of `world_size`); see client_core.h for each contract.
class CallBuilder {
 public:
  CallBuilder(int world_size, int rank) : world_size_(world_size), rank_(rank) {}

  absl::StatusOr<Call> AllReduce(const void* send, void* recv, size_t count,
                                 collective::DataType type, collective::ReduceOp op) const;
  absl::StatusOr<Call> ReduceScatter(const void* send, void* recv, size_t recv_count,
                                     collective::DataType type, collective::ReduceOp op) const;
  absl::StatusOr<Call> AllGather(const void* send, void* recv, size_t send_count,
                                 collective::DataType type) const;
  absl::StatusOr<Call> Broadcast(const void* send, void* recv, size_t count,
                                 collective::DataType type, int root) const;
  absl::StatusOr<Call> Reduce(const void* send, void* recv, size_t count, collective::DataType type,
                              collective::ReduceOp op, int root) const;
  absl::StatusOr<Call> AllToAll(const void* send, void* recv, size_t count,
                                collective::DataType type) const;
  absl::StatusOr<Call> Barrier() const;
  absl::StatusOr<Call> Gather(const void* send, void* recv, size_t count, collective::DataType type,
                              int root) const;
  absl::StatusOr<Call> Scatter(const void* send, void* recv, size_t count,
                               collective::DataType type, int root) const;
  absl::StatusOr<Call> AllToAllV(const void* send, const std::vector<size_t>& send_counts,
                                 const std::vector<size_t>& send_displs, void* recv,
                                 const std::vector<size_t>& recv_counts,
                                 const std::vector<size_t>& recv_displs,
                                 collective::DataType type) const;
  absl::StatusOr<Call> Send(const void* send, size_t count, collective::DataType type,
                            int peer) const;
  absl::StatusOr<Call> Recv(void* recv, size_t count, collective::DataType type, int peer) const;

 private:
  absl::StatusOr<size_t> Times(size_t count) const;
  absl::Status CheckRoot(int root) const;
  absl::Status CheckPeer(int peer) const;
  // The elements a buffer must span for blocks (counts[j] from displs[j]), or why there is no
  // such span; `what` names the buffer ("send", "recv") in messages.
  absl::StatusOr<size_t> Span(const std::vector<size_t>& counts, const std::vector<size_t>& displs,
                              const char* what) const;

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
