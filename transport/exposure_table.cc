#include "transport/exposure_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/secure_random.h"
#include "spdlog/spdlog.h"

namespace baton::transport {

absl::Status WriteRefusedError(const std::string& peer, uint64_t comm, uint64_t offset,
                               uint64_t length, WriteRefusal refusal) {
  const std::string what =
      absl::StrCat("peer ", peer, " refused a write of ", length, " bytes at offset ", offset,
                   " (comm ", absl::Hex(comm, absl::kZeroPad8), "): ");
  if (refusal == WriteRefusal::kOutOfBounds) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "the bytes do not lie inside the region it exposed"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(what,
                   "it holds no region under that key for this endpoint and communicator (revoked, "
                   "complete already, or never exposed to it)"));
}

// The handle Expose returns; the table keeps the state, so that writes find it by key.
class ExposureTable::Exposed final : public ExposedRegion {
 public:
  Exposed(ExposureTable* table, std::shared_ptr<Exposure> exposure)
      : table_(table), exposure_(std::move(exposure)) {}
  ~Exposed() override { table_->Settle(*exposure_, /*revoke=*/true).IgnoreError(); }

  const RemoteRegion& descriptor() const override { return exposure_->descriptor; }
  absl::StatusOr<WriteNotice> Wait() override {
    return table_->Settle(*exposure_, /*revoke=*/false);
  }
  bool Test() override { return table_->Settled(*exposure_); }

 private:
  ExposureTable* const table_;
  const std::shared_ptr<Exposure> exposure_;
};

bool ExposureTable::Write::cancelled() const {
  return exposure_->cancelled.load(std::memory_order_acquire);
}

absl::Time ExposureTable::Write::deadline() const { return exposure_->deadline; }

std::unique_ptr<ExposedRegion> ExposureTable::Expose(const std::string& peer, uint64_t comm,
                                                     ByteSpan bytes, absl::Time deadline) {
  auto exposure = std::make_shared<Exposure>();
  exposure->peer = peer;
  exposure->comm = comm;
  exposure->bytes = bytes;
  exposure->deadline = deadline;
  exposure->descriptor.length = bytes.size();
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return FailedExposure(closed_);
  if (auto it = aborted_.find(comm); it != aborted_.end()) return FailedExposure(it->second);
  // Unguessable, so that a peer can write only where it was told to: a key it was never given
  // (another peer's, an earlier one's) is refused. 0 is what a failed exposure's descriptor says.
  uint64_t key = 0;
  while (key == 0 || exposures_.contains(key)) SecureRandomBytes(&key, sizeof(key));
  exposure->descriptor.key = key;
  exposures_.emplace(key, exposure);
  return std::make_unique<Exposed>(this, std::move(exposure));
}

absl::Status ExposureTable::RefuseLocked(const std::string& peer, absl::Status error) {
  const uint64_t refused = ++counts_[peer].refused;
  refused_log_.Log(spdlog::level::warn, "refused a one-sided write from peer {}: {} ({} so far)",
                   peer, error.ToString(), refused);
  return error;
}

absl::StatusOr<ExposureTable::Write> ExposureTable::BeginWrite(const std::string& peer,
                                                               uint64_t comm, uint64_t key,
                                                               uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  auto it = exposures_.find(key);
  // The same answer whether the key is unknown or another peer's or communicator's: a writer
  // learns nothing about keys it was not given.
  if (it == exposures_.end() || it->second->peer != peer || it->second->comm != comm) {
    return RefuseLocked(peer,
                        absl::PermissionDeniedError(absl::StrCat(
                            "no region is exposed to peer ", peer, " for comm ",
                            absl::Hex(comm, absl::kZeroPad8), " under the key its write names")));
  }
  Exposure& exposure = *it->second;
  if (absl::Now() >= exposure.deadline) {
    EndLocked(exposure,
              absl::DeadlineExceededError(absl::StrCat("no notifying write from peer ", peer,
                                                       " into the region exposed to "
                                                       "it by the deadline")));
    return RefuseLocked(peer, absl::PermissionDeniedError(absl::StrCat(
                                  "the region exposed to peer ", peer, " passed its deadline")));
  }
  const uint64_t size = exposure.bytes.size();
  if (offset > size || length > size - offset) {
    return RefuseLocked(peer, absl::InvalidArgumentError(absl::StrCat(
                                  "a write of ", length, " bytes at offset ", offset, " from peer ",
                                  peer, " leaves the region of ", size, " bytes exposed to it")));
  }
  ++exposure.writers;
  return Write(it->second, exposure.bytes.subspan(offset, length));
}

void ExposureTable::FinishWrite(Write write, const absl::Status& status,
                                std::optional<Notify> notify, uint64_t overhead_bytes) {
  absl::MutexLock lock(&mu_);
  Exposure& exposure = *write.exposure_;
  --exposure.writers;
  if (!status.ok()) {
    // A write cut short because the region was revoked or failed meanwhile changes nothing.
    if (!exposure.cancelled.load(std::memory_order_relaxed)) EndLocked(exposure, status);
    return;
  }
  PeerCounts& counts = counts_[exposure.peer];
  counts.rx_bytes += write.target_.size() + overhead_bytes;
  ++counts.rx_writes;
  if (exposure.result.has_value()) return;
  exposure.received += write.target_.size();
  if (notify.has_value()) exposure.notified = notify;
  if (exposure.notified.has_value() && exposure.received >= exposure.notified->total) {
    EndLocked(exposure, WriteNotice{exposure.notified->immediate, exposure.received});
  }
}

void ExposureTable::CloseLocked(Exposure& exposure) {
  if (exposure.open) {
    exposure.open = false;
    exposures_.erase(exposure.descriptor.key);
  }
  exposure.cancelled.store(true, std::memory_order_release);
}

void ExposureTable::EndLocked(Exposure& exposure, absl::StatusOr<WriteNotice> result) {
  if (!exposure.result.has_value()) exposure.result = std::move(result);
  CloseLocked(exposure);
}

absl::StatusOr<WriteNotice> ExposureTable::Settle(Exposure& exposure, bool revoke) {
  absl::MutexLock lock(&mu_);
  if (revoke) {
    EndLocked(exposure, absl::CancelledError("the exposed region was revoked"));
  } else {
    auto ended = [&exposure]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exposure.result.has_value(); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ended), exposure.deadline)) {
      EndLocked(exposure, absl::DeadlineExceededError(absl::StrCat(
                              "no notifying write from peer ", exposure.peer,
                              " into the region exposed to it (comm ",
                              absl::Hex(exposure.comm, absl::kZeroPad8), ") by the deadline")));
    }
  }
  // The memory is the caller's again only once nobody writes into it: a write in progress sees
  // `cancelled` and stops within its transport's check interval.
  auto idle = [&exposure]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exposure.writers == 0; };
  mu_.Await(absl::Condition(&idle));
  return *exposure.result;
}

bool ExposureTable::Settled(Exposure& exposure) {
  absl::MutexLock lock(&mu_);
  return exposure.result.has_value() && exposure.writers == 0;
}

void ExposureTable::Abort(uint64_t comm, const absl::Status& reason) {
  const absl::Status status = reason.ok() ? absl::CancelledError("communicator aborted") : reason;
  absl::MutexLock lock(&mu_);
  aborted_[comm] = status;
  std::vector<std::shared_ptr<Exposure>> ended;
  for (const auto& [key, exposure] : exposures_) {
    if (exposure->comm == comm) ended.push_back(exposure);
  }
  for (const std::shared_ptr<Exposure>& exposure : ended) EndLocked(*exposure, status);
}

void ExposureTable::Forget(uint64_t comm) {
  absl::MutexLock lock(&mu_);
  aborted_.erase(comm);
}

void ExposureTable::PeerLost(const std::string& peer, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Exposure>> ended;
  for (const auto& [key, exposure] : exposures_) {
    if (exposure->peer == peer) ended.push_back(exposure);
  }
  for (const std::shared_ptr<Exposure>& exposure : ended) EndLocked(*exposure, status);
}

void ExposureTable::Shutdown(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = status;
  std::vector<std::shared_ptr<Exposure>> ended;
  for (const auto& [key, exposure] : exposures_) ended.push_back(exposure);
  for (const std::shared_ptr<Exposure>& exposure : ended) EndLocked(*exposure, status);
}

absl::flat_hash_map<std::string, ExposureTable::PeerCounts> ExposureTable::Counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

uint64_t WriteTally::Add(const std::string& peer, uint64_t comm, uint64_t key, uint64_t length,
                         bool last) {
  absl::MutexLock lock(&mu_);
  Key region{peer, comm, key};
  if (!last) return written_[region] += length;
  auto it = written_.find(region);
  if (it == written_.end()) return length;
  const uint64_t total = it->second + length;
  written_.erase(it);
  return total;
}

void WriteTally::Forget(uint64_t comm) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(written_, [comm](const auto& entry) { return std::get<1>(entry.first) == comm; });
}

}  // namespace baton::transport
