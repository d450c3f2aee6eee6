// Session's device-memory half (client/lib/session.h): registrations of device allocations with
// the daemon, and the process's device.

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/lib/session.h"
#include "common/status_macros.h"

namespace baton::core {

absl::StatusOr<device::Device*> ClientDevice() {
  // Opened once per process: device pointers and streams belong to the process, not a client.
  static std::once_flag once;
  static absl::StatusOr<std::unique_ptr<device::Device>>* opened = nullptr;
  std::call_once(once, [] {
    const char* name = std::getenv("BATON_DEVICE");
    opened = new absl::StatusOr<std::unique_ptr<device::Device>>(
        device::OpenDevice(name == nullptr || *name == '\0' ? "auto" : name));
  });
  if (!opened->ok()) return opened->status();
  if (**opened == nullptr) {
    return absl::FailedPreconditionError(
        "this process has no GPU device (no CUDA driver or GPU, or BATON_DEVICE=none)");
  }
  return opened->value().get();
}

absl::StatusOr<uint64_t> Session::RegisterExported(device::ExportedMemory exported) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegisterDevice);
  session::DeviceMemory& wire = request.device;
  wire.share_kind = static_cast<uint32_t>(exported.kind);
  std::memcpy(wire.device_uuid, exported.device_uuid.data(), sizeof(wire.device_uuid));
  wire.base = exported.base;
  wire.size = exported.size;
  wire.driver_buffer_id = exported.buffer_id;
  if (exported.segment_sizes.size() > session::kMaxDeviceSegments) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the allocation has ", exported.segment_sizes.size(), " physical segments; at most ",
        session::kMaxDeviceSegments, " can be shared"));
  }
  wire.segment_count = static_cast<uint32_t>(exported.segment_sizes.size());
  std::vector<int> fds;
  for (size_t i = 0; i < exported.segment_sizes.size(); ++i) {
    wire.segment_sizes[i] = exported.segment_sizes[i];
    fds.push_back(exported.segment_fds[i].get());
  }
  std::memcpy(wire.ipc_handle, exported.ipc_handle.data(), sizeof(wire.ipc_handle));
  BATON_ASSIGN_OR_RETURN(session::Reply reply, Exchange(request, fds, kControlTimeout));
  return reply.buffer_id;  // the descriptors close with `exported`: the daemon has its own
}

absl::StatusOr<void*> Session::AllocateDevice(size_t bytes, int ordinal) {
  BATON_ASSIGN_OR_RETURN(device::Device * device, ClientDevice());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<device::Allocation> allocation,
                         device->Allocate(bytes, ordinal));
  BATON_ASSIGN_OR_RETURN(device::ExportedMemory exported,
                         device->Export(allocation->data(), allocation->size()));
  const uint64_t base = exported.base;
  const uint64_t size = exported.size;
  const uint64_t driver_id = exported.buffer_id;
  BATON_ASSIGN_OR_RETURN(const uint64_t id, RegisterExported(std::move(exported)));
  void* data = allocation->data();
  absl::MutexLock lock(&device_mu_);
  device_buffers_[base] = DeviceBuffer{size, driver_id, id, std::move(allocation)};
  return data;
}

absl::Status Session::FreeDevice(void* data) {
  DeviceBuffer freed;  // freed after the daemon let go of it
  {
    absl::MutexLock lock(&device_mu_);
    auto it = device_buffers_.find(reinterpret_cast<uint64_t>(data));
    if (it == device_buffers_.end() || it->second.owned == nullptr) {
      return absl::InvalidArgumentError("pointer was not returned by AllocateDevice");
    }
    freed = std::move(it->second);
    device_buffers_.erase(it);
  }
  return ReleaseAtDaemon(freed.id);
}

absl::StatusOr<v1::BufferRef> Session::FindDevice(const void* data, size_t bytes) {
  const auto address = reinterpret_cast<uint64_t>(data);
  BATON_ASSIGN_OR_RETURN(device::Device * device, ClientDevice());
  absl::MutexLock lock(&device_mu_);
  auto it = device_buffers_.upper_bound(address);
  if (it != device_buffers_.begin()) {
    --it;
    const uint64_t offset = address - it->first;
    if (offset < it->second.size) {
      // The cached registration holds only while the allocation it was made for is still the
      // one at this address: one freed without Deregister and another made in its place has a
      // new driver id, and the daemon must not go on using its mapping of the old one.
      const absl::StatusOr<uint64_t> now = device->BufferId(data);
      if (now.ok() && *now == it->second.driver_id && bytes <= it->second.size - offset) {
        v1::BufferRef ref;
        ref.set_buffer_id(it->second.id);
        ref.set_offset(offset);
        return ref;
      }
    }
  }
  BATON_ASSIGN_OR_RETURN(device::ExportedMemory exported, device->Export(data, bytes));
  const uint64_t base = exported.base;
  const uint64_t size = exported.size;
  const uint64_t driver_id = exported.buffer_id;
  // Cached entries that overlap the allocation are earlier allocations at reused addresses
  // (freed without Deregister): the daemon lets go of them first.
  auto first = device_buffers_.lower_bound(base);
  if (first != device_buffers_.begin() &&
      std::prev(first)->first + std::prev(first)->second.size > base) {
    first = std::prev(first);
  }
  while (first != device_buffers_.end() && first->first < base + size) {
    if (first->second.owned != nullptr) {
      return absl::InternalError("memory from AllocateDevice overlaps another device allocation");
    }
    ReleaseAtDaemon(first->second.id).IgnoreError();
    first = device_buffers_.erase(first);
  }
  BATON_ASSIGN_OR_RETURN(const uint64_t id, RegisterExported(std::move(exported)));
  device_buffers_[base] = DeviceBuffer{size, driver_id, id, nullptr};
  v1::BufferRef ref;
  ref.set_buffer_id(id);
  ref.set_offset(address - base);
  return ref;
}

absl::Status Session::Deregister(const void* data) {
  const auto address = reinterpret_cast<uint64_t>(data);
  uint64_t id = 0;
  {
    absl::MutexLock lock(&device_mu_);
    auto it = device_buffers_.upper_bound(address);
    if (it == device_buffers_.begin()) {
      return absl::InvalidArgumentError("the pointer is in no registered device allocation");
    }
    --it;
    if (address - it->first >= it->second.size || it->second.owned != nullptr) {
      return absl::InvalidArgumentError(
          it->second.owned != nullptr
              ? "memory from AllocateDevice is released by FreeDevice, not Deregister"
              : "the pointer is in no registered device allocation");
    }
    id = it->second.id;
    device_buffers_.erase(it);
  }
  return ReleaseAtDaemon(id);
}

absl::StatusOr<uint64_t> Session::RegisterEvents(const std::vector<const device::Event*>& events) {
  if (events.empty() || events.size() > session::kMaxEvents) {
    return absl::InvalidArgumentError(
        absl::StrCat("an event set has 1 to ", session::kMaxEvents, " events"));
  }
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegisterEvents);
  request.events.event_count = static_cast<uint32_t>(events.size());
  std::vector<device::EventHandle> handles;
  std::vector<int> fds;
  for (size_t i = 0; i < events.size(); ++i) {
    BATON_ASSIGN_OR_RETURN(device::EventHandle handle, events[i]->Export());
    std::memcpy(request.events.handles[i], handle.bytes.data(), session::kHandleBytes);
    if (handle.fd.valid()) fds.push_back(handle.fd.get());
    handles.push_back(std::move(handle));
  }
  if (!fds.empty() && fds.size() != events.size()) {
    return absl::InternalError("some events of a set have descriptors and some do not");
  }
  request.events.with_fds = fds.empty() ? 0 : 1;
  BATON_ASSIGN_OR_RETURN(session::Reply reply, Exchange(request, fds, kControlTimeout));
  return reply.buffer_id;
}

}  // namespace baton::core
