#include "collective/registered_memory.h"

#include <algorithm>
#include <cassert>
#include <new>
#include <utility>

#include "spdlog/spdlog.h"

namespace baton::collective {
namespace {

constexpr size_t kPageBytes = 4096;

bool Holds(const transport::MemoryRegion& region, const std::byte* data, size_t length) {
  const transport::ByteSpan bytes = region.bytes();
  return data >= bytes.data() && length <= bytes.size() &&
         static_cast<size_t>(data - bytes.data()) <= bytes.size() - length;
}

transport::RegionSlice SliceOf(const transport::MemoryRegion& region, const std::byte* data,
                               size_t length) {
  return transport::RegionSlice{&region, static_cast<size_t>(data - region.bytes().data()), length};
}

}  // namespace

void RegionTable::Add(const transport::MemoryRegion* region) {
  if (region == nullptr) return;
  auto at =
      std::lower_bound(regions_.begin(), regions_.end(), region,
                       [](const transport::MemoryRegion* a, const transport::MemoryRegion* b) {
                         return a->bytes().data() < b->bytes().data();
                       });
  regions_.insert(at, region);
}

std::optional<transport::RegionSlice> RegionTable::Find(const void* data, size_t length) const {
  const auto* bytes = static_cast<const std::byte*>(data);
  // Regions may overlap (two ranks' views of one buffer): look at every one that starts at or
  // before `data`, nearest first. There are a handful per operation.
  auto after = std::upper_bound(regions_.begin(), regions_.end(), bytes,
                                [](const std::byte* at, const transport::MemoryRegion* region) {
                                  return at < region->bytes().data();
                                });
  for (auto it = after; it != regions_.begin();) {
    --it;
    if (Holds(**it, bytes, length)) return SliceOf(**it, bytes, length);
  }
  return std::nullopt;
}

// ---- RegionSet --------------------------------------------------------------------------------

std::shared_ptr<void> RegionSet::Hold(std::unique_ptr<transport::MemoryRegion> region) {
  const transport::MemoryRegion* held = region.get();
  {
    absl::MutexLock lock(&mu_);
    regions_.push_back(held);
  }
  return std::shared_ptr<void>(region.release(), [this](void* gone) {
    auto* region = static_cast<transport::MemoryRegion*>(gone);
    {
      absl::MutexLock lock(&mu_);
      regions_.erase(std::find(regions_.begin(), regions_.end(), region));
    }
    delete region;  // deregistered once no send can find it
  });
}

std::optional<transport::RegionSlice> RegionSet::Find(const void* data, size_t length) const {
  const auto* bytes = static_cast<const std::byte*>(data);
  absl::MutexLock lock(&mu_);
  for (const transport::MemoryRegion* region : regions_) {
    if (Holds(*region, bytes, length)) return SliceOf(*region, bytes, length);
  }
  return std::nullopt;
}

size_t RegionSet::size() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

// ---- ScratchPool ------------------------------------------------------------------------------

void ScratchPool::Buffer::Free::operator()(std::byte* memory) const {
  ::operator delete (memory, std::align_val_t{kPageBytes});
}

ScratchPool::ScratchPool(transport::Endpoint* endpoint, size_t keep_bytes)
    : endpoint_(endpoint), keep_bytes_(keep_bytes) {}

ScratchPool::~ScratchPool() {
  absl::MutexLock lock(&mu_);
  assert(lent_.empty() && "a scratch buffer outlived its pool");
}

ScratchPool::Buffer::Buffer(ScratchPool* pool, std::unique_ptr<Block> block)
    : pool_(pool), block_(std::move(block)), data_(block_->memory.get()), size_(block_->size) {}

ScratchPool::Buffer::Buffer(Buffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      block_(std::move(other.block_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

ScratchPool::Buffer& ScratchPool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Buffer gone(std::move(*this));
    pool_ = std::exchange(other.pool_, nullptr);
    block_ = std::move(other.block_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ScratchPool::Buffer::~Buffer() {
  if (pool_ != nullptr && block_ != nullptr) pool_->Return(std::move(block_));
}

ScratchPool::Buffer ScratchPool::Take(size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    // The smallest idle buffer that holds `bytes` without wasting more than as much again.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      const size_t size = (*it)->size;
      if (size >= bytes && size / 2 <= std::max(bytes, kPageBytes) &&
          (best == idle_.end() || size < (*best)->size)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      std::unique_ptr<Buffer::Block> block = std::move(*best);
      idle_.erase(best);
      idle_bytes_ -= block->size;
      lent_.push_back(block.get());
      return Buffer(this, std::move(block));
    }
  }
  std::unique_ptr<Buffer::Block> block = Allocate(bytes);
  if (endpoint_ != nullptr) {
    absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> region = endpoint_->RegisterMemory(
        transport::ByteSpan(block->memory.get(), block->size), transport::MemoryKind::kHost);
    if (region.ok()) {
      block->region = *std::move(region);
    } else {
      // Still usable: the transport copies what it sends from it (counted as unregistered).
      spdlog::warn("scratch memory of {} bytes is not registered with the data plane: {}",
                   block->size, region.status().ToString());
    }
  }
  absl::MutexLock lock(&mu_);
  ++allocations_;
  lent_.push_back(block.get());
  return Buffer(this, std::move(block));
}

std::unique_ptr<ScratchPool::Buffer::Block> ScratchPool::Allocate(size_t bytes) {
  auto block = std::make_unique<Buffer::Block>();
  block->size = std::max(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  // Whole pages: what a transport that pins memory registers anyway.
  block->memory.reset(
      static_cast<std::byte*>(::operator new (block->size, std::align_val_t{kPageBytes})));
  return block;
}

ScratchPool::Buffer ScratchPool::Unpooled(size_t bytes) { return Buffer(nullptr, Allocate(bytes)); }

void ScratchPool::Return(std::unique_ptr<Buffer::Block> block) {
  std::unique_ptr<Buffer::Block> freed;  // deregistered and freed after the lock is released
  absl::MutexLock lock(&mu_);
  lent_.erase(std::find(lent_.begin(), lent_.end(), block.get()));
  if (idle_bytes_ + block->size > keep_bytes_) {
    freed = std::move(block);
    return;
  }
  idle_bytes_ += block->size;
  idle_.push_back(std::move(block));
}

std::optional<transport::RegionSlice> ScratchPool::Find(const void* data, size_t length) const {
  const auto* bytes = static_cast<const std::byte*>(data);
  absl::MutexLock lock(&mu_);
  for (const Buffer::Block* block : lent_) {
    if (block->region != nullptr && Holds(*block->region, bytes, length)) {
      return SliceOf(*block->region, bytes, length);
    }
  }
  return std::nullopt;
}

uint64_t ScratchPool::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

size_t ScratchPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

ScratchPool::Buffer TakeScratch(const OpContext& ctx, size_t bytes) {
  if (ctx.scratch != nullptr) return ctx.scratch->Take(bytes);
  return ScratchPool::Unpooled(bytes);
}

// ---- RegisteredEndpoint -----------------------------------------------------------------------

std::optional<transport::RegionSlice> RegisteredEndpoint::Find(const void* data,
                                                               size_t length) const {
  for (const RegionLookup* lookup : lookups_) {
    if (lookup == nullptr) continue;
    if (std::optional<transport::RegionSlice> found = lookup->Find(data, length)) return found;
  }
  return std::nullopt;
}

absl::Status RegisteredEndpoint::Send(const std::string& peer, const transport::Tag& tag,
                                      transport::ConstByteSpan data, absl::Time deadline) {
  if (!data.empty()) {
    if (std::optional<transport::RegionSlice> slice = Find(data.data(), data.size())) {
      return ForwardingEndpoint::SendRegion(peer, tag, *slice, deadline);
    }
    unregistered_.fetch_add(data.size(), std::memory_order_relaxed);
  }
  return ForwardingEndpoint::Send(peer, tag, data, deadline);
}

absl::Status RegisteredEndpoint::SendAll(const std::string& peer,
                                         std::span<const transport::OutMessage> messages,
                                         absl::Time deadline) {
  std::vector<transport::OutMessage> named(messages.begin(), messages.end());
  for (transport::OutMessage& message : named) {
    if (message.region != nullptr || message.data.empty()) continue;
    if (std::optional<transport::RegionSlice> slice =
            Find(message.data.data(), message.data.size())) {
      message.region = slice->region;
    } else {
      unregistered_.fetch_add(message.data.size(), std::memory_order_relaxed);
    }
  }
  return ForwardingEndpoint::SendAll(peer, named, deadline);
}

std::unique_ptr<transport::PostedRecv> RegisteredEndpoint::PostRecv(const std::string& peer,
                                                                    const transport::Tag& tag,
                                                                    transport::ByteSpan data,
                                                                    absl::Time deadline,
                                                                    ArrivalCallback on_arrival) {
  if (!data.empty()) {
    if (std::optional<transport::RegionSlice> slice = Find(data.data(), data.size())) {
      return ForwardingEndpoint::PostRecvRegion(peer, tag, *slice, deadline, std::move(on_arrival));
    }
    unregistered_.fetch_add(data.size(), std::memory_order_relaxed);
  }
  return ForwardingEndpoint::PostRecv(peer, tag, data, deadline, std::move(on_arrival));
}

}  // namespace baton::collective
