// What every CUDA launcher needs, in plain CUDA types (no Abseil, no tensor
// types), so that .cu files include only this and op_kinds.h/layout.h.
//
//   __global__ void twice_kernel(float* x, int64_t n) { kernel_prologue(); ... }
//   void twice_launch(const TwiceArgs& a) {                   // the launcher: runs on the host
//     launch_kernel(twice_kernel, blocks_for(a.n), kThreads, 0, active_stream(), a.x, a.n);
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
#include <utility>

namespace encore::cuda {

inline constexpr int kThreads = 256;   // threads per block of the elementwise kernels

// encore's stream on the calling thread's current CUDA device (created on
// first use, non-blocking with respect to the legacy default stream).
cudaStream_t active_stream();

// Throws encore::Error (kInternal) naming `op` when the last launch failed.
void check_launch(const char* op);

// Throws encore::Error naming `what` when err != cudaSuccess.
void check(cudaError_t err, const char* what);

// NOTE [ Programmatic dependent launch ]: on compute capability 9.0 and later
// a kernel may be launched while the kernel before it on the stream is still
// running: once every block of the earlier kernel has started and called
// griddepcontrol.launch_dependents, the next kernel's blocks are scheduled
// and wait in griddepcontrol.wait until the earlier kernel has finished and
// its writes are visible. Every encore kernel begins with kernel_prologue()
// (wait, then let its own successor launch) before it touches memory, so
// results are unchanged; what is saved is the launch latency between
// dependent kernels, which dominates the small kernels of a replayed step.
// launch_kernel() asks for it only while programmatic_launch() is on (the
// capture pass of capture() with CaptureOptions::programmatic_launch), so a
// graph gets programmatic edges and eager work is launched as usual. Kernels
// encore does not compile (cuBLAS, CUB) launch as usual; an encore kernel
// after one of them still waits for all of it.
bool programmatic_launch();
// Turns it on or off for launches from this thread (capture does this).
void set_programmatic_launch(bool on);
// True when encore's kernels were compiled for compute capability >= 9.0
// (-Dgpu_arch), i.e. their kernel_prologue() really waits: only then may a
// GPU that supports it launch them early.
bool kernels_wait_for_predecessors();

// Records a launch's error for the next check_launch (launch_kernel returns
// nothing, like <<<...>>>); check() and check_launch() clear it.
void note_launch_error(cudaError_t err);

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with the
// programmatic-launch attribute set as programmatic_launch() says. Errors
// surface at the next check_launch(op).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch() ? 1 : 0;   // without it: exactly a <<<...>>> launch
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) [[unlikely]] note_launch_error(err);
}

#ifdef __CUDACC__
// The first statement of every encore kernel (NOTE [ Programmatic dependent
// launch ]): waits for the kernel before it on the stream when this one was
// launched early, then lets the next one launch. No-ops otherwise, and below
// compute capability 9.0.
__device__ __forceinline__ void kernel_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
#endif

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never
// more than the grid limit.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

}  // namespace encore::cuda
