// The CUDA runtime seen from encore: device discovery, and the one macro
// family that turns CUDA error codes into absl::Status (never exit/abort).
//
//   ENCORE_RETURN_IF_CUDA_ERROR(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "copy to host");
//   absl::StatusOr<int> n = encore::cuda::device_count();   // error 35 without a driver
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace encore::cuda {

// A Status for a CUDA error: code kUnavailable for "no usable device",
// kInternal otherwise; the message names `what`, the error name and string.
absl::Status cuda_status(cudaError_t err, const char* what);

// Number of usable CUDA devices, or why there is none.
[[nodiscard]] absl::StatusOr<int> device_count();

}  // namespace encore::cuda

#define ENCORE_RETURN_IF_CUDA_ERROR(expr, what)                    \
  do {                                                             \
    const cudaError_t encore_cuda_err_ = (expr);                   \
    if (encore_cuda_err_ != cudaSuccess)                           \
      return ::encore::cuda::cuda_status(encore_cuda_err_, (what)); \
  } while (0)
