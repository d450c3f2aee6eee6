#include "collective/staged_input.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton::collective {
namespace {

// The chunks [first, last] of a copy of `size` bytes at `base` in chunks of `chunk` bytes that
// [data, data + bytes) covers; false when it misses the copy.
bool ChunkRange(const std::byte* base, size_t size, size_t chunk, const void* data, size_t bytes,
                size_t& first, size_t& last) {
  const auto* begin = static_cast<const std::byte*>(data);
  if (bytes == 0 || begin == nullptr || begin >= base + size || begin + bytes <= base) {
    return false;
  }
  first = static_cast<size_t>(std::max(begin, base) - base) / chunk;
  last = (static_cast<size_t>(std::min(begin + bytes, base + size) - base) - 1) / chunk;
  return true;
}

}  // namespace

StagedInput::StagedInput(std::byte* host, const std::byte* device, size_t bytes, size_t chunk_bytes,
                         CopyFn copy, absl::Time deadline)
    : host_(host),
      device_(device),
      bytes_(bytes),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      chunks_((bytes + chunk_bytes_ - 1) / chunk_bytes_),
      copy_(std::move(copy)),
      deadline_(deadline),
      copied_(chunks_, false),
      remaining_(chunks_) {
  if (chunks_ > 0) thread_ = std::thread([this] { CopyChunks(); });
}

StagedInput::~StagedInput() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

size_t StagedInput::NextChunk() {
  while (copied_[next_in_order_]) ++next_in_order_;  // remaining_ > 0: one is not copied
  while (!wanted_.empty()) {
    const size_t chunk = wanted_.front();
    wanted_.erase(wanted_.begin());
    if (copied_[chunk]) continue;
    if (chunk != next_in_order_) on_demand_.fetch_add(1, std::memory_order_relaxed);
    return chunk;
  }
  return next_in_order_;
}

void StagedInput::CopyChunks() {
  while (true) {
    size_t chunk = 0;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || remaining_ == 0 || !error_.ok()) return;
      chunk = NextChunk();
    }
    const size_t offset = chunk * chunk_bytes_;
    const size_t length = std::min(chunk_bytes_, bytes_ - offset);
    absl::Status copied = copy_(host_ + offset, device_ + offset, length);
    absl::MutexLock lock(&mu_);
    if (!copied.ok()) {
      error_ = absl::Status(copied.code(),
                            absl::StrCat("staging ", length, " bytes at offset ", offset,
                                         " of device memory to the host: ", copied.message()));
      return;
    }
    copied_[chunk] = true;
    --remaining_;
  }
}

absl::Status StagedInput::Await(const void* data, size_t bytes) {
  size_t first = 0;
  size_t last = 0;
  if (!ChunkRange(host_, bytes_, chunk_bytes_, data, bytes, first, last)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  for (size_t chunk = first; chunk <= last; ++chunk) {
    if (!copied_[chunk]) wanted_.push_back(chunk);
  }
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (!error_.ok()) return true;
    for (size_t chunk = first; chunk <= last; ++chunk) {
      if (!copied_[chunk]) return false;
    }
    return true;
  };
  waiting_.fetch_add(1, std::memory_order_relaxed);
  const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&ready), deadline_);
  waiting_.fetch_sub(1, std::memory_order_relaxed);
  if (!in_time) {
    return absl::DeadlineExceededError(
        "the operation's deadline passed while device memory was being staged to the host");
  }
  return error_;
}

// ---- StagedOutput ---------------------------------------------------------------------------

StagedOutput::StagedOutput(const std::byte* host, std::byte* device, size_t bytes,
                           size_t chunk_bytes, CopyFn copy)
    : host_(host),
      device_(device),
      bytes_(bytes),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      chunks_((bytes + chunk_bytes_ - 1) / chunk_bytes_),
      copy_(std::move(copy)),
      dirty_(chunks_, false),
      copied_(chunks_, false),
      writers_(chunks_, 0) {
  if (chunks_ > 0) thread_ = std::thread([this] { CopyChunks(); });
}

StagedOutput::~StagedOutput() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool StagedOutput::ChunksOf(const void* data, size_t bytes, size_t& first, size_t& last) const {
  return ChunkRange(host_, bytes_, chunk_bytes_, data, bytes, first, last);
}

void StagedOutput::Written(const void* data, size_t bytes, bool now) {
  size_t first = 0;
  size_t last = 0;
  if (!ChunksOf(data, bytes, first, last)) return;
  absl::MutexLock lock(&mu_);
  for (size_t chunk = first; chunk <= last; ++chunk) {
    if (writers_[chunk] > 0) --writers_[chunk];
    dirty_[chunk] = true;
    if (now) queue_.push_back(chunk);
  }
}

void StagedOutput::BeforeWrite(const void* data, size_t bytes) {
  size_t first = 0;
  size_t last = 0;
  if (!ChunksOf(data, bytes, first, last)) return;
  absl::MutexLock lock(&mu_);
  auto apart = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return copying_ == SIZE_MAX || copying_ < first || copying_ > last;
  };
  if (!apart()) {
    writers_waiting_.fetch_add(1, std::memory_order_relaxed);
    mu_.Await(absl::Condition(&apart));
    writers_waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  for (size_t chunk = first; chunk <= last; ++chunk) ++writers_[chunk];
}

absl::Status StagedOutput::CopyChunk(size_t chunk) {
  const size_t offset = chunk * chunk_bytes_;
  const size_t length = std::min(chunk_bytes_, bytes_ - offset);
  absl::Status copied = copy_(device_ + offset, host_ + offset, length);
  if (copied.ok()) return copied;
  return absl::Status(copied.code(),
                      absl::StrCat("copying ", length, " bytes at offset ", offset,
                                   " of the result back to device memory: ", copied.message()));
}

void StagedOutput::CopyChunks() {
  while (true) {
    size_t chunk = 0;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (stopping_ || !error_.ok()) return;
      chunk = queue_.front();
      queue_.erase(queue_.begin());
      if (!dirty_[chunk]) continue;  // copied since it was queued
      // Being written: its Written marks it again (and queues it, for a receive), or Finish
      // copies it.
      if (writers_[chunk] > 0) continue;
      // Cleared before the copy: a write that ends after this marks it again.
      dirty_[chunk] = false;
      copied_[chunk] = true;
      copying_ = chunk;
    }
    absl::Status copied = CopyChunk(chunk);
    early_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    copying_ = SIZE_MAX;
    if (!copied.ok()) {
      if (error_.ok()) error_ = std::move(copied);
      return;
    }
  }
}

absl::Status StagedOutput::Finish() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  for (size_t chunk = 0; chunk < chunks_; ++chunk) {
    if (copied_[chunk] && !dirty_[chunk]) continue;
    BATON_RETURN_IF_ERROR(CopyChunk(chunk));
    dirty_[chunk] = false;
    copied_[chunk] = true;
    ++at_finish_;
  }
  return absl::OkStatus();
}

// ---- StagingEndpoint ------------------------------------------------------------------------

transport::Endpoint::ArrivalCallback StagingEndpoint::Telling(transport::ByteSpan data,
                                                              ArrivalCallback on_arrival) {
  if (output_ == nullptr) return on_arrival;
  return [output = output_, data, next = std::move(on_arrival)]() mutable {
    output->Written(data.data(), data.size(), /*now=*/true);
    if (next) std::move(next)();
  };
}

absl::Status StagingEndpoint::Send(const std::string& peer, const transport::Tag& tag,
                                   transport::ConstByteSpan data, absl::Time deadline) {
  if (absl::Status ready = input_->Await(data.data(), data.size()); !ready.ok()) return ready;
  return ForwardingEndpoint::Send(peer, tag, data, deadline);
}

absl::Status StagingEndpoint::SendAll(const std::string& peer,
                                      std::span<const transport::OutMessage> messages,
                                      absl::Time deadline) {
  for (const transport::OutMessage& message : messages) {
    if (absl::Status ready = input_->Await(message.data.data(), message.data.size()); !ready.ok()) {
      return ready;
    }
  }
  return ForwardingEndpoint::SendAll(peer, messages, deadline);
}

absl::Status StagingEndpoint::AwaitSlice(const transport::RegionSlice& slice) {
  if (slice.region == nullptr || slice.offset > slice.region->bytes().size()) {
    return absl::OkStatus();  // the transport refuses it
  }
  return input_->Await(slice.region->bytes().data() + slice.offset, slice.length);
}

std::unique_ptr<transport::PostedSend> StagingEndpoint::PostSend(
    const std::string& peer, const transport::Tag& tag, const transport::RegionSlice& slice,
    absl::Time deadline) {
  if (absl::Status ready = AwaitSlice(slice); !ready.ok()) {
    return transport::CompletedSend(std::move(ready));
  }
  return ForwardingEndpoint::PostSend(peer, tag, slice, deadline);
}

std::unique_ptr<transport::PostedSend> StagingEndpoint::PostWrite(
    const std::string& peer, uint64_t comm, const transport::RegionSlice& source,
    const transport::RemoteRegion& target, size_t target_offset, std::optional<uint32_t> notify,
    absl::Time deadline) {
  if (absl::Status ready = AwaitSlice(source); !ready.ok()) {
    return transport::CompletedSend(std::move(ready));
  }
  return ForwardingEndpoint::PostWrite(peer, comm, source, target, target_offset, notify, deadline);
}

namespace {

// Tells the staged output that the exposed range was written, once its writes have landed.
class TellingExposure final : public transport::ExposedRegion {
 public:
  TellingExposure(std::unique_ptr<transport::ExposedRegion> inner, StagedOutput* output,
                  transport::ByteSpan range)
      : inner_(std::move(inner)), output_(output), range_(range) {}
  const transport::RemoteRegion& descriptor() const override { return inner_->descriptor(); }
  absl::StatusOr<transport::WriteNotice> Wait() override {
    absl::StatusOr<transport::WriteNotice> notice = inner_->Wait();
    if (notice.ok() && !told_) {
      told_ = true;
      output_->Written(range_.data(), range_.size(), /*now=*/true);
    }
    return notice;
  }
  bool Test() override { return inner_->Test(); }

 private:
  const std::unique_ptr<transport::ExposedRegion> inner_;
  StagedOutput* const output_;
  const transport::ByteSpan range_;
  bool told_ = false;
};

}  // namespace

std::unique_ptr<transport::ExposedRegion> StagingEndpoint::ExposeRegion(
    const std::string& peer, uint64_t comm, const transport::RegionSlice& slice,
    absl::Time deadline) {
  if (absl::Status ready = AwaitSlice(slice); !ready.ok()) {
    return transport::FailedExposure(std::move(ready));
  }
  std::unique_ptr<transport::ExposedRegion> exposed =
      ForwardingEndpoint::ExposeRegion(peer, comm, slice, deadline);
  if (output_ == nullptr || slice.region == nullptr ||
      slice.offset > slice.region->bytes().size()) {
    return exposed;
  }
  const transport::ByteSpan range(slice.region->bytes().data() + slice.offset, slice.length);
  output_->BeforeWrite(range.data(), range.size());
  return std::make_unique<TellingExposure>(std::move(exposed), output_, range);
}

std::unique_ptr<transport::PostedRecv> StagingEndpoint::PostRecv(const std::string& peer,
                                                                 const transport::Tag& tag,
                                                                 transport::ByteSpan data,
                                                                 absl::Time deadline,
                                                                 ArrivalCallback on_arrival) {
  if (absl::Status ready = input_->Await(data.data(), data.size()); !ready.ok()) {
    return transport::FailedRecv(ready);
  }
  // A message already here is written into `data` while this posts it.
  if (output_ != nullptr) output_->BeforeWrite(data.data(), data.size());
  return ForwardingEndpoint::PostRecv(peer, tag, data, deadline,
                                      Telling(data, std::move(on_arrival)));
}

std::unique_ptr<transport::PostedRecv> StagingEndpoint::PostRecvRegion(
    const std::string& peer, const transport::Tag& tag, const transport::RegionSlice& slice,
    absl::Time deadline, ArrivalCallback on_arrival) {
  if (slice.region != nullptr && slice.offset <= slice.region->bytes().size()) {
    absl::Status ready = input_->Await(slice.region->bytes().data() + slice.offset, slice.length);
    if (!ready.ok()) return transport::FailedRecv(std::move(ready));
    if (output_ != nullptr) {
      output_->BeforeWrite(slice.region->bytes().data() + slice.offset, slice.length);
    }
    on_arrival =
        Telling(transport::ByteSpan(slice.region->bytes().data() + slice.offset, slice.length),
                std::move(on_arrival));
  }
  return ForwardingEndpoint::PostRecvRegion(peer, tag, slice, deadline, std::move(on_arrival));
}

// ---- StagingKernels -------------------------------------------------------------------------

bool StagingKernels::Ready(std::initializer_list<std::pair<const void*, size_t>> ranges) const {
  for (const auto& [data, bytes] : ranges) {
    absl::Status ready = input_->Await(data, bytes);
    if (ready.ok()) continue;
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(ready);
    return false;
  }
  absl::MutexLock lock(&mu_);
  return error_.ok();  // after a failure, nothing more runs
}

void StagingKernels::ReduceInto(DataType type, ReduceOp op, void* dst, const void* src,
                                size_t count) const {
  const size_t bytes = count * DataTypeSize(type);
  if (!Ready({{dst, bytes}, {src, bytes}})) return;
  Writing(dst, bytes);
  inner_->ReduceInto(type, op, dst, src, count);
  Wrote(dst, bytes);
}

void StagingKernels::ReduceMany(DataType type, ReduceOp op, void* dst,
                                std::span<const void* const> srcs, size_t count) const {
  const size_t bytes = count * DataTypeSize(type);
  for (const void* src : srcs) {
    if (!Ready({{src, bytes}})) return;
  }
  if (!Ready({{dst, bytes}})) return;
  Writing(dst, bytes);
  inner_->ReduceMany(type, op, dst, srcs, count);
  Wrote(dst, bytes);
}

void StagingKernels::Divide(DataType type, void* data, size_t count, int divisor) const {
  const size_t bytes = count * DataTypeSize(type);
  if (!Ready({{data, bytes}})) return;
  Writing(data, bytes);
  inner_->Divide(type, data, count, divisor);
  Wrote(data, bytes);
}

void StagingKernels::Copy(void* dst, const void* src, size_t bytes) const {
  if (!Ready({{dst, bytes}, {src, bytes}})) return;
  Writing(dst, bytes);
  inner_->Copy(dst, src, bytes);
  Wrote(dst, bytes);
}

void StagingKernels::Zero(void* dst, size_t bytes) const {
  if (!Ready({{dst, bytes}})) return;
  Writing(dst, bytes);
  inner_->Zero(dst, bytes);
  Wrote(dst, bytes);
}

absl::Status StagingKernels::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

}  // namespace baton::collective
