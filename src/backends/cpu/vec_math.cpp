// SLEEF's no-FMA vector variants behind vec_math.h's array functions
// (NOTE [ Deterministic vector math ] in vec_math.h), and erf of our own
// (NOTE [ erf in double ], NOTE [ A float erf for GELU ]).
#include "src/backends/cpu/vec_math.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>

#include "src/backends/cpu/simd.h"

namespace encore::cpu {
namespace {

// NOTE [ erf in double ]
// SLEEF's 1-ulp erff (its no-FMA AVX-512F build) took 3.4 ns an element on
// this project's Xeon machines, nine times its expf, and the exact GELU of
// the transformer block runs it on 2^19 elements forward and as many
// backward each step (perf, issue 19, session 13). Here erf is two
// polynomials evaluated in double on eight lanes at once (GCC vectors: one
// AVX-512 register, two AVX or four SSE2 ones), nothing but IEEE multiplies,
// adds and selects, so every variant and the padded tail round alike: the
// same bits everywhere (-ffp-contract=off). For |x| < 1, erf(x) = x P(u)
// with u = 2x^2 - 1; for 1 <= |x| < 3.9375, erf(x) = Q(v) with v = |x| -
// 2.46875; above, +-1 (erf(3.93) already rounds to 1.0f). P (degree 6) and
// Q (degree 14) interpolate erf at Chebyshev nodes (in long double, erfl),
// and one rounding to float keeps every result within 0.634 ulp of the exact
// value: checked on every float in [0, 5] (1.08e9 of them, 1.4 % not
// correctly rounded; degrees 7 and 16 on [1, 4): 0.512 ulp, 0.04 %, and
// GELU forward 0.95 ms against 0.79). NaN goes through Q and stays NaN;
// erf(-x) = -erf(x), -0 included.
constexpr double kErfSmall[] = {   // P, from u^0 up
    0.96546873866986727, -0.14053609727754268, 0.01985249714090763, -0.0022854195448728447,
    0.0002175135416557877, -1.7669068026129414e-05, 1.2306054785699412e-06};
constexpr double kErfLarge[] = {   // Q, from v^0 up
    0.99951939529124134, 0.0025441054280921161, -0.0062809574423946055, 0.0094907631346312568,
    -0.0096198197489053023, 0.0066455470299470491, -0.0029090501454896263, 0.00048436936127043708,
    0.00033367667135642367, -0.00029366813824602164, 7.7289145686879049e-05, 2.3201327351354757e-05,
    -1.7007878002499117e-05, 1.8088460407854162e-07, 1.0503379140590729e-06};
constexpr double kErfMid = 2.46875;   // the middle of [1, 3.9375]: v = |x| - kErfMid
constexpr double kErfOne = 3.9375;    // from here on, erf rounds to 1.0f

// c[Lo] + c[Lo+1] u + ... + c[Lo+Len-1] u^(Len-1) by Estrin's scheme, with
// p[k] = u^(2^k): the lower half (the largest power of two below Len) plus
// the upper half times u^half, so the pairs c[2i] + c[2i+1] u come first,
// then pairs of those with u^2, and so on. Its dependency chain is
// log2(Len) multiply-adds long where Horner's is Len (degrees 7 and 16: GELU
// forward took 1.13 ms with Horner's, latency-bound, 0.95 with Estrin's;
// this order is the one the note's check ran).
template <size_t Lo, size_t Len, typename V, typename C, size_t N>
ENCORE_SIMD_INLINE V estrin(const C (&c)[N], const V* p) {
  if constexpr (Len == 1) {
    return V{} + c[Lo];
  } else {
    constexpr size_t half = std::bit_floor(Len - 1);
    return estrin<Lo, half>(c, p) + estrin<Lo + half, Len - half>(c, p) * p[std::countr_zero(half)];
  }
}

// V: F64x8 with double coefficients, or F32x16 with float ones.
template <typename V, typename C, size_t N>
ENCORE_SIMD_INLINE V polynomial(const C (&c)[N], V u) {
  V p[std::bit_width(N)];
  p[0] = u;
  for (size_t k = 1; k < std::size(p); ++k) p[k] = p[k - 1] * p[k - 1];
  return estrin<0, N>(c, p);
}

// erf(x) for x >= 0 (or NaN), F32x8 -> F64x8 -> F32x8 (NOTE [ erf in double ]).
struct ErfOfMagnitude {
  ENCORE_SIMD_INLINE F32x8 operator()(F32x8 mag) const {
    const F64x8 x = __builtin_convertvector(mag, F64x8);
    const F64x8 small = polynomial(kErfSmall, 2.0 * (x * x) - 1.0) * x;
    const F64x8 large = polynomial(kErfLarge, x - kErfMid);
    F64x8 r = x < 1.0 ? small : large;
    r = x >= kErfOne ? F64x8{} + 1.0 : r;
    return __builtin_convertvector(r, F32x8);
  }
};

// NOTE [ A float erf for GELU ]
// The exact GELU's forward and backward need erf(x / sqrt 2) only inside a
// product (x Phi(x); g (Phi(x) + x phi(x))), where float's own roundings
// already come to about an ulp each: there erf runs the same polynomials in
// float, sixteen lanes to a vector where double has eight, with erf(x) =
// x + x (P(u) - 1) for |x| < 1 (the small correction carries the rounding)
// and Q(v) above. Within 3.74 ulp of the exact value on every float in
// [0, 5] (0.24 % of them above 1 ulp; CUDA's erff is within 2); the same
// bits from every variant, as above. cpu_kernels_bench, one thread, [512,
// 1024] f32 (session 13, Xeon), GELU forward / forward + backward: SLEEF's
// erff 1.78 / 3.87 ms, the double erf 0.82 / 2.00, this 0.41 / 1.16.
template <size_t N>
struct FloatCoefs {
  float c[N];
};
template <size_t N>
constexpr FloatCoefs<N> float_coefs(const double (&c)[N], double shift0) {
  FloatCoefs<N> f{};
  for (size_t i = 0; i < N; ++i) f.c[i] = static_cast<float>(i == 0 ? c[0] + shift0 : c[i]);
  return f;
}
constexpr FloatCoefs kErfSmallMinusOneF = float_coefs(kErfSmall, -1.0);   // P - 1
constexpr FloatCoefs kErfLargeF = float_coefs(kErfLarge, 0.0);

struct FastErfOfMagnitude {
  ENCORE_SIMD_INLINE F32x16 operator()(F32x16 x) const {
    const F32x16 small = x + x * polynomial(kErfSmallMinusOneF.c, 2.0f * (x * x) - 1.0f);
    const F32x16 large = polynomial(kErfLargeF.c, x - static_cast<float>(kErfMid));
    const F32x16 r = x < 1.0f ? small : large;
    return x >= static_cast<float>(kErfOne) ? F32x16{} + 1.0f : r;
  }
};

// erf(x) through F (an ErfOfMagnitude) on a vector V of floats (I: as many
// int32): erf is odd, so F sees |x| and the sign goes back on with an or
// (F's result is >= 0 or NaN).
template <typename V, typename I, typename F>
ENCORE_SIMD_INLINE V odd(V x) {
  I bits;
  std::memcpy(&bits, &x, sizeof bits);
  const I sign = bits & static_cast<int32_t>(0x80000000u);
  bits &= 0x7fffffff;
  V mag;
  std::memcpy(&mag, &bits, sizeof mag);
  const V r = F()(mag);
  std::memcpy(&bits, &r, sizeof bits);
  bits |= sign;
  V out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// o[i] = erf(x[i]), a vector at a time; the tail is padded with zeros into a
// full vector.
template <typename V, typename I, typename F>
ENCORE_SIMD_INLINE void odd_loop(float* o, const float* x, int64_t n) {
  constexpr int64_t kW = sizeof(V) / sizeof(float);
  V v;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    std::memcpy(&v, x + i, sizeof v);
    v = odd<V, I, F>(v);
    std::memcpy(o + i, &v, sizeof v);
  }
  if (i == n) return;
  float buf[kW] = {};
  std::memcpy(buf, x + i, sizeof(float) * (n - i));
  std::memcpy(&v, buf, sizeof v);
  v = odd<V, I, F>(v);
  std::memcpy(o + i, &v, sizeof(float) * (n - i));
}

ENCORE_SIMD_INLINE void erf_loop(float* o, const float* x, int64_t n) {
  odd_loop<F32x8, I32x8, ErfOfMagnitude>(o, x, n);
}
ENCORE_SIMD_INLINE void erf_fast_loop(float* o, const float* x, int64_t n) {
  odd_loop<F32x16, I32x16, FastErfOfMagnitude>(o, x, n);
}

}  // namespace
}  // namespace encore::cpu

#if defined(__x86_64__)
#include <immintrin.h>

// sleef.h declares each variant only where the build enables its
// instruction set (#ifdef __AVX__, __AVX512F__), and this file is compiled
// for baseline x86-64: the macros are set for the declarations alone. The
// code below calls a variant only inside a function of its target, and that
// function only on a CPU that runs it.
#if !defined(__AVX__)
#define __AVX__ 1
#define ENCORE_UNDEF_AVX
#endif
#if !defined(__AVX512F__)
#define __AVX512F__ 1
#define ENCORE_UNDEF_AVX512F
#endif
#if defined(__clang__)   // clang also checks the callee's target before passing it a wide vector
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#endif
#include <sleef.h>
#if defined(__clang__)
#pragma clang attribute pop
#endif
#ifdef ENCORE_UNDEF_AVX
#undef __AVX__
#undef ENCORE_UNDEF_AVX
#endif
#ifdef ENCORE_UNDEF_AVX512F
#undef __AVX512F__
#undef ENCORE_UNDEF_AVX512F
#endif

namespace encore::cpu {
namespace {

// One loop per instruction set and function (GCC cannot take the address of
// a template with a target attribute, so these are macros); the tail is
// padded with ones (a value every function takes) into a full vector.
#define ENCORE_SLEEF_LOOP(W, load, store, call)                           \
  int64_t i = 0;                                                        \
  for (; i + W <= n; i += W) store(o + i, call(load(x + i)));           \
  if (i == n) return;                                                   \
  float buf[W];                                                         \
  for (int k = 0; k < W; ++k) buf[k] = 1.0f;                            \
  std::memcpy(buf, x + i, sizeof(float) * (n - i));                     \
  store(buf, call(load(buf)));                                          \
  std::memcpy(o + i, buf, sizeof(float) * (n - i));

#define ENCORE_SLEEF_VARIANT(tag, isa, V, W, load, store, set1, sfx)                                      \
  __attribute__((target(isa))) void exp_##tag(float* o, const float* x, int64_t n) {                   \
    ENCORE_SLEEF_LOOP(W, load, store, Sleef_expf##W##_u10##sfx)                                \
  }                                                                                                    \
  __attribute__((target(isa))) void log_##tag(float* o, const float* x, int64_t n) {                   \
    ENCORE_SLEEF_LOOP(W, load, store, Sleef_logf##W##_u10##sfx)                                \
  }                                                                                                    \
  __attribute__((target(isa))) void tanh_##tag(float* o, const float* x, int64_t n) {                  \
    ENCORE_SLEEF_LOOP(W, load, store, Sleef_tanhf##W##_u10##sfx)                               \
  }                                                                                                    \
  __attribute__((target(isa))) void erf_##tag(float* o, const float* x, int64_t n) {                   \
    erf_loop(o, x, n);   /* NOTE [ erf in double ] */                                                    \
  }                                                                                                    \
  __attribute__((target(isa))) void erf_fast_##tag(float* o, const float* x, int64_t n) {              \
    erf_fast_loop(o, x, n);   /* NOTE [ A float erf for GELU ] */                                      \
  }                                                                                                    \
  __attribute__((target(isa))) void pow_##tag(float* o, const float* x, float p, int64_t n) {          \
    const V vp = set1(p);                                                                              \
    auto pow_p = [vp](V v) __attribute__((target(isa))) { return Sleef_powf##W##_u10##sfx(v, vp); };   \
    ENCORE_SLEEF_LOOP(W, load, store, pow_p)                                                   \
  }

ENCORE_SLEEF_VARIANT(avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, avx512fnofma)
ENCORE_SLEEF_VARIANT(avx, "avx", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, avx)
ENCORE_SLEEF_VARIANT(sse2, "sse2", __m128, 4, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, sse2)
#undef ENCORE_SLEEF_VARIANT
#undef ENCORE_SLEEF_LOOP

using MapFn = void (*)(float*, const float*, int64_t);
using PowFn = void (*)(float*, const float*, float, int64_t);

struct Variant {
  const char* isa;
  const char* cpu_feature;   // for __builtin_cpu_supports
  MapFn exp, log, tanh, erf, erf_fast;
  PowFn pow;
};

#define ENCORE_VARIANT(tag, isa) \
  {isa, isa, &exp_##tag, &log_##tag, &tanh_##tag, &erf_##tag, &erf_fast_##tag, &pow_##tag}
constexpr Variant kVariants[] = {   // widest first
    ENCORE_VARIANT(avx512, "avx512f"),
    ENCORE_VARIANT(avx, "avx"),
    ENCORE_VARIANT(sse2, "sse2"),
};
#undef ENCORE_VARIANT

bool cpu_runs(const Variant& v) {
  // __builtin_cpu_supports needs a literal argument.
  if (std::strcmp(v.cpu_feature, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  if (std::strcmp(v.cpu_feature, "avx") == 0) return __builtin_cpu_supports("avx");
  return true;   // SSE2 is baseline x86-64
}

const Variant* widest() {
  __builtin_cpu_init();   // may run before libgcc's own constructor did
  for (const Variant& v : kVariants) {
    if (cpu_runs(v)) return &v;
  }
  return &kVariants[2];
}

// The variant every call uses: the widest, until vec_math_force picks
// another. A function-local static, so that a kernel run during another
// file's static initialization still finds it set.
const Variant*& current() {
  static const Variant* v = widest();
  return v;
}

}  // namespace

void vec_exp(float* o, const float* x, int64_t n) { current()->exp(o, x, n); }
void vec_log(float* o, const float* x, int64_t n) { current()->log(o, x, n); }
void vec_tanh(float* o, const float* x, int64_t n) { current()->tanh(o, x, n); }
void vec_erf(float* o, const float* x, int64_t n) { current()->erf(o, x, n); }
void vec_erf_fast(float* o, const float* x, int64_t n) { current()->erf_fast(o, x, n); }
void vec_pow(float* o, const float* x, float p, int64_t n) { current()->pow(o, x, p, n); }

bool vec_math_force(const char* isa) {
  for (const Variant& v : kVariants) {
    if (std::strcmp(v.isa, isa) == 0 && cpu_runs(v)) {
      current() = &v;
      return true;
    }
  }
  return false;
}

const char* vec_math_isa() { return current()->isa; }

}  // namespace encore::cpu

#else   // not x86-64: glibc's scalar functions, one element at a time (erf: ours)

namespace encore::cpu {

void vec_exp(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::exp(x[i]); }
void vec_log(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::log(x[i]); }
void vec_tanh(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(x[i]); }
void vec_erf(float* o, const float* x, int64_t n) { erf_loop(o, x, n); }
void vec_erf_fast(float* o, const float* x, int64_t n) { erf_fast_loop(o, x, n); }
void vec_pow(float* o, const float* x, float p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = std::pow(x[i], p);
}
bool vec_math_force(const char* isa) { return std::strcmp(isa, "scalar") == 0; }
const char* vec_math_isa() { return "scalar"; }

}  // namespace encore::cpu

#endif
