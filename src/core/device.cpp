#include "encore/device.h"

#include "absl/strings/str_cat.h"
#include "src/core/stream.h"
#if ENCORE_HAVE_CUDA
#include "src/backends/cuda/runtime.h"
#endif

namespace encore {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", static_cast<int>(index));
}

#if ENCORE_HAVE_CUDA
bool cuda_available() {
  static const bool available = cuda::device_count().ok();
  return available;
}
#else
bool cuda_available() { return false; }
#endif

Device default_device() { return cuda_available() ? Device::cuda(0) : kCPU; }

// Through host_access: inside a step being captured, the capture observer
// refuses it by name (a replay is one launch: there is nothing to wait for).
void synchronize(Device device) { current_stream(device).host_access("synchronize"); }

}  // namespace encore
