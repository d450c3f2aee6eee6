#pragma once

// Where a buffer lives, as the transport API names it: the device layer's kinds
// (device/memory_kind.h). Transports register memory of the kinds they can move
// (Endpoint::RegisterMemory).

#include "device/memory_kind.h"

namespace baton::transport {

using device::MemoryKind;
using device::MemoryKindName;

}  // namespace baton::transport
