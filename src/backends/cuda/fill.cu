// CUDA fill kernel: the first kernel of the CUDA backend (more arrive with the
// CUDA issue). Kernels, then launchers. No Abseil here: it slows nvcc.
#include "src/backends/cuda/fill.h"

namespace encore::cuda {
namespace {

__global__ void fill_f32_kernel(float* out, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

}  // namespace

cudaError_t launch_fill_f32(float* out, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  fill_f32_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

}  // namespace encore::cuda
