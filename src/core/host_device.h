// ENCORE_HOST_DEVICE: marks a small function that both the host compiler and
// nvcc compile, for host and device code alike (Philox, dtype conversion
// rules, AdamW's per-step constants), so that the CPU and CUDA backends run
// the same source and get the same bits.
//
//   ENCORE_HOST_DEVICE uint32_t mix(uint32_t x) { return x * 0x9E3779B9u; }
#pragma once

#ifdef __CUDACC__
#define ENCORE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ENCORE_HOST_DEVICE inline
#endif
