#pragma once

// The host fake's interprocess events (device/host_fake.h). An event is a sealed memfd page with
// two counters, recorded and completed: Record bumps `recorded` at call time and enqueues on the
// stream a store of that count into `completed`; Query compares them. The handle is a tag in
// EventHandle::bytes and the page's descriptor in EventHandle::fd. Internal to the host fake
// (target baton_device).
//
// Threads: an event may be used from several threads (and processes) at once.

#include <memory>

#include "absl/status/statusor.h"
#include "device/device.h"

namespace baton::device::fake {

// Device::CreateIpcEvent: a new event, never recorded (so done), exportable.
absl::StatusOr<std::unique_ptr<Event>> NewFakeEvent();

// Device::OpenIpcEvent: the event whose page `handle` holds (taking its descriptor), also in
// the process that created it. It may be recorded but not exported again. InvalidArgument for a
// handle that is not the host fake's, or whose descriptor is not a sealed one-page memfd holding
// an event.
absl::StatusOr<std::unique_ptr<Event>> OpenFakeEvent(EventHandle handle);

}  // namespace baton::device::fake
