// Hot elementwise loops compiled for several x86-64 levels and picked once,
// when the program loads, by the CPU it runs on (GCC target_clones: an ifunc
// resolver). The default build targets baseline x86-64 (SSE2, 4 lanes); the
// clones add AVX2 (8 lanes) or AVX-512F (16). Every clone gives the same bits:
// the loops are elementwise or reduce in a fixed lane order (lane_sum), and
// the project compiles with -ffp-contract=off (no FMA contraction;
// meson.build).

//
//   template <typename T>
//   ENCORE_SIMD_CLONES void scale_loop(T* o, const T* x, int64_t n) { for (...) o[i] = 2 * x[i]; }
//
// Use it on small leaf functions holding one flat loop over contiguous data,
// with the element function inlined into them; not on anything that calls
// back into other code.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define ENCORE_SIMD_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define ENCORE_SIMD_CLONES
#endif

// For the small element functions such a loop calls (exp_softmax, lane_sum):
// GCC does not inline a plain inline function into a clone of another target
// on its own (they stayed out-of-line calls, one per element); always_inline
// makes it.
#define ENCORE_SIMD_INLINE [[gnu::always_inline]] inline
