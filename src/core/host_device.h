// ENCORE_HOST_DEVICE: marks a small function that both the host compiler and
// nvcc compile, for host and device code alike (Philox, dtype conversion
// rules, AdamW's per-step constants), so that the CPU and CUDA backends run
// the same source and get the same bits.
//
//   ENCORE_HOST_DEVICE uint32_t mix(uint32_t x) { return x * 0x9E3779B9u; }
//
// ENCORE_HOST_DEVICE_INLINE: the same, and always inlined by the host
// compiler too: for element functions that the CPU's vectorized loops call
// (ENCORE_SIMD_CLONES, src/backends/cpu/simd.h), which GCC would otherwise
// leave as one out-of-line call per element (src/backends/unary_math.h).
#pragma once

#ifdef __CUDACC__
#define ENCORE_HOST_DEVICE __host__ __device__ __forceinline__
#define ENCORE_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define ENCORE_HOST_DEVICE inline
#define ENCORE_HOST_DEVICE_INLINE [[gnu::always_inline]] inline
#endif
