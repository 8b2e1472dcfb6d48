#include "encore/device.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "encore/error.h"
#include "src/core/device_runtime.h"
#include "src/core/stream.h"

namespace encore {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", static_cast<int>(index));
}

void Device::refuse_cuda_index(int index) {
  throw Error(absl::InvalidArgumentError(
      absl::StrCat("Device::cuda: index ", index, " is out of range [0, ", INT8_MAX, "]")));
}

bool cuda_available() { return cuda_runtime().available(); }

Device default_device() { return cuda_available() ? Device::cuda(0) : kCPU; }

// Through host_access: inside a step being captured, the capture observer
// refuses it by name (a replay is one launch: there is nothing to wait for).
void synchronize(Device device) { current_stream(device).host_access("synchronize"); }

}  // namespace encore
