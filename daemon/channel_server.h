#pragma once

// The daemon's side of one rank's submission channel (common/submission_channel.h): a thread
// that waits for the rank's next operation in shared memory, runs it, and writes the result back.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shared_memory.h"
#include "common/submission_channel.h"
#include "daemon/collective_call.h"

namespace baton::daemon {

class ChannelServer {
 public:
  // Runs one decoded call and returns the algorithm that ran (Node::RunCollective).
  using Runner = std::function<absl::StatusOr<std::string>(const CollectiveCall&)>;

  // Serves the channel page at the start of `memory` (a buffer the client registered, at least
  // channel::kChannelBytes long). Calls run as rank `rank` of communicator `comm_tag` in session
  // `session_id`; what the page holds cannot change that. InvalidArgument if the memory is too
  // small or the page is not a channel of this version.
  static absl::StatusOr<std::unique_ptr<ChannelServer>> Open(std::shared_ptr<SharedMemory> memory,
                                                             uint64_t session_id, uint64_t comm_tag,
                                                             int rank, Runner run,
                                                             absl::Duration spin);

  // Stops serving and joins the thread (after the operation it is running, if any, returns).
  ~ChannelServer();
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  uint64_t session_id() const { return session_id_; }
  uint64_t comm_tag() const { return comm_tag_; }
  int rank() const { return rank_; }

  // Decodes a descriptor, and for all_to_all_v the page's counts (`vectors`), into a call;
  // InvalidArgument for values outside the enumerations or more than kMaxVectorRanks counts.
  static absl::StatusOr<CollectiveCall> Decode(const channel::OpDescriptor& op,
                                               const channel::VectorTail& vectors);

 private:
  ChannelServer(std::shared_ptr<SharedMemory> memory, uint64_t session_id, uint64_t comm_tag,
                int rank, Runner run, absl::Duration spin);
  // Serves submissions after the one numbered `seen`.
  void Serve(uint32_t seen);

  const std::shared_ptr<SharedMemory> memory_;
  channel::Layout* const page_;
  const uint64_t session_id_;
  const uint64_t comm_tag_;
  const int rank_;
  const Runner run_;
  const absl::Duration spin_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace baton::daemon
