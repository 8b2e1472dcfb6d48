#include "src/core/stream.h"

namespace encore {

void Stream::host_access(const char* op) {
  if (observer_ != nullptr) observer_->on_host_access(op);
  synchronize();
}

void Stream::synchronize() {
  // CPU streams run each launch to completion; other backends hook in here.
}

Stream& current_stream(Device device) {
  static Stream cpu_stream(kCPU);
  ENCORE_CHECK_CODE(device.is_cpu(), kUnimplemented, "no stream for device %s in this build",
                    device.str());
  return cpu_stream;
}

}  // namespace encore
