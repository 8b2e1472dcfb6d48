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

#include <cstdint>
#include <cstring>

namespace encore::cpu {

// Eight f32 (or f64) lanes as one GCC vector, for reductions that keep eight
// independent accumulators in a fixed order. A plain `float acc[8]` with a
// `for (j < 8) acc[j] += ...` loop is not reliably vectorized (GCC kept such
// lanes in memory, a load-add-store chain per element, or fell back to
// scalar vmaxss); the vector type is one register per clone (two SSE registers
// in the default clone) and gives the same bits as the scalar lanes: lane j
// still adds elements j, j + 8, j + 16, ... in order.
//
//   F32x8 acc = {};
//   for (; k + 8 <= n; k += 8) acc += load_f32x8(x + k);
//   float s = 0;
//   for (int j = 0; j < 8; ++j) s += acc[j];   // lanes combined in the order the caller documents
// The helpers and the lambdas that take these types are always inlined
// into one function, so passing them by value never meets a call ABI: GCC's
// note that 32-byte vector arguments change the ABI without AVX (-Wpsabi, in
// every default clone and in the lambdas of the files that include this
// header) is moot there, and silenced for those files.
#pragma GCC diagnostic ignored "-Wpsabi"
using F32x8 = float __attribute__((vector_size(32)));
using F64x8 = double __attribute__((vector_size(64)));
using F32x16 = float __attribute__((vector_size(64)));   // one AVX-512 register
using I32x8 = int32_t __attribute__((vector_size(32)));
using I32x16 = int32_t __attribute__((vector_size(64)));

ENCORE_SIMD_INLINE F32x8 load_f32x8(const float* p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
ENCORE_SIMD_INLINE void store_f32x8(float* p, F32x8 v) { std::memcpy(p, &v, sizeof v); }

// Lanes where mask is all ones take a, the others b (mask from a comparison).
ENCORE_SIMD_INLINE F32x8 select_f32x8(I32x8 mask, F32x8 a, F32x8 b) {
  I32x8 ai, bi;
  std::memcpy(&ai, &a, sizeof a);
  std::memcpy(&bi, &b, sizeof b);
  const I32x8 r = (ai & mask) | (bi & ~mask);
  F32x8 out;
  std::memcpy(&out, &r, sizeof r);
  return out;
}

// std::max(acc, v) per lane: v where acc < v, else acc (a NaN v never wins).
ENCORE_SIMD_INLINE F32x8 max_f32x8(F32x8 acc, F32x8 v) { return select_f32x8(acc < v, v, acc); }

}  // namespace encore::cpu
