#include "device/device.h"

#include <unistd.h>

namespace baton::device {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

const char* ShareKindName(ShareKind kind) {
  switch (kind) {
    case ShareKind::kVmm:
      return "vmm";
    case ShareKind::kLegacyIpc:
      return "legacy_ipc";
  }
  return "unknown";
}

}  // namespace baton::device
