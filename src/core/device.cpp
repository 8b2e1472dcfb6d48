#include "encore/device.h"

#include "absl/strings/str_cat.h"

namespace encore {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", static_cast<int>(index));
}

bool cuda_available() { return false; }  // the CUDA backend overrides this when built

Device default_device() { return cuda_available() ? Device::cuda(0) : kCPU; }

}  // namespace encore
