#pragma once

// Where a buffer lives. Operations name the kind of each buffer; transports register memory of
// the kinds they can move (transport::Endpoint::RegisterMemory, which names this type
// transport::MemoryKind), and element-wise kernels exist per kind (device/kernels.h).

#include "absl/strings/string_view.h"

namespace baton::device {

enum class MemoryKind {
  kHost,    // ordinary (or shared) host memory
  kDevice,  // GPU memory (CUDA)
};

// "host", "device".
inline absl::string_view MemoryKindName(MemoryKind kind) {
  return kind == MemoryKind::kDevice ? "device" : "host";
}

}  // namespace baton::device
