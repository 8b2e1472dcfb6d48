// The CUDA runtime seen from encore: device discovery, encore's stream per
// device, and the one macro family that turns CUDA and cuBLAS error codes into
// absl::Status (boundary functions) or encore::Error (ops); never exit/abort.
//
//   ENCORE_RETURN_IF_CUDA_ERROR(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "copy to host");
//   ENCORE_CUDA_CHECK(cudaStreamSynchronize(s), "synchronize");   // throws encore::Error
//   absl::StatusOr<int> n = encore::cuda::device_count();         // Unavailable without a driver
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "src/backends/cuda/launch.h"

namespace encore::cuda {

// A Status for a CUDA error: code kUnavailable for "no usable device",
// kInternal otherwise; the message names `what`, the error name and string.
absl::Status cuda_status(cudaError_t err, const char* what);

// Number of usable CUDA devices, or why there is none.
[[nodiscard]] absl::StatusOr<int> device_count();

// Makes `index` the calling thread's current device (cheap when it already is).
void set_device(int index);

// encore's stream on device `index` (created on first use).
cudaStream_t stream_for(int index);

// Waits for all work queued on encore's stream of device `index`; throws
// encore::Error if a kernel failed.
void synchronize(int index);

}  // namespace encore::cuda

#define ENCORE_RETURN_IF_CUDA_ERROR(expr, what)                    \
  do {                                                             \
    const cudaError_t encore_cuda_err_ = (expr);                   \
    if (encore_cuda_err_ != cudaSuccess) {                         \
      (void)cudaGetLastError(); /* or the next check_launch blames another op */ \
      return ::encore::cuda::cuda_status(encore_cuda_err_, (what)); \
    }                                                              \
  } while (0)

#define ENCORE_CUDA_CHECK(expr, what) ::encore::cuda::check((expr), (what))
