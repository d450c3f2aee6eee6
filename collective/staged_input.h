#pragma once

// Device memory staged through host memory while the schedule runs on the host copy (pipelined
// staging, collective/device_staging.h), both ways:
//   - in (StagedInput): a thread copies the input chunk by chunk, the chunks someone waits for
//     first, and the operation's endpoint and kernels are wrapped so that every send, receive
//     and element-wise call touching the host copy waits for the chunks it covers, and no
//     longer: the first chunk can be on the wire while the rest is still being copied;
//   - out (StagedOutput): every write into the host copy (a receive's arrival, a kernel call)
//     marks its chunks; another thread copies a chunk back as soon as a receive completed it
//     (the all-gather phases deliver final data that way), and Finish copies what was written
//     since (a reduction's partial result may be written again) or never copied.
// What crosses daemons is unchanged, so a daemon staging device memory runs the same algorithm
// as one holding host memory.
//
// The wrappers see only what goes through the endpoint and the kernels: an algorithm that read
// the host copy directly would race the copies. The all_reduce algorithms (ring, tree, doubling,
// halving-doubling) touch their buffer only through them, and they are what this stages.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "device/kernels.h"
#include "transport/forwarding_endpoint.h"

namespace baton::collective {

class StagedInput {
 public:
  // Copies device memory to the host, done when it returns (device::OperationDevice::Copy).
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

// The host copy's way back to device memory: chunks written by the schedule are copied back, on
// a thread of their own as soon as they are marked final-looking (a receive completed them), the
// rest by Finish.
class StagedOutput {
 public:
  using CopyFn = StagedInput::CopyFn;

  // Copies [host, host + bytes) back to `device` in chunks of `chunk_bytes`.
  StagedOutput(const std::byte* host, std::byte* device, size_t bytes, size_t chunk_bytes,
               CopyFn copy);
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;
  ~StagedOutput();

  // A write into [data, data + bytes) of the host copy (memory outside it is ignored) begins: a
  // kernel call, or a receive from its posting until it arrived. Waits until no copy back is
  // reading its chunks, and keeps copies back off them until the matching Written, so that the
  // two never touch the same bytes at once (the chunk is copied again after the write anyway).
  void BeforeWrite(const void* data, size_t bytes);
  // The write BeforeWrite began ended; `now`: copy its chunks back at once (they are likely
  // final), else at Finish unless written again. A write that never ends (a receive that failed)
  // only keeps its chunks from going back before Finish.
  void Written(const void* data, size_t bytes, bool now);

  // Stops the thread and copies back every chunk written since it was last copied, or never
  // copied; afterwards the device holds the host copy. The first copy error.
  absl::Status Finish();

  // Chunks copied back before Finish, and by it.
  size_t chunks_early() const { return early_.load(std::memory_order_relaxed); }
  size_t chunks_at_finish() const { return at_finish_; }
  // How many BeforeWrite calls are blocked now, waiting for a copy back.
  int writers_waiting() const { return writers_waiting_.load(std::memory_order_relaxed); }

 private:
  void CopyChunks();
  absl::Status CopyChunk(size_t chunk);
  // The chunks [first, last] that [data, data + bytes) covers; false when it misses the copy.
  bool ChunksOf(const void* data, size_t bytes, size_t& first, size_t& last) const;

  const std::byte* const host_;
  std::byte* const device_;
  const size_t bytes_;
  const size_t chunk_bytes_;
  const size_t chunks_;
  const CopyFn copy_;

  absl::Mutex mu_;
  std::vector<bool> dirty_ ABSL_GUARDED_BY(mu_);   // written since last copied
  std::vector<bool> copied_ ABSL_GUARDED_BY(mu_);  // copied at least once
  std::vector<int> writers_ ABSL_GUARDED_BY(mu_);  // writes begun and not ended
  std::vector<size_t> queue_ ABSL_GUARDED_BY(mu_);
  size_t copying_ ABSL_GUARDED_BY(mu_) = SIZE_MAX;  // the chunk being copied back, if any
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<size_t> early_{0};
  std::atomic<int> writers_waiting_{0};
  size_t at_finish_ = 0;
  std::thread thread_;
};

// The operation's endpoint, waiting for the staged input before every send from it and every
// receive into it (a receive posted before the copy of its range would be overwritten by it), and
// telling the staged output (if any) that each receive writes its range, from its posting until
// it arrived. Receives whose consumer writes into
// the copy (PostConsume) wait and tell in the kernels instead.
class StagingEndpoint final : public transport::ForwardingEndpoint {
 public:
  StagingEndpoint(transport::Endpoint* inner, StagedInput* input, StagedOutput* output = nullptr)
      : ForwardingEndpoint(inner), input_(input), output_(output) {}

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override;
  std::unique_ptr<transport::PostedSend> PostSend(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  const transport::RegionSlice& slice,
                                                  absl::Time deadline) override;
  std::unique_ptr<transport::PostedSend> PostWrite(const std::string& peer, uint64_t comm,
                                                   const transport::RegionSlice& source,
                                                   const transport::RemoteRegion& target,
                                                   size_t target_offset,
                                                   std::optional<uint32_t> notify,
                                                   absl::Time deadline) override;
  // Waits for the input as a receive into the range would, and tells the output once the
  // exposure's writes have landed.
  std::unique_ptr<transport::ExposedRegion> ExposeRegion(const std::string& peer, uint64_t comm,
                                                         const transport::RegionSlice& slice,
                                                         absl::Time deadline) override;
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
  // `on_arrival`, preceded by telling the output that the write into `data` ended.
  ArrivalCallback Telling(transport::ByteSpan data, ArrivalCallback on_arrival);
  // Waits for the staged input of the bytes `slice` names, if they lie in its region.
  absl::Status AwaitSlice(const transport::RegionSlice& slice);

  StagedInput* const input_;
  StagedOutput* const output_;
};

// device::Kernels that wait for the staged input before reading or writing it, run `inner`'s, and
// tell the staged output (if any) what they wrote (to be copied back at Finish: a reduction's
// result may be partial). The kernels return nothing, so a failed wait is kept (the first one) and
// the call skipped; error() is checked after the schedule, before its result is trusted.
class StagingKernels final : public device::Kernels {
 public:
  StagingKernels(const device::Kernels* inner, StagedInput* input, StagedOutput* output = nullptr)
      : inner_(inner), input_(input), output_(output) {}

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

  void Writing(const void* data, size_t bytes) const {
    if (output_ != nullptr) output_->BeforeWrite(data, bytes);
  }
  void Wrote(const void* data, size_t bytes) const {
    if (output_ != nullptr) output_->Written(data, bytes, /*now=*/false);
  }

  const device::Kernels* const inner_;
  StagedInput* const input_;
  StagedOutput* const output_;
  mutable absl::Mutex mu_;
  mutable absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::collective
