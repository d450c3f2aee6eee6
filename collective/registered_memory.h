#pragma once

// Registered memory as the collectives' data path. Every buffer an operation moves is registered
// with the daemon's data plane once (Endpoint::RegisterMemory), so that a transport that must pin
// or map memory (verbs, CUDA IPC) pays once per buffer and never per message:
//   - the ranks' buffers, when the daemon maps them (daemon/session_registry.h), handed to the
//     operation as its RegionTable;
//   - the algorithms' scratch (what they receive into and reduce in), taken from a ScratchPool
//     whose buffers are registered when allocated and reused by later operations.
// The algorithms keep naming memory by pointer; RegisteredEndpoint, the operation's endpoint,
// turns each send and receive of memory that lies in a registered region into the call that
// names the region (SendRegion, PostRecvRegion, OutMessage::region), and counts the bytes of any
// that does not (unregistered_bytes: a transport that moves registered memory only copies them).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "collective/op_context.h"
#include "transport/forwarding_endpoint.h"
#include "transport/transport.h"

namespace baton::collective {

// Where RegisteredEndpoint looks for the registration of the memory a send or receive names.
class RegionLookup {
 public:
  virtual ~RegionLookup() = default;
  // The slice of a registered region that holds all of the `length` bytes at `data`, or nullopt.
  virtual std::optional<transport::RegionSlice> Find(const void* data, size_t length) const = 0;
};

// The registered regions an operation's buffers lie in. Not owned; the caller keeps them
// registered while the operation runs. Add and Clear between operations, Find from any thread
// during one (it does not change meanwhile).
class RegionTable final : public RegionLookup {
 public:
  void Add(const transport::MemoryRegion* region);  // null is ignored
  void Clear() { regions_.clear(); }
  bool empty() const { return regions_.empty(); }

  std::optional<transport::RegionSlice> Find(const void* data, size_t length) const override;

 private:
  std::vector<const transport::MemoryRegion*> regions_;  // by start address
};

// Registered regions that come and go while operations run (the daemon's staging memory, which
// its pinned pool registers with the data plane when it makes a buffer). Thread-safe.
class RegionSet final : public RegionLookup {
 public:
  // Keeps `region` (not null) findable until the returned handle goes; the handle owns it.
  std::shared_ptr<void> Hold(std::unique_ptr<transport::MemoryRegion> region)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<transport::RegionSlice> Find(const void* data, size_t length) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::vector<const transport::MemoryRegion*> regions_ ABSL_GUARDED_BY(mu_);
};

// Scratch memory for the algorithms, registered with an endpoint when allocated and kept for
// later operations, up to `keep_bytes` of idle buffers (beyond that a returned buffer is
// deregistered and freed). One per daemon, shared by its communicators. Thread-safe.
class ScratchPool final : public RegionLookup {
 public:
  // `endpoint` (may be null: nothing is registered) must outlive the pool.
  ScratchPool(transport::Endpoint* endpoint, size_t keep_bytes);
  ~ScratchPool() override;
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // A buffer of at least `bytes` (uninitialised), back in the pool when the handle goes.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer();

    std::byte* data() const { return data_; }
    size_t size() const { return size_; }
    transport::ByteSpan span() const { return transport::ByteSpan(data_, size_); }
    // Its registration with the pool's endpoint; null when unpooled or not registered.
    const transport::MemoryRegion* region() const {
      return block_ == nullptr ? nullptr : block_->region.get();
    }

   private:
    friend class ScratchPool;
    // Whole pages, and their registration (declared after the memory, so deregistered first).
    struct Free {
      void operator()(std::byte* memory) const;
    };
    struct Block {
      std::unique_ptr<std::byte, Free> memory;
      size_t size = 0;
      std::unique_ptr<transport::MemoryRegion> region;
    };
    Buffer(ScratchPool* pool, std::unique_ptr<Block> block);
    ScratchPool* pool_ = nullptr;
    std::unique_ptr<Block> block_;
    std::byte* data_ = nullptr;
    size_t size_ = 0;
  };
  Buffer Take(size_t bytes);
  // A buffer of at least `bytes` that belongs to no pool: not registered, freed when it goes.
  static Buffer Unpooled(size_t bytes);

  // The slice of a buffer taken from this pool (and not yet returned) that holds all of the
  // `length` bytes at `data`, or nullopt.
  std::optional<transport::RegionSlice> Find(const void* data, size_t length) const override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Buffers allocated (and registered) since the pool was made, and idle bytes kept now.
  uint64_t allocations() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t idle_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static std::unique_ptr<Buffer::Block> Allocate(size_t bytes);
  void Return(std::unique_ptr<Buffer::Block> block) ABSL_LOCKS_EXCLUDED(mu_);

  transport::Endpoint* const endpoint_;
  const size_t keep_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Buffer::Block>> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<const Buffer::Block*> lent_ ABSL_GUARDED_BY(mu_);
  uint64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
};

// A scratch buffer of at least `bytes` for an algorithm: from ctx.scratch when it has a pool,
// else plain (unregistered) memory.
ScratchPool::Buffer TakeScratch(const OpContext& ctx, size_t bytes);

// The operation's endpoint over the data plane's (see the top of this file). One per operation;
// thread-safe as its inner endpoint is.
class RegisteredEndpoint final : public transport::ForwardingEndpoint {
 public:
  // Looks for registrations in `lookups` in turn (null entries are skipped); they must outlive it.
  RegisteredEndpoint(transport::Endpoint* inner, std::vector<const RegionLookup*> lookups)
      : ForwardingEndpoint(inner), lookups_(std::move(lookups)) {}

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override;
  absl::Status SendAll(const std::string& peer, std::span<const transport::OutMessage> messages,
                       absl::Time deadline) override;
  std::unique_ptr<transport::PostedRecv> PostRecv(const std::string& peer,
                                                  const transport::Tag& tag,
                                                  transport::ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) override;

  // Bytes sent or received (posted) from memory that lies in no registered region.
  uint64_t unregistered_bytes() const { return unregistered_.load(std::memory_order_relaxed); }

 private:
  std::optional<transport::RegionSlice> Find(const void* data, size_t length) const;

  const std::vector<const RegionLookup*> lookups_;
  std::atomic<uint64_t> unregistered_{0};
};

}  // namespace baton::collective
