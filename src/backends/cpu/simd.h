// Hot elementwise loops compiled for several x86-64 levels and picked once,
// when the program loads, by the CPU it runs on (GCC target_clones: an ifunc
// resolver). The default build targets baseline x86-64 (SSE2, 4 lanes);
// x86-64-v3 adds AVX2 (8 lanes) and x86-64-v4 AVX-512 (16). Every clone gives
// the same bits: the loops are elementwise (no reassociation) and the project
// compiles with -ffp-contract=off (no FMA contraction; meson.build).
//
//   template <typename T>
//   ENCORE_SIMD_CLONES void scale_loop(T* o, const T* x, int64_t n) { for (...) o[i] = 2 * x[i]; }
//
// Use it on small leaf functions holding one flat loop over contiguous data,
// with the element function inlined into them; not on anything that calls
// back into other code.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define ENCORE_SIMD_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define ENCORE_SIMD_CLONES
#endif
