// What every CUDA launcher needs, in plain CUDA types (no Abseil, no tensor
// types), so that .cu files include only this and op_kinds.h/layout.h.
//
//   __global__ void twice_kernel(float* x, int64_t n) { ... }
//   void twice_launch(const TwiceArgs& a) {                   // the launcher: runs on the host
//     twice_kernel<<<blocks_for(a.n), kThreads, 0, active_stream()>>>(a.x, a.n);
//     check_launch("twice");                                  // throws encore::Error on failure
//   }
//
// A launcher is what Stream::launch<&launcher> calls (src/core/stream.h): its
// argument struct is copied into CPU graphs, and on CUDA the launcher runs
// eagerly into encore's stream, which is the one being captured during
// capture(). Launchers therefore enqueue work and never synchronize.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace encore::cuda {

inline constexpr int kThreads = 256;   // threads per block of the elementwise kernels

// encore's stream on the calling thread's current CUDA device (created on
// first use, non-blocking with respect to the legacy default stream).
cudaStream_t active_stream();

// Throws encore::Error (kInternal) naming `op` when the last launch failed.
void check_launch(const char* op);

// Throws encore::Error naming `what` when err != cudaSuccess.
void check(cudaError_t err, const char* what);

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never
// more than the grid limit.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

}  // namespace encore::cuda
