#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "device/host_fake.h"

#ifdef BATON_HAVE_CUDA
#include "device/cuda_device.h"
#endif

namespace baton::device {

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view name) {
  if (name == "none") return nullptr;
  if (name == "fake") return std::unique_ptr<Device>(NewHostFakeDevice());
  if (name == "cuda" || name == "auto") {
#ifdef BATON_HAVE_CUDA
    absl::StatusOr<std::unique_ptr<Device>> cuda = NewCudaDevice();
    if (cuda.ok() || name == "cuda") return cuda;
    return nullptr;
#else
    if (name == "auto") return nullptr;
    return absl::FailedPreconditionError("this build of Baton has no CUDA support");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", name.substr(0, 32),
                                                 "\": expected auto, cuda, fake or none"));
}

}  // namespace baton::device
