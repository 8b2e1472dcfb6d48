// Launchers of CUDA fill kernels. Plain CUDA types only (no Abseil), so that
// .cu files compile fast; callers turn cudaError_t into a Status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace encore::cuda {

// out[0, n) = value on `stream`; returns the launch error, if any.
cudaError_t launch_fill_f32(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace encore::cuda
