#pragma once

// Device memory staged into host memory while the schedule already runs on it (the input half
// of pipelined staging, collective/device_staging.h): a thread copies the input chunk by chunk,
// the chunks someone waits for first, and the operation's endpoint and kernels are wrapped so
// that every send, receive and element-wise call touching the host copy waits for the chunks it
// covers, and no longer. The first chunk can be on the wire while the rest is still being copied;
// what crosses daemons is unchanged, so a daemon staging device memory runs the same algorithm as
// one holding host memory.
//
// The wrappers see only what goes through the endpoint and the kernels: an algorithm that read
// the host copy directly would race the copies. The all_reduce algorithms (ring, tree, doubling,
// halving-doubling) touch their buffer only through them, and they are what this stages.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/kernels.h"
#include "transport/forwarding_endpoint.h"

namespace baton::collective {

class StagedInput {
 public:
  // Copies device memory to the host, done when it returns (DeviceAccess::copy).
  using CopyFn = std::function<absl::Status(void* dst, const void* src, size_t bytes)>;

  // Starts copying `bytes` at `device` into `host` in chunks of `chunk_bytes`. A copy that fails
  // fails every wait from then on with its error; waits give up at `deadline`.
  StagedInput(std::byte* host, const std::byte* device, size_t bytes, size_t chunk_bytes,
              CopyFn copy, absl::Time deadline);
  StagedInput(const StagedInput&) = delete;
  StagedInput& operator=(const StagedInput&) = delete;
  // Stops after the chunk being copied and joins the thread.
  ~StagedInput();

  // Waits until every byte of [data, data + bytes) that lies in the host copy has arrived
  // (at once for memory outside it). The copy's error, or DeadlineExceeded.
  absl::Status Await(const void* data, size_t bytes);
  // Waits for the whole copy.
  absl::Status AwaitAll() { return Await(host_, bytes_); }

  // How many chunks were copied out of address order because something waited for them.
  size_t chunks_on_demand() const { return on_demand_.load(std::memory_order_relaxed); }
  // How many Await calls are blocked now.
  int waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  void CopyChunks();
  // The chunk to copy next: the first one waited for and not copied, else the next in order.
  size_t NextChunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::byte* const host_;
  const std::byte* const device_;
  const size_t bytes_;
  const size_t chunk_bytes_;
  const size_t chunks_;
  const CopyFn copy_;
  const absl::Time deadline_;

  absl::Mutex mu_;
  std::vector<bool> copied_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> wanted_ ABSL_GUARDED_BY(mu_);  // chunks waited for, oldest first
  size_t next_in_order_ ABSL_GUARDED_BY(mu_) = 0;
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<size_t> on_demand_{0};
  std::atomic<int> waiting_{0};
  std::thread thread_;
};

// The operation's endpoint, waiting for the staged input before every send from it and every
// receive into it (a receive posted before the copy of its range would be overwritten by it).
// Receives whose consumer writes into the input (PostConsume) wait in the kernels instead.
class StagingEndpoint final : public transport::ForwardingEndpoint {
 public:
  StagingEndpoint(transport::Endpoint* inner, StagedInput* input)
      : ForwardingEndpoint(inner), input_(input) {}

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override;
  absl::Status SendRegion(const std::string& peer, const transport::Tag& tag,
                          const transport::RegionSlice& slice, absl::Time deadline) override;
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override;
  std::unique_ptr<transport::PostedRecv> PostRecvRegion(const std::string& peer,
                                                        const transport::Tag& tag,
                                                        const transport::RegionSlice& slice,
                                                        absl::Time deadline,
                                                        ArrivalCallback on_arrival) override;

 private:
  StagedInput* const input_;
};

// Kernels that wait for the staged input before reading or writing it, then run `inner`'s. The
// kernels return nothing, so a failed wait is kept (the first one) and the call skipped;
// error() is checked after the schedule, before its result is trusted.
class StagingKernels final : public Kernels {
 public:
  StagingKernels(const Kernels* inner, StagedInput* input) : inner_(inner), input_(input) {}

  transport::MemoryKind memory() const override { return inner_->memory(); }
  void ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                  size_t count) const override;
  void ReduceMany(DataType type, ReduceOp op, void* dst, std::span<const void* const> srcs,
                  size_t count) const override;
  void Divide(DataType type, void* data, size_t count, int divisor) const override;
  void Copy(void* dst, const void* src, size_t bytes) const override;
  void Zero(void* dst, size_t bytes) const override;

  absl::Status error() const;

 private:
  // Awaits every range; false (and the error kept) if one failed.
  bool Ready(std::initializer_list<std::pair<const void*, size_t>> ranges) const;

  const Kernels* const inner_;
  StagedInput* const input_;
  mutable absl::Mutex mu_;
  mutable absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::collective
