#include "src/backends/cuda/runtime.h"

namespace encore::cuda {

absl::Status cuda_status(cudaError_t err, const char* what) {
  const bool no_device = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver;
  const std::string msg = absl::StrFormat("%s: CUDA error %d (%s): %s", what, static_cast<int>(err),
                                          cudaGetErrorName(err), cudaGetErrorString(err));
  return no_device ? absl::UnavailableError(msg) : absl::InternalError(msg);
}

absl::StatusOr<int> device_count() {
  int n = 0;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA device");
  return n;
}

}  // namespace encore::cuda
