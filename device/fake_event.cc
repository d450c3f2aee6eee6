#include "device/fake_event.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "device/fake_memory.h"
#include "device/fake_stream.h"

namespace baton::device::fake {
namespace {

constexpr char kEventName[] = "baton-fake-event";

// The handle bytes of an exported event start with this tag.
constexpr absl::string_view kEventTag = "baton-fake-event";
constexpr uint64_t kEventMagic = 0x544e5645454b4146;  // "FAKEEVNT"
constexpr uint32_t kEventVersion = 1;

// The event's page: `recorded` counts Record calls, `completed` is the highest count whose
// captured work is done. Both wrap; Query compares them as the stream waits compare.
struct EventPage {
  uint64_t magic = kEventMagic;
  uint32_t version = kEventVersion;
  uint32_t reserved = 0;
  std::atomic<uint32_t> recorded{0};
  std::atomic<uint32_t> completed{0};
};

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "event words are shared between processes");

// An event's mapped page, shared by the event and the work it enqueued (an event destroyed
// while its record is queued is fine in CUDA too).
class EventMemory {
 public:
  EventMemory(void* data, size_t size) : data_(data), size_(size) {}
  ~EventMemory() { munmap(data_, size_); }
  EventMemory(const EventMemory&) = delete;
  EventMemory& operator=(const EventMemory&) = delete;
  EventPage* page() const { return static_cast<EventPage*>(data_); }

 private:
  void* data_;
  size_t size_;
};

class FakeEvent final : public Event {
 public:
  // `fd` is the page's memfd for a created event, invalid for an opened one.
  FakeEvent(std::shared_ptr<EventMemory> memory, UniqueFd fd)
      : memory_(std::move(memory)), fd_(std::move(fd)) {}

  absl::StatusOr<EventHandle> Export() const override {
    if (!fd_.valid()) {
      return absl::FailedPreconditionError(
          "an opened event cannot be exported again; export the event where it was created");
    }
    EventHandle handle;
    std::memcpy(handle.bytes.data(), kEventTag.data(), kEventTag.size());
    BATON_ASSIGN_OR_RETURN(handle.fd, DupCloexec(fd_.get()));
    return handle;
  }

  absl::Status Record(StreamHandle stream) override {
    return Registry::Get().Enqueue(stream, [this](StreamImpl&) {
      EventPage* page = memory_->page();
      const uint32_t count = page->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
      return [memory = memory_, count] {
        std::atomic<uint32_t>& completed = memory->page()->completed;
        // Raise, never lower: records from two streams (or processes) may finish out of order.
        uint32_t seen = completed.load(std::memory_order_relaxed);
        while (!Reached(seen, count) &&
               !completed.compare_exchange_weak(seen, count, std::memory_order_acq_rel)) {
        }
        FutexWake(&completed);
      };
    });
  }

  absl::StatusOr<bool> Query() override {
    const EventPage* page = memory_->page();
    const uint32_t recorded = page->recorded.load(std::memory_order_acquire);
    return Reached(page->completed.load(std::memory_order_acquire), recorded);
  }

 private:
  const std::shared_ptr<EventMemory> memory_;
  const UniqueFd fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Event>> NewFakeEvent() {
  BATON_ASSIGN_OR_RETURN(UniqueFd fd, CreateSealedMemfd(kEventName, PageBytes()));
  void* data = mmap(nullptr, PageBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of a fake event");
  new (data) EventPage();
  return std::make_unique<FakeEvent>(std::make_shared<EventMemory>(data, PageBytes()),
                                     std::move(fd));
}

absl::StatusOr<std::unique_ptr<Event>> OpenFakeEvent(EventHandle handle) {
  const absl::string_view tag(reinterpret_cast<const char*>(handle.bytes.data()), kEventTag.size());
  if (tag != kEventTag) {
    return absl::InvalidArgumentError("the event handle is not one of the host fake's");
  }
  BATON_RETURN_IF_ERROR(CheckSealedMemfd(handle.fd.get(), PageBytes(), "the event handle"));
  struct stat st {};
  if (fstat(handle.fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != PageBytes()) {
    return absl::InvalidArgumentError("the event handle's memfd is not one page");
  }
  void* data = mmap(nullptr, PageBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, handle.fd.get(), 0);
  if (data == MAP_FAILED) return BATON_ERRNO_STATUS("mmap of an opened fake event");
  auto memory = std::make_shared<EventMemory>(data, PageBytes());
  const EventPage* page = memory->page();
  if (page->magic != kEventMagic || page->version != kEventVersion) {
    return absl::InvalidArgumentError("the event handle's page does not hold a host fake event");
  }
  return std::make_unique<FakeEvent>(std::move(memory), UniqueFd());
}

}  // namespace baton::device::fake
