// SLEEF's no-FMA vector variants behind vec_math.h's array functions
// (NOTE [ Deterministic vector math ] in vec_math.h).
#include "src/backends/cpu/vec_math.h"

#include <cstring>

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
    ENCORE_SLEEF_LOOP(W, load, store, Sleef_erff##W##_u10##sfx)                                \
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
  MapFn exp, log, tanh, erf;
  PowFn pow;
};

#define ENCORE_VARIANT(tag, isa) {isa, isa, &exp_##tag, &log_##tag, &tanh_##tag, &erf_##tag, &pow_##tag}
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

#else   // not x86-64: glibc's scalar functions, one element at a time

#include <cmath>

namespace encore::cpu {

void vec_exp(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::exp(x[i]); }
void vec_log(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::log(x[i]); }
void vec_tanh(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(x[i]); }
void vec_erf(float* o, const float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) o[i] = std::erf(x[i]); }
void vec_pow(float* o, const float* x, float p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = std::pow(x[i], p);
}
bool vec_math_force(const char* isa) { return std::strcmp(isa, "scalar") == 0; }
const char* vec_math_isa() { return "scalar"; }

}  // namespace encore::cpu

#endif
